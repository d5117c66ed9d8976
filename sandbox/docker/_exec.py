"""Streaming exec: output as it arrives, stdin with a real EOF, and a kill that reaches every
process the command started.

`ExecProcess` is the handle and `open_exec` starts one. The end of the output means the command
exited; its exit code is then read by inspect, and stdin it never read is dropped. The parts
live beside it: `_exec_start` (size checks, the engine's start failures), `_exec_stdin` (stdin
with a pipe's rules), `_exec_kill` (deadlines, and the marker sweep that kills the process
tree) and `_exec_result` (exit info -> `CommandResult`). The engine facts behind this are in
docs/engine-notes.md, sections "exec: streams, stdin, exit codes" and "Killing a command's
process tree"; the attach stream itself is the gateway's `ExecStream`.
"""

from __future__ import annotations

import contextlib
import signal as _signal
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .._backend import ProcessSpec
from .._errors import (
    CommandStartFailed,
    EngineUnavailable,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
)
from .._models import CommandResult, OutputChunk
from .._output import OutputCapture, StreamName, deliver
from .._signals import parse_signal
from .._tasks import first_of, single_errors
from .._tty import check_terminal_size
from ._exec_gate import ExecGate
from ._exec_kill import MARKER_VAR, kill_command, overdue, sweep
from ._exec_result import build_result, read_exit_info
from ._exec_start import check_exec_size, read_start_failure
from ._exec_stdin import ExecStdin
from ._gateway import Engine, EngineConflict, EngineNotFound, ExecStream, engine_address

#: How long a killed command may take to close its output before we stop waiting for it.
DRAIN_AFTER_KILL = 5.0
#: How long a command's output may stay open after its container stopped.
STOPPED_GRACE = 5.0

Callback = Callable[[bytes], Any]
Finalizer = Callable[[CommandResult], Awaitable[CommandResult]]
"""Adds to a result what only the sandbox knows (usage during the command, OOM kills)."""


class ExecProcess:
    """A command running in the sandbox.

    Iterate it for :class:`OutputChunk` values as they are produced, write to its stdin, send it
    signals, and ``await wait()`` for its :class:`CommandResult`.
    """

    def __init__(
        self, *, engine: Engine, container_id: str, exec_id: str, stream: ExecStream, marker: str,
        user: str, argv: Sequence[str], max_output_bytes: int, timeout: float | None,
        idle_timeout: float | None, on_stdout: Callback | None, on_stderr: Callback | None,
        iterate: bool, finalize: Finalizer | None = None, workdir: str = "",
        gate: ExecGate | None = None,
    ) -> None:
        self._engine = engine
        self._gate = gate or ExecGate()
        #: The last KILL was seen to leave none of the command's processes.
        self._kill_confirmed = False
        self._workdir = workdir
        #: Set when the engine could not start the command; raised instead of a result.
        self._start_failed: CommandStartFailed | None = None
        self._finalize = finalize
        self.container_id = container_id
        self.exec_id = exec_id
        self._stream = stream
        self._marker = marker
        self._user = user
        self.argv = tuple(argv)
        self._capture = OutputCapture(max_output_bytes)
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        self._callbacks: dict[StreamName, Callback | None] = {
            "stdout": on_stdout, "stderr": on_stderr,
        }
        self._iterate = iterate
        send, receive = anyio.create_memory_object_stream[OutputChunk](16)
        self._send = send
        self._receive = receive
        self._eof = anyio.Event()
        self._drained = False  # the engine ended the output: the command is over
        self._stopped: SandboxError | None = None  # why the container stopped under us
        self._stopped_event = anyio.Event()
        self._done = anyio.Event()
        self._stdin = ExecStdin(stream, self.argv[0], self._eof)
        self._last_output = time.monotonic()
        self._kill_reason = ""
        self._killed = False
        self._abandoned = False
        self._closed = False  # aclose() ran
        self._pump_error: BaseException | None = None
        self._result: CommandResult | None = None
        self.start_time = datetime.now(UTC)
        self._t0 = time.monotonic()

    # -- public handle -------------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        # Take what is buffered without a checkpoint per chunk (see _pump); wait only when empty.
        while True:
            try:
                chunk = self._receive.receive_nowait()
            except anyio.WouldBlock:
                try:
                    chunk = await self._receive.receive()
                except anyio.EndOfStream:
                    break
            except anyio.EndOfStream:
                break
            yield chunk
        if self._start_failed is not None:
            raise self._start_failed

    @property
    def running(self) -> bool:
        """True until the command's output has ended."""
        return not self._eof.is_set()

    @property
    def result(self) -> CommandResult | None:
        """The command's result once ``wait()`` could return it, else None."""
        return self._result

    async def write_stdin(self, data: bytes | str) -> None:
        """Send bytes to the command's stdin.

        Waits while the command does not read (like a full pipe), but never past the end of
        its output.

        Raises:
            StdinClosed: (a ``BrokenPipeError``) the command has exited, or stdin was closed;
                what it did not read is dropped.
        """
        await self._stdin.write(data)

    async def close_stdin(self) -> None:
        """Send EOF: the command sees the end of its input and ``cat`` ends."""
        await self._stdin.close()

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
        await self._sweep(name)

    async def resize(self, rows: int, cols: int) -> None:
        """Set the size of the command's terminal (``tty=True``); the engine ignores it
        without one. Raises `ConfigError` for a size outside 1..65535."""
        check_terminal_size(rows, cols)
        await self._engine.request("resize the command's terminal",
                                   f"exec/{self.exec_id}/resize", "POST",
                                   params={"h": rows, "w": cols})

    def container_stopped(self, error: SandboxError) -> None:
        """Tell the command its container stopped; `error` is raised if its output never ends.

        Under gVisor an exec's output stream can stay open after the sandbox died (measured:
        an OOM-killed runsc sandbox left execute_command waiting for good).
        """
        if self._stopped is None:
            self._stopped = error
            self._stopped_event.set()

    async def aclose(self) -> None:
        """Kill the command if it still runs and drop output nobody read; idempotent.

        Leaving the ``stream_command`` block (normally, by an error, by a callback that raised
        or by cancellation) does this, so no command is left running in the sandbox.
        """
        if not self._closed:
            self._closed = True
            # First, so a pump blocked on a full buffer nobody reads drops output and reads on
            # (else the kill's exec stalls on the unread output for its whole deadline).
            self._receive.close()
            if not self._drained and not self._abandoned:
                self._killed = True
                with anyio.CancelScope(shield=True):
                    await self._sweep_unread()
        self._receive.close()

    def release(self) -> None:
        """Close the output channel's both ends; the last step of `open_exec`, also when a
        second cancellation broke into the shielded `aclose`."""
        self._send.close()
        self._receive.close()

    async def wait(self) -> CommandResult:
        """Wait for the command to end and return its result.

        Output not yet read through iteration is still captured in the result.
        """
        if self._iterate and not self._closed:
            async for _ in self._receive:
                pass
        await self._done.wait()
        if self._pump_error is not None:
            raise self._pump_error
        assert self._result is not None
        return self._result

    # -- machinery -------------------------------------------------------------------------------

    def start(self, tg: TaskGroup, stdin: bytes | AsyncIterable[bytes] | None) -> None:
        tg.start_soon(self._pump)
        if stdin is not None:
            tg.start_soon(self._stdin.feed, stdin)
        if self._timeout is not None or self._idle_timeout is not None:
            tg.start_soon(self._watchdog)

    async def _pump(self) -> None:
        first = True
        try:
            while True:
                try:
                    msg = await self._stream.read_out()
                except SandboxError as exc:
                    if not self._killed:
                        self._pump_error = exc
                    break
                if msg is None:
                    self._drained = True
                    break
                name: StreamName = "stderr" if msg[0] == 2 else "stdout"
                data = bytes(msg[1])
                if first:
                    first = False
                    self._gate.confirmed(self.exec_id)
                    self._start_failed = await read_start_failure(
                        self._engine, self.exec_id, name, data, self.argv, self._user,
                        self._workdir)
                    if self._start_failed is not None:
                        continue  # the engine's message, not output; EOF follows
                self._last_output = time.monotonic()
                self._capture.feed(name, data)
                await deliver(self._callbacks[name], data)
                if self._iterate:
                    chunk = OutputChunk(stream=name, data=data)
                    with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                        # send() checkpoints on every chunk; skipping that while the buffer
                        # has room cuts the CPU per streamed chunk about 3x (bench/run.py).
                        try:
                            self._send.send_nowait(chunk)
                        except anyio.WouldBlock:
                            await self._send.send(chunk)
        finally:
            self._gate.confirmed(self.exec_id)
            self._eof.set()
            self._stdin.stop()
            self._send.close()

    async def _watchdog(self) -> None:
        reason = await overdue(self._eof, self._t0, self._timeout, self._idle_timeout,
                               lambda: self._last_output)
        if not reason:
            return
        self._kill_reason = reason
        self._killed = True
        await self._sweep("KILL")

    async def _sweep(self, signal: str) -> None:
        """Signal the command's processes: a KILL from the host where the SDK can (nothing
        in the sandbox can starve it), else by the marker sweep exec; other signals by the
        sweep. A KILL records whether none of them was seen left."""
        if signal == "KILL":
            self._kill_confirmed = await kill_command(
                self._engine, self.container_id, self.exec_id, self._user, self._marker,
                self._gate)
        else:
            await sweep(self._engine, self.container_id, self._user, self._marker, signal,
                        self._gate)
        if signal == "KILL" and not self._eof.is_set():
            # Normally the output ends at once. If it does not (the sweep could not run: the
            # container is paused, the engine is gone), stop reading so nobody waits forever.
            with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_AFTER_KILL):
                await self._eof.wait()
            if not self._eof.is_set():
                self._abandoned = True
                self._stdin.stop()
                with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                    await self._stream.close()

    async def _sweep_unread(self) -> None:
        """Kill the command; if nothing reads its output any more (a callback raised), read
        and drop it meanwhile: unread output stalled every exec in the container, the sweep's
        too, for the sweep's whole 30 s (measured with ``cat /dev/zero``).
        """
        if not self._eof.is_set():  # the pump still reads
            await self._sweep("KILL")
            return

        async def drop() -> None:
            with contextlib.suppress(Exception):
                while await self._stream.read_out() is not None:
                    pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(drop)
            await self._sweep("KILL")
            tg.cancel_scope.cancel()

    async def finish(self) -> None:
        """Wait for EOF, read the exit code and build the result."""
        try:
            await first_of(self._eof, self._stopped_event)
            if not self._eof.is_set():
                await self._end_with_container()
            await self._eof.wait()  # bounded after a kill: see _sweep
            info = await read_exit_info(self._engine, self.exec_id, abandoned=self._abandoned)
            if info.get("Running") and not self._killed:
                # The output ended but the command did not: the connection to the engine
                # broke (engine restart, closed client). Do not leave it running unseen.
                self._killed = True
                await self._sweep("KILL")
                raise EngineUnavailable(
                    f"lost the output of {self.argv[0]!r}: the connection to the engine at "
                    f"{engine_address()} broke while it ran; it was killed, run it again",
                    retryable=True,
                )
            result = self._build(info)
            if self._finalize is not None:
                result = await self._finalize(result)
            self._result = result
        except SandboxError as exc:
            self._pump_error = self._pump_error or exc
        finally:
            self._done.set()

    async def _end_with_container(self) -> None:
        """The container stopped: give the output a moment to end, else stop reading."""
        with anyio.move_on_after(STOPPED_GRACE):
            await self._eof.wait()
        if self._eof.is_set():
            return  # the usual case: the engine ended the output, the result tells the rest
        self._killed = self._abandoned = True
        self._stdin.stop()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self._stream.close()
        assert self._stopped is not None
        raise self._stopped

    def _build(self, info: Mapping[str, Any]) -> CommandResult:
        if self._start_failed is not None:
            raise self._start_failed
        return build_result(
            info, self._capture, argv=self.argv, user=self._user, workdir=self._workdir,
            killed=self._killed, kill_reason=self._kill_reason, abandoned=self._abandoned,
            kill_confirmed=self._kill_confirmed,
            start_time=self.start_time, t0=self._t0, container_id=self.container_id,
            exec_id=self.exec_id,
        )


@contextlib.asynccontextmanager
async def open_exec(
    engine: Engine, container_id: str, spec: ProcessSpec, *, attach_stdin: bool,
    on_stdout: Callback | None = None, on_stderr: Callback | None = None, iterate: bool = False,
    finalize: Finalizer | None = None, gate: ExecGate | None = None,
) -> AsyncIterator[ExecProcess]:
    """Start ``spec`` in the container; on leaving, kill it if it still runs and close up.

    ``gate``: the container's `ExecGate` (a checkpoint holds the start); a private one else.
    """
    gate = gate or ExecGate()
    argv, env, workdir, user, stdin = spec.argv, spec.env, spec.workdir, spec.user, spec.stdin
    max_output_bytes, time_limit, idle_timeout = (spec.max_output_bytes, spec.time_limit,
                                                  spec.idle_timeout)
    marker = uuid.uuid4().hex
    env_list = [f"{k}={v}" for k, v in env.items()] + [f"{MARKER_VAR}={marker}"]
    check_exec_size(argv, env_list)
    body = {
        "Cmd": list(argv),
        "Env": env_list,
        "WorkingDir": workdir,
        "User": user,
        "AttachStdin": attach_stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": spec.tty,
    }
    await gate.enter()  # held while a checkpoint freezes the container
    started = ""
    try:
        try:
            exec_id = await engine.create_exec("start a command", container_id, body)
        except EngineNotFound as exc:
            raise SandboxNotFound(
                "the sandbox's container is gone", details=exc.details, cause=exc
            ) from exc
        except EngineConflict as exc:
            raise SandboxNotRunning(
                "the sandbox's container is not running", details=exc.details, cause=exc
            ) from exc
        # Closes itself if attaching fails; from here on it is closed below.
        stream = await engine.attach_exec("attach to the command", exec_id, tty=spec.tty)
        started = exec_id
    finally:
        gate.started(started)
    proc: ExecProcess | None = None
    try:
        proc = ExecProcess(
            engine=engine, container_id=container_id, exec_id=exec_id, stream=stream,
            marker=marker, user=user, argv=argv, max_output_bytes=max_output_bytes,
            timeout=time_limit, idle_timeout=idle_timeout, on_stdout=on_stdout,
            on_stderr=on_stderr, iterate=iterate, finalize=finalize, workdir=workdir,
            gate=gate,
        )
        async with single_errors(), anyio.create_task_group() as tg:
            proc.start(tg, stdin)
            if stdin is None and attach_stdin and not iterate:
                await proc.close_stdin()
            tg.start_soon(proc.finish)
            try:
                yield proc
            finally:
                await proc.aclose()
    finally:
        gate.confirmed(exec_id)
        if proc is not None:
            # Also when a second asyncio cancel broke into the shielded sweep above.
            proc.release()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            # stdin the engine never took is dropped, or the socket would linger until taken.
            await stream.close()

