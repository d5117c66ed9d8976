"""One command's handle, whatever runs it: the state, output pump, capture, callbacks,
deadlines, stdin with a pipe's rules, ``wait``/``aclose`` and the result.

`ProcessBase` is what every backend's `Process` shares; a backend supplies a handful of hooks:

- `_sources`: the readers of its output, each returning ``(stream, bytes)`` or None at the end;
- `_write_in` / `_write_eof`: one piece of stdin, and EOF;
- `_signal_tree`: send a signal (a name: ``"KILL"``) to the command and all it started;
- `_conclude`: wait for the end and build the result (`make_result` does the shared part);
- `_close_stream`: stop reading output that does not end after a KILL.

The backend opens the command, makes the handle and runs it in `lifetime`, which starts the
pump, stdin feeder, watchdog and finisher in a task group and kills the command on leaving
(shielded, also on cancellation). Sessions use the shared parts too: `overdue` (the watchdog),
`make_result` and `unconfirmed_kill`.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal as _signal
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._errors import CommandStartFailed, EngineUnavailable, KillFailed, SandboxError, StdinClosed
from ._flag import Flag
from ._lazy_usage import LazyUsage
from ._models import CommandResult, OutputChunk, ResourceUsage, sdk_result
from ._output import LazyText, OutputCapture, StreamName, deliver
from ._signals import parse_signal
from ._tasks import single_errors
from ._validate import FrozenMap

__all__ = [
    "DRAIN_AFTER_KILL", "NO_USAGE", "Callback", "Finalizer", "ProcessBase", "Reader",
    "make_result", "overdue", "unconfirmed_kill",
]

#: How long a killed command may take to close its output before we stop waiting for it.
DRAIN_AFTER_KILL = 5.0
#: Output buffered for an iterating reader before the pump waits for it.
ITER_BUFFER = 16

Callback = Callable[[bytes], Any]
Finalizer = Callable[[CommandResult], Awaitable[CommandResult]]
"""Adds to a result what only the sandbox knows (usage during the command, OOM kills).

One that also has a ``measure()`` method (returning the command's `ResourceUsage`, a
`LazyUsage` of it, or None) is
asked for the usage when the command ended, so its result is built with it once (see
`ProcessBase._make_result`); it then adds only the rarer news (an OOM kill) itself."""

#: The usage of a result nobody measured; one frozen instance instead of one built per result.
NO_USAGE = ResourceUsage()
#: The metadata of a result that has none (immutable, so one serves all).
NO_METADATA = FrozenMap()
Reader = Callable[[], Awaitable[tuple[StreamName, bytes] | None]]
"""One output source of a command: the next chunk and its stream, None at the end."""


class ProcessBase:
    """A command running in a sandbox (see `sandbox.Process`).

    Iterate it for :class:`OutputChunk` values as they are produced, write to its stdin, send it
    signals, and ``await wait()`` for its :class:`CommandResult`.
    """

    #: Bytes per stdin write the backend's channel takes at once.
    STDIN_CHUNK: ClassVar[int] = 1 << 20
    #: The end of the output is the end of the command (else `_conclude` calls `_command_ended`).
    OUTPUT_ENDS_COMMAND: ClassVar[bool] = True
    #: Errors `_conclude` may raise that `wait` raises in place of a result.
    CONCLUDE_ERRORS: ClassVar[tuple[type[Exception], ...]] = (SandboxError,)
    #: `wait` may read the output and conclude in the caller's task when nothing else runs
    #: alongside (one source, no stdin, no time limits, no iteration): no task group and no
    #: two tasks per command. The backend then implements `_output_cut`.
    INLINE: ClassVar[bool] = False

    # The state that starts the same for every command, as class attributes: an instance
    # sets its own only when one changes. Set in ``__init__``, they made a handle's attributes
    # too many for the instances of a class to share one table of names, so each built a
    # dict of its own, resized as it grew (once per command).
    #: The channel to an iterating reader; none when nobody iterates (`execute_command`).
    _send: MemoryObjectSendStream[OutputChunk] | None = None
    _receive: MemoryObjectReceiveStream[OutputChunk] | None = None
    _readers = 0
    _drained = False  # a source ended normally: the command closed its output
    #: Set when the command could not start; raised instead of a result.
    _start_failed: CommandStartFailed | None = None
    _kill_reason = ""
    _killed = False
    #: The last KILL was seen to leave none of the command's processes.
    _kill_confirmed = False
    _abandoned = False  # its output did not end after a KILL; we stopped reading
    _closed = False  # aclose() ran
    _error: BaseException | None = None
    _result: CommandResult | None = None
    _stdin_closed = False
    _stdin_ended = False  # the command ended or was abandoned: writes cannot be read
    _stdin_lock_made: anyio.Lock | None = None  # see `_stdin_lock`
    _inline = False  # `wait` runs the command (see INLINE)
    _inline_started = False
    _cut_at = math.inf  # when an inline read gives up (see `_cut_after`)
    _inline_scope: asyncio.Timeout | None = None

    def __init__(
        self, argv: Sequence[str], *, max_output_bytes: int, timeout: float | None,
        idle_timeout: float | None, on_stdout: Callback | None = None,
        on_stderr: Callback | None = None, iterate: bool, finalize: Finalizer | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self._capture = OutputCapture(max_output_bytes)
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        self._callbacks: dict[StreamName, Callback | None] = {
            "stdout": on_stdout, "stderr": on_stderr,
        }
        self._iterate = iterate
        self._finalize = finalize
        self._measure: Callable[[], ResourceUsage | LazyUsage | None] | None = getattr(
            finalize, "measure", None)
        if iterate:
            self._send, self._receive = anyio.create_memory_object_stream[OutputChunk](
                ITER_BUFFER)
        # Flags, not anyio Events: most commands have no waiter on them (see `Flag`).
        self._eof = Flag()  # every output source ended (or failed)
        # The command is over: the end of its output, unless the backend knows it apart.
        self._ended = self._eof if self.OUTPUT_ENDS_COMMAND else Flag()
        self._done = Flag()  # the result (or the error) is there
        self._last_output = time.monotonic()
        # Writers and the feeder; cancelled once the command ends (see _stop_stdin).
        self._stdin_scopes: set[anyio.CancelScope] = set()
        self.start_time = datetime.now(UTC)
        self._t0 = time.monotonic()

    @property
    def _stdin_lock(self) -> anyio.Lock:
        """Serialises stdin writes and their close; made on first use (most commands take
        no stdin, and a lock per command was setup every exec paid). Made without an await,
        so two first users in one loop get the same lock."""
        lock = self._stdin_lock_made
        if lock is None:
            lock = self._stdin_lock_made = anyio.Lock()
        return lock

    # -- hooks -----------------------------------------------------------------------------

    def _sources(self) -> Sequence[Reader]:
        """The command's output sources (one pump each)."""
        raise NotImplementedError

    async def _write_in(self, data: bytes) -> None:
        """Send one piece of stdin (at most `STDIN_CHUNK` bytes)."""
        raise NotImplementedError

    async def _write_eof(self) -> None:
        """Send EOF on stdin."""
        raise NotImplementedError

    async def _signal_tree(self, signal: str) -> None:
        """Send ``signal`` (``"KILL"``, ``"TERM"``) to the command and all it started; with
        KILL set `_kill_confirmed` and return once its output ended (`_await_end_after_kill`)."""
        raise NotImplementedError

    async def _conclude(self) -> CommandResult:
        """Wait for the command to end and build its result (before the finalizer)."""
        raise NotImplementedError

    async def _close_stream(self) -> None:
        """Stop reading output that did not end after a KILL (the pump then ends)."""

    def _reader_waits(self) -> None:
        """The iterating reader took all output there is and waits for more (the scripted
        fake's replay waits for this)."""

    async def _kill_on_close(self) -> None:
        """Kill the command because the handle is closed before it ended."""
        await self._signal_tree("KILL")

    async def _output_cut(self) -> None:
        """An inline read was cut at `_cut_after`'s deadline: stop reading and raise why
        (one of `CONCLUDE_ERRORS`)."""
        raise NotImplementedError

    def _cut_after(self, seconds: float) -> None:
        """Give up the output if it has not ended ``seconds`` from now: an inline read is
        cancelled then (`_output_cut` follows); the backend's `_conclude` does this itself
        when it runs beside the pump."""
        self._cut_at = min(self._cut_at, anyio.current_time() + seconds)
        self._move_cut()

    def _move_cut(self) -> None:
        """Move a running inline read's deadline to `_cut_at` (an expired one stays)."""
        cut = self._inline_scope
        if cut is not None and not cut.expired():
            cut.reschedule(self._cut_at)

    # -- the public handle -------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        receive = self._receive
        if receive is None and not self._closed:
            await self._eof.wait()  # made not to be iterated: no chunks, the end at its end
        # Take what is buffered without a checkpoint per chunk (see _take); wait only when empty.
        while receive is not None:
            try:
                chunk = receive.receive_nowait()
            except anyio.WouldBlock:
                self._reader_waits()
                try:
                    chunk = await receive.receive()
                except anyio.EndOfStream:
                    break
            except anyio.EndOfStream:
                break
            yield chunk
        if self._start_failed is not None:
            raise self._start_failed

    @property
    def running(self) -> bool:
        """True until the command has ended."""
        return not self._ended.is_set()

    @property
    def result(self) -> CommandResult | None:
        """The command's result once ``wait()`` could return it, else None."""
        return self._result

    async def write_stdin(self, data: bytes | str) -> None:
        """Send bytes to the command's stdin.

        Waits while the command does not read (like a full pipe), but never past its end.

        Raises:
            StdinClosed: (a ``BrokenPipeError``) the command has exited, or stdin was closed;
                what it did not read is dropped.
        """
        if isinstance(data, str):
            data = data.encode()
        async with self._stdin_lock:
            if self._stdin_closed:
                raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: "
                                  "its stdin was already closed (close_stdin)")
            self._raise_if_ended()
            with anyio.CancelScope() as scope:
                self._stdin_scopes.add(scope)
                try:
                    for off in range(0, len(data), self.STDIN_CHUNK):
                        await self._write_in(data[off : off + self.STDIN_CHUNK])
                except EngineUnavailable:
                    # The channel drops right after the command ended its output; the pump
                    # may not have seen that end yet.
                    with anyio.move_on_after(1):
                        await self._ended.wait()
                    self._raise_if_ended()
                    raise
                finally:
                    self._stdin_scopes.discard(scope)
            if scope.cancelled_caught:
                self._raise_if_ended()

    async def close_stdin(self) -> None:
        """Send EOF: the command sees the end of its input and ``cat`` ends."""
        async with self._stdin_lock:
            if self._stdin_closed:
                return
            self._stdin_closed = True
            await self._write_eof()

    async def kill(self, signal: int | str = "KILL") -> None:
        """Send a signal (``9``, ``"TERM"``, ``"SIGINT"``, ``signal.SIGHUP``) to the command
        and every process it started.

        With KILL (the default) the sweep repeats until none of them is left.

        Raises:
            ValueError: ``signal`` names no signal.
        """
        name = _signal.Signals(parse_signal(signal)).name.removeprefix("SIG")
        if name == "KILL":
            self._killed = True
        await self._signal_tree(name)

    async def wait(self) -> CommandResult:
        """Wait for the command to end and return its result.

        Output not yet read through iteration is still captured in the result.
        """
        if self._receive is not None and not self._closed:
            async for _ in self._receive:
                pass
        if self._inline and not self._inline_started:
            self._inline_started = True
            await self._run_inline()
        if not self._done.is_set():  # an inline run has it: no checkpoint then
            await self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result

    async def aclose(self) -> None:
        """Kill the command if it still runs and drop output nobody read; idempotent.

        Leaving the ``stream_command`` block (normally, by an error, by a callback that raised
        or by cancellation) does this, so no command is left running in the sandbox.
        """
        if not self._closed:
            self._closed = True
            # First, so a pump blocked on a full buffer nobody reads drops output and reads on
            # (else the kill stalls on the unread output for its whole deadline).
            if self._receive is not None:
                self._receive.close()
            if self._needs_kill():
                self._killed = True
                with anyio.CancelScope(shield=True):
                    await self._kill_on_close()
        if self._receive is not None:
            self._receive.close()

    def release(self) -> None:
        """Close the output channel's both ends; the last step of `lifetime`, also when a
        second cancellation broke into the shielded `aclose`."""
        if self._send is not None:
            self._send.close()
        if self._receive is not None:
            self._receive.close()

    # -- running it ----------------------------------------------------------------------------

    def lifetime(self, stdin: bytes | AsyncIterable[bytes] | None, *,
                 close_stdin: bool = False) -> contextlib.AbstractAsyncContextManager[None]:
        """Run the handle's tasks for the block: pump, stdin feeder, watchdog, finisher; on
        leaving, kill the command if it still runs (shielded) and close the output channel.

        ``close_stdin``: send EOF at once (stdin is attached but nobody will write to it).
        A command `wait` runs inline (see INLINE) has no tasks: its block is a plain class,
        not a generator-based context manager (cheaper, once per command).
        """
        if (self.INLINE and stdin is None and not close_stdin and not self._iterate
                and self._timeout is None and self._idle_timeout is None
                and len(self._sources()) == 1):
            self._inline = True
            return _InlineLifetime(self)
        return self._task_lifetime(stdin, close_stdin)

    @contextlib.asynccontextmanager
    async def _task_lifetime(self, stdin: bytes | AsyncIterable[bytes] | None,
                             close_stdin: bool) -> AsyncIterator[None]:
        """`lifetime` with the pump, feeder, watchdog and finisher in a task group."""
        try:
            async with single_errors(), anyio.create_task_group() as tg:
                self._start(tg, stdin)
                if close_stdin:
                    await self.close_stdin()
                tg.start_soon(self._finish)
                try:
                    yield
                finally:
                    await self.aclose()
        finally:
            self.release()

    def _start(self, tg: TaskGroup, stdin: bytes | AsyncIterable[bytes] | None) -> None:
        sources = self._sources()
        self._readers = len(sources)
        for read in sources:
            tg.start_soon(self._pump, read)
        if stdin is not None:
            tg.start_soon(self._feed, stdin)
        if self._timeout is not None or self._idle_timeout is not None:
            tg.start_soon(self._watchdog)

    async def _pump(self, read: Reader) -> None:
        capture, callbacks, send = self._capture, self._callbacks, self._send
        try:
            while True:
                try:
                    got = await read()
                except SandboxError as exc:
                    if not self._killed:
                        self._error = self._error or exc
                    break
                if got is None:
                    self._drained = True
                    break
                name, data = got
                self._last_output = time.monotonic()
                capture.feed(name, data)
                await deliver(callbacks[name], data)
                if send is not None:
                    chunk = OutputChunk(stream=name, data=data)
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        # send() checkpoints on every chunk; skipping that while the buffer
                        # has room cuts the CPU per streamed chunk about 3x (bench/run.py).
                        try:
                            send.send_nowait(chunk)
                        except anyio.WouldBlock:
                            await send.send(chunk)
        finally:
            self._readers -= 1
            if self._readers <= 0:
                self._output_ended()

    def _output_ended(self) -> None:
        """Every source ended: close the iteration; the command is over if its output says so."""
        self._eof.set()
        if self._send is not None:
            self._send.close()
        if self.OUTPUT_ENDS_COMMAND:
            self._stop_stdin()

    def _command_ended(self) -> None:
        """The command is over (backends whose output may outlive it)."""
        self._ended.set()
        self._stop_stdin()

    def _needs_kill(self) -> bool:
        """Whether leaving the block must kill the command: its output did not end normally."""
        return not self._drained and not self._abandoned

    async def _feed(self, stdin: bytes | AsyncIterable[bytes]) -> None:
        """Write ``stdin`` (bytes or an async iterable of them), then send EOF."""
        # Cancelled when the command ends: one that exits without reading its input (or is
        # killed by its timeout) must not wait for input it will never read.
        with anyio.CancelScope() as scope:
            self._stdin_scopes.add(scope)
            if self._ended.is_set() or self._stdin_ended:
                scope.cancel()
            try:
                if isinstance(stdin, bytes):
                    await self.write_stdin(stdin)
                else:
                    async for piece in stdin:
                        if self._ended.is_set():
                            break
                        await self.write_stdin(piece)
            except (SandboxError, OSError, RuntimeError):
                # The command ended or closed its stdin before reading it all; like a pipe,
                # the rest is dropped and the result tells what the command did.
                pass
            finally:
                self._stdin_scopes.discard(scope)
        if not self._ended.is_set():
            with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError, OSError):
                await self.close_stdin()

    def _raise_if_ended(self) -> None:
        if self._ended.is_set() or self._stdin_ended:
            raise StdinClosed(
                f"cannot write to the stdin of {self.argv[0]!r}: the command has exited; "
                "input it did not read was dropped"
            )

    def _stop_stdin(self) -> None:
        """The command ended (or was abandoned): writes can never be read now; stop them."""
        self._stdin_ended = True
        for scope in list(self._stdin_scopes):
            scope.cancel()

    async def _watchdog(self) -> None:
        reason = await overdue(self._ended, self._t0, self._timeout, self._idle_timeout,
                               lambda: self._last_output)
        if not reason:
            return
        self._kill_reason = reason
        self._killed = True
        await self._signal_tree("KILL")

    async def _await_end_after_kill(self) -> None:
        """After a KILL the output normally ends at once. If it does not (the kill could not
        run: the container is paused, the engine is gone), stop reading so nobody waits
        forever."""
        if self._eof.is_set():
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_AFTER_KILL):
            await self._eof.wait()
        if not self._eof.is_set():
            self._abandoned = True
            self._stop_stdin()
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await self._close_stream()

    async def _run_inline(self) -> None:
        """Read the output to its end, then `_finish`, in the caller's task (see INLINE).

        Cancelling the caller ends the read like the pump's task (the block's `aclose` then
        kills the command); `_cut_after`'s deadline ends it too, and `_output_cut` says why.
        """
        self._readers = 1
        # asyncio's own Timeout rather than an anyio cancel scope: it costs a third as much,
        # and most reads never get a deadline (no timer then). A cancel from anywhere else
        # passes through it as the CancelledError it is (the task's cancel count).
        cut = asyncio.timeout_at(None if self._cut_at == math.inf else self._cut_at)
        self._inline_scope = cut
        cut_off = False
        try:
            async with cut:
                await self._pump(self._sources()[0])
        except TimeoutError:
            if not cut.expired():
                raise  # not the cut's: a callback's own
            cut_off = True
        finally:
            self._inline_scope = None
        if cut_off and not self._drained:
            try:
                await self._output_cut()
            except self.CONCLUDE_ERRORS as exc:
                self._error = self._error or exc
            finally:
                self._done.set()
            return
        await self._finish()

    async def _finish(self) -> None:
        """Wait for the end, build the result, let the sandbox add to it."""
        try:
            result = await self._conclude()
            if self._finalize is not None:
                result = await self._finalize(result)
            self._result = result
        except self.CONCLUDE_ERRORS as exc:
            self._error = self._error or exc
        finally:
            self._done.set()

    def _make_result(self, *, exit_code: int, signal: str, errors: Sequence[str],
                     process_id: int = 0, metadata: dict[str, str] | None = None,
                     ) -> CommandResult:
        """`make_result` with this handle's capture, timing and kill reason, and the usage
        the finalizer measured (when it can: see `Finalizer`)."""
        return make_result(
            self._capture, exit_code=exit_code, signal=signal, errors=errors,
            timed_out=bool(self._kill_reason), start_time=self.start_time, t0=self._t0,
            process_id=process_id, metadata=metadata,
            resource_usage=self._measure() if self._measure is not None else None)


class _InlineLifetime:
    """`ProcessBase.lifetime` for a command `wait` runs inline: nothing to start; on leaving
    (normally, by an error or a cancellation) `aclose` kills it if it still runs, shielded,
    and `release` closes up, also when a second cancellation broke into the kill."""

    __slots__ = ("_proc",)

    def __init__(self, proc: ProcessBase) -> None:
        self._proc = proc

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self._proc.aclose()
        finally:
            self._proc.release()


async def overdue(
    wake: anyio.Event | Flag, t0: float, time_limit: float | None, idle_timeout: float | None,
    last_output: Callable[[], float], *, floor: float = 0.01,
) -> str:
    """Wait until `wake` is set (the command ended; then return "") or a deadline passes
    (then say which, for the result): `time_limit` seconds after `t0`, or `idle_timeout`
    seconds after the ``time.monotonic()`` that `last_output` returns.
    """
    deadline = math.inf if time_limit is None else t0 + time_limit
    while not wake.is_set():
        now = time.monotonic()
        if now >= deadline:
            assert time_limit is not None
            return f"command timed out after {time_limit:g} s"
        wake_at = deadline
        if idle_timeout is not None:
            idle_at = last_output() + idle_timeout
            if now >= idle_at:
                return f"command produced no output for {idle_timeout:g} s (idle timeout)"
            wake_at = min(wake_at, idle_at)
        if wake_at == math.inf:  # no limit: no cancel scope to set up and leave
            await wake.wait()
            break
        with anyio.move_on_after(max(wake_at - now, floor)):
            await wake.wait()
    return ""


def unconfirmed_kill(what: str, details: str) -> KillFailed:
    """The error for a kill that did not happen as far as anyone can see: never report one
    as done (the command may run on, or have gone on to finish its work)."""
    return KillFailed(f"{what}, but the kill could not be confirmed: its processes may still "
                      "run", details=details)


def _str_items(mapping: dict[str, str]) -> bool:
    """Every key and value of ``mapping`` is a str (what `CommandResult` checks)."""
    for key, value in mapping.items():
        if type(key) is not str or type(value) is not str:
            return False
    return True


def make_result(
    capture: OutputCapture, *, exit_code: int, signal: str, errors: Sequence[str],
    timed_out: bool, start_time: datetime, t0: float, process_id: int = 0,
    metadata: dict[str, str] | None = None, success: bool | None = None,
    resource_usage: ResourceUsage | LazyUsage | None = None,
) -> CommandResult:
    """A command's result from its captured output and how it ended.

    ``errors``: what went wrong, in order (empty ones are skipped; truncation is added here);
    ``success``: None for "exit code 0 and no deadline passed"; ``t0``: the
    ``time.monotonic()`` of its start.
    """
    # Nothing came (`true`, most file operations): plain empty texts, nothing to decode later.
    out = capture.output() if capture.total_bytes else None
    error = "; ".join(filter(None, errors))  # the non-empty ones; no generator frame
    if capture.truncated:
        error = (error + "; " if error else "") + "output truncated at max_output_bytes"
    ran_ok = exit_code == 0 and not timed_out
    # The usual case, every value the SDK's own (a pid the engine reported and the metadata
    # are checked here): built without CommandResult's eighteen checks (`sdk_result`);
    # anything else goes through them below.
    if ((success is None or success is ran_ok) and type(exit_code) is int
            and type(process_id) is int and process_id >= 0
            and (not metadata or _str_items(metadata))):
        if out is None:
            texts: tuple[str | LazyText, ...] = ("", "", "")
            raw = (b"", b"")
        else:
            texts = (LazyText(out, "stdout"), LazyText(out, "stderr"),
                     LazyText(out, "combined"))
            raw = (out.stdout, out.stderr)
        return sdk_result(
            exit_code=exit_code, success=ran_ok, _stdout=texts[0], _stderr=texts[1],
            _combined=texts[2], start_time=start_time, end_time=datetime.now(UTC),
            duration=timedelta(seconds=time.monotonic() - t0),
            _resource_usage=NO_USAGE if resource_usage is None else resource_usage,
            error=error, signal=signal, process_id=process_id,
            metadata=FrozenMap(metadata) if metadata else NO_METADATA,
            timed_out=timed_out, oom_killed=False, truncated=capture.truncated,
            stdout_bytes=raw[0], stderr_bytes=raw[1])
    if out is None:
        out = capture.output()
    return CommandResult(
        exit_code=exit_code,
        success=ran_ok if success is None else success,
        stdout=LazyText(out, "stdout"),
        stderr=LazyText(out, "stderr"),
        combined=LazyText(out, "combined"),
        start_time=start_time,
        end_time=datetime.now(UTC),
        duration=timedelta(seconds=time.monotonic() - t0),
        error=error,
        signal=signal,
        process_id=process_id,
        metadata=metadata or {},
        timed_out=timed_out,
        truncated=capture.truncated,
        stdout_bytes=out.stdout,
        stderr_bytes=out.stderr,
        resource_usage=NO_USAGE if resource_usage is None else resource_usage,
    )
