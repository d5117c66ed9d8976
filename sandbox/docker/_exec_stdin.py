"""A command's stdin, with a pipe's rules: writes wait while the command does not read, never
past the end of its output, and EOF is real (``cat`` ends).

Input the command never read is dropped once its output ended, as a pipe drops it; the engine
facts are in docs/engine-notes.md, section "exec: streams, stdin, exit codes".
"""

from __future__ import annotations

from collections.abc import AsyncIterable

import anyio

from .._errors import EngineUnavailable, SandboxError, StdinClosed
from ._gateway import ExecStream

STDIN_CHUNK = 1 << 20


class ExecStdin:
    """The stdin side of one exec's attach stream.

    `eof` is set when the command's output ended; `stop` is called then, and when the output
    is abandoned (a kill that did not end it), so no write waits for input nobody will read.
    """

    def __init__(self, stream: ExecStream, name: str, eof: anyio.Event) -> None:
        self._stream = stream
        self._name = name
        self._eof = eof
        self._ended = False  # stop() ran: the output ended or was abandoned
        self._closed = False
        self._lock = anyio.Lock()
        # Writers and the feeder; cancelled once the output ends (see stop).
        self._scopes: set[anyio.CancelScope] = set()

    async def write(self, data: bytes | str) -> None:
        """Send bytes; see `ExecProcess.write_stdin`."""
        if isinstance(data, str):
            data = data.encode()
        async with self._lock:
            if self._closed:
                raise StdinClosed(f"cannot write to the stdin of {self._name!r}: "
                                  "its stdin was already closed (close_stdin)")
            self._raise_if_ended()
            with anyio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    for off in range(0, len(data), STDIN_CHUNK):
                        await self._stream.write_in(data[off : off + STDIN_CHUNK])
                except EngineUnavailable:
                    # The engine drops the connection right after it ended the output; the
                    # pump may not have seen that EOF yet.
                    with anyio.move_on_after(1):
                        await self._eof.wait()
                    self._raise_if_ended()
                    raise
                finally:
                    self._scopes.discard(scope)
            if scope.cancelled_caught:
                self._raise_if_ended()

    def _raise_if_ended(self) -> None:
        if self._eof.is_set() or self._ended:
            raise StdinClosed(
                f"cannot write to the stdin of {self._name!r}: the command has exited "
                "(its output ended); input it did not read was dropped"
            )

    def stop(self) -> None:
        """The output ended (or was abandoned): writes can never be read now; stop them."""
        self._ended = True
        for scope in list(self._scopes):
            scope.cancel()

    async def close(self) -> None:
        """Send EOF, once."""
        async with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stream.write_eof()

    async def feed(self, stdin: bytes | AsyncIterable[bytes]) -> None:
        """Write `stdin` (bytes or an async iterable of them), then send EOF."""
        # Cancelled when the output ends: a command that exits without reading its input (or
        # is killed by its timeout) must not wait for input it will never read.
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            if self._eof.is_set() or self._ended:
                scope.cancel()
            try:
                if isinstance(stdin, bytes):
                    await self.write(stdin)
                else:
                    async for piece in stdin:
                        if self._eof.is_set():
                            break
                        await self.write(piece)
            except (SandboxError, OSError, RuntimeError):
                # The command ended or closed its stdin before reading it all; like a pipe,
                # the rest is dropped and the result tells what the command did.
                pass
            finally:
                self._scopes.discard(scope)
        if not self._eof.is_set():
            with anyio.CancelScope(shield=True):
                await self.close()
