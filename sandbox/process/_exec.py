"""One command in a process sandbox, started by the fork server, output streamed apart.

`SandboxProcess` is the backend's `Process` handle and `open_command` starts one. Output is
read from two pipes as it comes (callbacks, iteration, a bounded capture); stdin is a pipe with
a real EOF; a deadline or `kill` reaches every process the command started (`_tree.sweep`).
The command ends when its first process exits; output still held open by something it left in the
background is read for `DRAIN_AFTER_EXIT` more seconds, then dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import os
import signal as _signal
import termios
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import attrs

from .._backend import ProcessSpec
from .._errors import (
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    KillFailed,
    StdinClosed,
)
from .._models import CommandResult, OutputChunk
from .._output import LazyText, OutputCapture, StreamName, deliver
from .._signals import parse_signal, signal_name
from .._tasks import single_errors
from .._tty import check_terminal_size
from ._spawner import RemoteProcess, SandboxSpawner, start
from ._tree import MARKER_VAR, sweep

#: How long output may stay open after the command exited (a background job holding it).
DRAIN_AFTER_EXIT = 2.0
#: How long a killed command's spawner may take to report its end.
KILL_GRACE = 5.0
_CHUNK = 64 << 10

Callback = Callable[[bytes], Any]


async def _read(reader: asyncio.StreamReader) -> bytes:
    """The next chunk; b"" at the end, which a pseudo-terminal's master says with EIO once
    every process holding its other side is gone."""
    try:
        return await reader.read(_CHUNK)
    except OSError as exc:
        if exc.errno == errno.EIO:
            return b""
        raise


class SandboxProcess:
    """A command running in a process sandbox (see `sandbox.Process`)."""

    def __init__(self, proc: RemoteProcess, spec: ProcessSpec, *, marker: str,
                 pid_ns: str, iterate: bool, on_stdout: Callback | None,
                 on_stderr: Callback | None) -> None:
        self._proc = proc
        self.argv = tuple(spec.argv)
        self._spec = spec
        self._marker = marker
        self._pid_ns = pid_ns
        self._iterate = iterate
        self._callbacks: dict[StreamName, Callback | None] = {
            "stdout": on_stdout, "stderr": on_stderr}
        self._capture = OutputCapture(spec.max_output_bytes)
        send, receive = anyio.create_memory_object_stream[OutputChunk](16)
        self._send, self._receive = send, receive
        self._exited = anyio.Event()
        self._done = anyio.Event()
        self._open_streams = 2
        self._streams_ended = anyio.Event()
        self._last_output = time.monotonic()
        self._killed = False
        self._kill_confirmed = True  # False once a KILL sweep saw survivors
        self._kill_reason = ""
        self._closed = False
        self._stdin_closed = proc.stdin is None
        self._stdin_lock = anyio.Lock()
        self._result: CommandResult | None = None
        self._error: BaseException | None = None
        self.start_time = datetime.now(UTC)
        self._t0 = time.monotonic()

    # -- the public handle -----------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        async for chunk in self._receive:
            yield chunk

    @property
    def running(self) -> bool:
        """True until the command has exited."""
        return not self._exited.is_set()

    @property
    def result(self) -> CommandResult | None:
        """The result once the command ended, else None."""
        return self._result

    async def write_stdin(self, data: bytes | str) -> None:
        """Write to stdin, waiting while the command does not read (a pipe's rules).

        Raises:
            StdinClosed: stdin was closed, or the command exited (what it did not read is
                dropped).
        """
        data = data.encode() if isinstance(data, str) else data
        async with self._stdin_lock:
            writer = self._proc.stdin
            if self._stdin_closed or writer is None:
                raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: its stdin "
                                  "was already closed (close_stdin)")
            if self._exited.is_set():
                raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: it exited")
            try:
                writer.write(data)
                await writer.drain()
            except (BrokenPipeError, ConnectionResetError) as exc:
                raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: it closed "
                                  "its stdin or exited", cause=exc) from exc

    async def close_stdin(self) -> None:
        """Close stdin: the command sees the end of its input."""
        async with self._stdin_lock:
            self._close_stdin_now()

    def _close_stdin_now(self) -> None:
        if not self._stdin_closed and self._proc.stdin is not None:
            self._stdin_closed = True
            with contextlib.suppress(Exception):
                self._proc.stdin.close()

    async def kill(self, signal: int | str = "KILL") -> None:
        """Send ``signal`` to the command and every process it started; KILL repeats until
        none is left."""
        number = parse_signal(signal)
        if number == _signal.SIGKILL:
            self._killed = True
        await self._sweep(number)

    async def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size (the program gets SIGWINCH); checked, then ignored for a
        command without a terminal."""
        check_terminal_size(rows, cols)
        if self._proc.terminal >= 0 and not self._exited.is_set():
            with contextlib.suppress(OSError):  # the command just ended
                termios.tcsetwinsize(self._proc.terminal, (rows, cols))

    async def wait(self) -> CommandResult:
        """Wait for the command to end and return its result."""
        if self._iterate and not self._closed:
            async for _ in self._receive:
                pass
        await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def aclose(self) -> None:
        """Kill the command if it still runs and drop unread output; idempotent."""
        if not self._closed:
            self._closed = True
            if not self._exited.is_set():
                self._killed = True
                with anyio.CancelScope(shield=True):
                    await self._sweep(_signal.SIGKILL)
        self._receive.close()

    # -- machinery -----------------------------------------------------------------------------

    async def _sweep(self, sig: int) -> None:
        if self._exited.is_set():
            return
        with anyio.CancelScope(shield=True):
            gone = await anyio.to_thread.run_sync(sweep, self._proc.pid, self._marker,
                                                  self._pid_ns, sig)
            if sig == _signal.SIGKILL:
                self._kill_confirmed = gone
            if sig == _signal.SIGKILL:
                with anyio.move_on_after(KILL_GRACE):  # reported once the joiner reaped it
                    await self._exited.wait()

    def start(self, tg: anyio.abc.TaskGroup,
              stdin: bytes | AsyncIterable[bytes] | None) -> None:
        assert self._proc.stdout is not None and self._proc.stderr is not None
        tg.start_soon(self._pump, "stdout", self._proc.stdout)
        tg.start_soon(self._pump, "stderr", self._proc.stderr)
        tg.start_soon(self._finish)
        if stdin is not None:
            tg.start_soon(self._feed, stdin)
        if self._spec.time_limit is not None or self._spec.idle_timeout is not None:
            tg.start_soon(self._watchdog)

    async def _pump(self, name: StreamName, reader: asyncio.StreamReader) -> None:
        try:
            while data := await _read(reader):
                self._last_output = time.monotonic()
                self._capture.feed(name, data)
                await deliver(self._callbacks[name], data)
                if self._iterate:
                    chunk = OutputChunk(stream=name, data=data)
                    with contextlib.suppress(anyio.BrokenResourceError,
                                             anyio.ClosedResourceError):
                        try:
                            self._send.send_nowait(chunk)
                        except anyio.WouldBlock:
                            await self._send.send(chunk)
        finally:
            self._open_streams -= 1
            if not self._open_streams:
                self._send.close()
                self._streams_ended.set()

    async def _feed(self, source: bytes | AsyncIterable[bytes]) -> None:
        with contextlib.suppress(StdinClosed):
            if isinstance(source, bytes):
                if source:
                    await self.write_stdin(source)
            else:
                async for piece in source:
                    await self.write_stdin(piece)
        await self.close_stdin()

    async def _watchdog(self) -> None:
        spec = self._spec
        deadline = math.inf if spec.time_limit is None else self._t0 + spec.time_limit
        while not self._exited.is_set():
            now = time.monotonic()
            if now >= deadline:
                self._kill_reason = f"command timed out after {spec.time_limit:g} s"
                break
            wake = deadline
            if spec.idle_timeout is not None:
                idle_at = self._last_output + spec.idle_timeout
                if now >= idle_at:
                    self._kill_reason = (f"command produced no output for "
                                         f"{spec.idle_timeout:g} s (idle timeout)")
                    break
                wake = min(wake, idle_at)
            with anyio.move_on_after(max(wake - now, 0.01)):
                await self._exited.wait()
        if self._kill_reason:
            self._killed = True
            await self._sweep(_signal.SIGKILL)

    async def _finish(self) -> None:
        try:
            code = await self._proc.wait()
            self._exited.set()
            self._close_stdin_now()
            with anyio.move_on_after(DRAIN_AFTER_EXIT):
                await self._streams_ended.wait()
            self._stop_reading()
            self._result = self._build(code)
        except BaseException as exc:
            self._error = exc
            self._stop_reading()
            if not isinstance(exc, Exception):
                raise
        finally:
            self._exited.set()
            self._done.set()

    def _stop_reading(self) -> None:
        """Stop waiting for output a background job still holds open."""
        self._send.close()
        for reader in (self._proc.stdout, self._proc.stderr):
            if reader is not None:
                reader.feed_eof()

    def _build(self, code: int) -> CommandResult:
        out = self._capture.output()
        sig = ""
        exit_code = code
        if code < 0:
            exit_code = 128 - code
            sig = signal_name(exit_code)
        elif self._killed and not self._kill_confirmed:
            # Never report a kill that did not happen (the sweep saw survivors).
            raise KillFailed(
                f"{self._spec.argv[0]!r}: {self._kill_reason or 'it was killed'}, but the "
                "kill could not be confirmed: its processes may still run",
                details=f"it ended by itself with exit code {code}")
        elif self._killed:
            sig = "SIGKILL"
        timed_out = bool(self._kill_reason)
        error = self._kill_reason
        if self._capture.truncated:
            error = (error + "; " if error else "") + "output truncated at max_output_bytes"
        return CommandResult(
            exit_code=exit_code, success=exit_code == 0 and not timed_out,
            stdout=LazyText(out, "stdout"), stderr=LazyText(out, "stderr"),
            combined=LazyText(out, "combined"), start_time=self.start_time,
            end_time=datetime.now(UTC), duration=timedelta(seconds=time.monotonic() - self._t0),
            error=error, signal=sig, process_id=self._proc.pid,
            metadata={"backend": "process"}, timed_out=timed_out,
            truncated=self._capture.truncated, stdout_bytes=out.stdout, stderr_bytes=out.stderr,
        )


def start_error(reason: str, argv: Sequence[str]) -> CommandStartFailed:
    """The error for a program that could not be executed, by ``strerror`` text."""
    name = argv[0]
    low = reason.lower()
    if "no such file" in low:
        return CommandNotFound(f"cannot start {name!r}: it was not found in the sandbox (not "
                               "in its PATH, or the interpreter its #! line names is missing)",
                               details=reason)
    if "permission denied" in low:
        return CommandNotExecutable(
            f"cannot start {name!r}: it is not executable (no execute permission, a "
            "directory, or on a noexec mount)", details=reason)
    return CommandStartFailed(f"could not start {name!r} in the sandbox", details=reason)


@attrs.frozen(kw_only=True)
class Entry:
    """How every command enters one sandbox (see `_spawner.start`)."""

    spawner: SandboxSpawner
    rlimits: tuple[tuple[int, int, int], ...]


@contextlib.asynccontextmanager
async def open_command(
    spec: ProcessSpec, *, entry: Entry, env: dict[str, str], workdir_fd: int, pid_ns: str,
    iterate: bool, on_stdout: Callback | None = None, on_stderr: Callback | None = None,
) -> AsyncIterator[SandboxProcess]:
    """Start ``spec`` in the sandbox ``entry`` enters; leaving kills it if it still runs."""
    marker = uuid.uuid4().hex
    env = {**env, MARKER_VAR: marker}
    try:
        proc = await start(entry.spawner, spec.argv, env=env, workdir_fd=workdir_fd,
                           attach_stdin=iterate or spec.stdin is not None,
                           rlimits=entry.rlimits, tty=spec.tty)
    except OSError as exc:
        raise start_error(exc.strerror or str(exc), spec.argv) from exc
    finally:
        os.close(workdir_fd)
    handle = SandboxProcess(proc, spec, marker=marker, pid_ns=pid_ns, iterate=iterate,
                            on_stdout=on_stdout, on_stderr=on_stderr)
    try:
        async with single_errors(), anyio.create_task_group() as tg:
            handle.start(tg, spec.stdin)
            try:
                yield handle
            finally:
                await handle.aclose()
    finally:
        handle._send.close()
        handle._receive.close()
        if proc.returncode is None:
            with anyio.CancelScope(shield=True):
                proc.kill()
                await proc.wait()
