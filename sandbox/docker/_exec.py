"""Streaming exec on the Docker engine: output as it arrives, stdin with a real EOF, and a kill
that reaches every process the command started.

`ExecProcess` is the handle (the shared machinery is `.._process_base.ProcessBase`; this
module supplies the engine's hooks) and `open_exec` starts one. The end of the output means the
command exited; its exit code is then read by inspect, and stdin it never read is dropped. When
the engine could not start a command it says so in the command's output: `read_start_failure`
tells that message from output by the exec's Pid. Killing is `_exec_kill` (from the host, or
the marker sweep in a second exec); `_exec_gate` keeps execs and freezes apart. The engine facts
behind this are in docs/engine-notes.md, sections "exec: streams, stdin, exit codes" and
"Killing a command's process tree"; the attach stream itself is the gateway's `ExecStream`.
"""


from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio

from .._backend import ProcessSpec
from .._errors import (
    CommandStartFailed,
    EngineTimeout,
    EngineUnavailable,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
)
from .._exec_start import check_exec_size, start_error
from .._flag import Flag
from .._models import CommandResult
from .._output import StreamName
from .._process_base import Callback, Finalizer, ProcessBase, Reader, unconfirmed_kill
from .._shield import finish_despite_cancel
from .._signals import signal_name
from .._sweep import MARKER_VAR
from .._tty import check_terminal_size
from ._exec_gate import ExecGate, wait_for_start
from ._exec_kill import kill_command, sweep
from ._gateway import (
    Engine,
    EngineConflict,
    EngineError,
    EngineNotFound,
    ExecStream,
    engine_address,
)

__all__ = ["ExecProcess", "Finalizer", "open_exec", "read_exit_info", "read_start_failure"]

#: How long a command's output may stay open after its container stopped.
STOPPED_GRACE = 5.0


class ExecProcess(ProcessBase):
    """A command running in the sandbox's container (see `sandbox.Process`)."""

    INLINE = True
    _first = True  # the next output is the first (class attributes: see ProcessBase's)
    _stopped: SandboxError | None = None  # why the container stopped under us

    def __init__(
        self, *, engine: Engine, container_id: str, exec_id: str, stream: ExecStream, marker: str,
        user: str, argv: Sequence[str], max_output_bytes: int, timeout: float | None,
        idle_timeout: float | None, on_stdout: Callback | None, on_stderr: Callback | None,
        iterate: bool, finalize: Finalizer | None = None, workdir: str = "",
        gate: ExecGate | None = None,
    ) -> None:
        super().__init__(argv, max_output_bytes=max_output_bytes, timeout=timeout,
                         idle_timeout=idle_timeout, on_stdout=on_stdout, on_stderr=on_stderr,
                         iterate=iterate, finalize=finalize)
        self._engine = engine
        self._gate = gate or ExecGate()
        self._workdir = workdir
        self.container_id = container_id
        self.exec_id = exec_id
        self._stream = stream
        self._marker = marker
        self._user = user
        # The output ended or the container stopped: one event for the finisher to wait on
        # (waiting for the first of two took a task group and two tasks per command).
        self._wake = Flag()

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
            self._wake.set()
            self._cut_after(STOPPED_GRACE)  # an inline read; else `_conclude` waits as long

    # -- hooks -------------------------------------------------------------------------------

    def _sources(self) -> Sequence[Reader]:
        return (self._read,)

    async def _read(self) -> tuple[StreamName, bytes] | None:
        while True:
            msg = await self._stream.read_out()
            if msg is None:
                return None
            name: StreamName = "stderr" if msg[0] == 2 else "stdout"
            data = bytes(msg[1])
            if self._first:
                self._first = False
                self._gate.confirmed(self.exec_id)
                self._start_failed = await read_start_failure(
                    self._engine, self.exec_id, name, data, self.argv, self._user,
                    self._workdir)
                if self._start_failed is not None:
                    continue  # the engine's message, not output; EOF follows
            return name, data

    def _output_ended(self) -> None:
        if self._drained:  # the engine ended it; a cancelled read says nothing of the start
            self._gate.confirmed(self.exec_id)
        super()._output_ended()
        self._wake.set()

    async def _write_in(self, data: bytes) -> None:
        await self._stream.write_in(data)

    async def _write_eof(self) -> None:
        self._stream.write_eof()

    async def _close_stream(self) -> None:
        await self._stream.close()

    async def _signal_tree(self, signal: str) -> None:
        """Signal the command's processes: a KILL from the host where the SDK can (nothing
        in the sandbox can starve it), else by the marker sweep exec; other signals by the
        sweep. A KILL records whether none of them was seen left."""
        if signal == "KILL":
            confirmed: list[bool] = []

            async def kill() -> None:
                confirmed.append(await kill_command(
                    self._engine, self.container_id, self.exec_id, self._user, self._marker,
                    self._gate))

            try:
                # In a task of its own: anyio's shield (kill_command's) does not hold off a
                # native Task.cancel(), and a second Ctrl-C while the kill ran left the
                # command running (tests/integration/test_exec_cancel.py).
                await finish_despite_cancel(kill())
            finally:
                self._kill_confirmed = bool(confirmed and confirmed[0])
            await self._await_end_after_kill()
        else:
            await sweep(self._engine, self.container_id, self._user, self._marker, signal,
                        self._gate)

    async def _kill_on_close(self) -> None:
        """Kill the command; if nothing reads its output any more (a callback raised), read
        and drop it meanwhile: unread output stalled every exec in the container, the sweep's
        too, for the sweep's whole 30 s (measured with ``cat /dev/zero``).
        """
        if not self._eof.is_set():  # the pump still reads
            await self._signal_tree("KILL")
            return

        async def drop() -> None:
            with contextlib.suppress(Exception):
                while await self._stream.read_out() is not None:
                    pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(drop)
            await self._signal_tree("KILL")
            tg.cancel_scope.cancel()

    async def _conclude(self) -> CommandResult:
        """Wait for EOF, read the exit code and build the result."""
        # Run inline, or after the pump: both set already, and no checkpoint is spent here.
        if not self._wake.is_set():
            await self._wake.wait()
        if not self._eof.is_set():
            await self._end_with_container()
            await self._eof.wait()  # bounded after a kill: see _await_end_after_kill
        info = await read_exit_info(self._engine, self.exec_id, abandoned=self._abandoned)
        if info.get("Running") and not self._killed:
            # The output ended but the command did not: the connection to the engine
            # broke (engine restart, closed client). Do not leave it running unseen.
            self._killed = True
            await self._signal_tree("KILL")
            raise EngineUnavailable(
                f"lost the output of {self.argv[0]!r}: the connection to the engine at "
                f"{engine_address()} broke while it ran; it was killed, run it again",
                retryable=True,
            )
        return self._build(info)

    async def _end_with_container(self) -> None:
        """The container stopped: give the output a moment to end, else stop reading."""
        with anyio.move_on_after(STOPPED_GRACE):
            await self._eof.wait()
        if self._eof.is_set():
            return  # the usual case: the engine ended the output, the result tells the rest
        await self._output_cut()

    async def _output_cut(self) -> None:
        """The container stopped and the output did not end within `STOPPED_GRACE`: stop
        reading, close the stream and raise why."""
        self._killed = self._abandoned = True
        self._stop_stdin()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self._stream.close()
        assert self._stopped is not None
        raise self._stopped

    def _build(self, info: Mapping[str, Any]) -> CommandResult:
        """The result of the exec whose inspect is `info`.

        Raises:
            CommandStartFailed: The command never started (no Pid); the output holds the
                engine's message.
            KillFailed: It was killed, but neither its exit status nor the kill shows it
                ended by a signal.
        """
        if self._start_failed is not None:
            raise self._start_failed
        code_raw = info.get("ExitCode")
        pid = int(info.get("Pid") or 0)
        killed, kill_reason = self._killed, self._kill_reason
        if pid == 0 and code_raw in (126, 127) and not killed:
            # Never started (no Pid), but the first message was not seen as the engine's.
            text = self._capture.output().decode("combined").strip()
            raise engine_start_error(text, self.argv, self._user, self._workdir)
        exit_code = -1 if code_raw is None else int(code_raw)
        sig = signal_name(exit_code)
        if killed and not sig and not self._kill_confirmed:
            raise unconfirmed_kill(
                f"{self.argv[0]!r}: {kill_reason or 'it was killed'}", details=(
                    "the command's output never ended (is the container paused?)"
                    if self._abandoned
                    else f"it ended by itself with exit code {exit_code}" if code_raw is not None
                    else "the engine reported no exit code"))
        if killed and not sig:
            sig = "SIGKILL"
        errors = [kill_reason or ("the engine did not report an exit code"
                                  if code_raw is None else "")]
        if self._abandoned:
            errors.append("the command's output did not end after the kill (is the container "
                          "paused? its processes die when it is thawed)")
        return self._make_result(
            exit_code=exit_code, signal=sig, errors=errors, process_id=pid,
            metadata={"container_id": self.container_id, "exec_id": self.exec_id})


#: Pauses between looks at an exec whose output ended before the engine recorded its exit; the
#: last repeats. The engine records it a moment after the output ends (it handles the exit
#: event from containerd on its own), mostly within a few milliseconds.
EXIT_RETRY = (0.002, 0.005, 0.01, 0.02, 0.05)
#: How long an exec's exit may take to show after its output ended.
EXIT_PATIENCE = 5.0


async def read_exit_info(engine: Engine, exec_id: str, *, abandoned: bool) -> dict[str, Any]:
    """The exec's inspect once it is no longer running (for up to 5 s), else no exit code.

    `abandoned`: it did not end when killed, so one look is enough.
    """
    # The first look bounded by its own call's deadline: no scope around it for the usual
    # case, where the exit is already recorded.
    # Its start on the monotonic clock: the running loop is looked up (on Python 3.11 a
    # getpid system call) only when the exit is not there at the first look.
    t0 = time.monotonic()
    try:
        info = await engine.inspect_exec(exec_id, deadline=EXIT_PATIENCE)
    except EngineTimeout:
        return {"ExitCode": None, "Pid": 0, "Running": False}
    if not info.get("Running") and info.get("ExitCode") is not None:
        return info
    if not abandoned:  # it did not end when killed: waiting longer tells nothing new
        # 5 s from the first look, on the loop's clock (anyio's on asyncio), read without
        # asking which backend runs.
        give_up = asyncio.get_running_loop().time() + EXIT_PATIENCE - (time.monotonic() - t0)
        with anyio.CancelScope(deadline=give_up):
            for attempt in itertools.count():
                await anyio.sleep(EXIT_RETRY[min(attempt, len(EXIT_RETRY) - 1)])
                info = await engine.inspect_exec(exec_id)
                if not info.get("Running") and info.get("ExitCode") is not None:
                    return info
    return {"ExitCode": None, "Pid": 0, "Running": info.get("Running", False)}


def engine_start_error(text: str, argv: Sequence[str], user: str,
                       workdir: str) -> CommandStartFailed:
    """Name the cause of a start failure from the engine's message.

    Only called when the engine said the process never started (Pid 0): then the text is the
    engine's, not something the command printed.
    """
    low = text.lower()
    name = argv[0]
    if "unable to find user" in low or "unable to find group" in low:
        kind = "group" if "unable to find group" in low else "user"
        return CommandStartFailed(
            f"cannot start {name!r}: the {kind} in user={user!r} does not exist in the sandbox "
            f"(no entry in its /etc/{'group' if kind == 'group' else 'passwd'})",
            details=f"use a numeric uid[:gid] or a {kind} the image defines; engine: {text}",
        )
    if "chdir to cwd" in low or "initial working directory" in low:
        return start_error(name, "workdir", workdir=workdir, details=text)
    if "message length" in low and "maximum message size" in low:
        return CommandStartFailed(
            f"cannot start {name!r}: its arguments and environment exceed the engine's 4 MiB "
            "message limit", details=f"pass large data through stdin or a file; engine: {text}",
        )
    if "executable file not found" in low or "error finding executable" in low:
        return start_error(name, "path", details=text)
    if "no such file or directory" in low:
        return start_error(name, "missing", details=text)
    if "permission denied" in low:
        return start_error(name, "notexec", details=text)
    return start_error(name, "other", details=text)


async def read_start_failure(
    engine: Engine, exec_id: str, name: StreamName, data: bytes, argv: Sequence[str], user: str,
    workdir: str,
) -> CommandStartFailed | None:
    """The error to raise if the first message is the engine saying the command could not
    start, else None (the message is output).

    The engine writes its error as one stdout line ending in CRLF, after marking the
    exec exited (code 126) with no Pid. Any command can print the same text, so only
    the Pid decides: the engine holds the exec's lock from the start until the Pid is
    set, so an inspect made after a started command's output always shows its Pid.
    """
    if name != "stdout" or not data.endswith(b"\r\n") or b"\n" in data[:-2] \
            or len(data) > 64 << 10:
        return None  # not one CRLF line: output (no inspect for most CRLF text)
    try:
        info = await engine.inspect_exec(exec_id, deadline=10)
    except SandboxError:
        return None  # deliver it as output; the result still sees Pid 0 if it never ran
    if info.get("Pid") or info.get("Running") or info.get("ExitCode") not in (126, 127):
        return None
    text = data.decode(errors="replace").strip()
    return engine_start_error(text, argv, user, workdir)


#: How long an exec whose attach failed may take to show it started (a Pid) or ended; a start
#: that never reached the engine shows neither, ever.
UNATTACHED_PATIENCE = 2.0


async def end_unattached(engine: Engine, container_id: str, exec_id: str, user: str,
                         marker: str, gate: ExecGate) -> None:
    """Kill the exec whose attach failed (a cancel, a broken connection) if the engine
    started it anyway: the start request may have reached it, and nobody would read or end
    the command (a cancelled ``execute_command("sleep 1000")`` left it running)."""
    info = None
    with anyio.move_on_after(UNATTACHED_PATIENCE):
        info = await wait_for_start(engine, exec_id)
    if info is None or (info.get("ExitCode") is not None and not info.get("Running")):
        return  # never started within the patience, gone, or it ran and ended
    await kill_command(engine, container_id, exec_id, user, marker, gate)


def open_exec(
    engine: Engine, container_id: str, spec: ProcessSpec, *, attach_stdin: bool,
    on_stdout: Callback | None = None, on_stderr: Callback | None = None, iterate: bool = False,
    finalize: Finalizer | None = None, gate: ExecGate | None = None,
) -> contextlib.AbstractAsyncContextManager[ExecProcess]:
    """Start ``spec`` in the container; on leaving, kill it if it still runs and close up.

    ``gate``: the container's `ExecGate` (a checkpoint holds the start); a private one else.
    """
    return _OpenExec(engine, container_id, spec, attach_stdin=attach_stdin, on_stdout=on_stdout,
                     on_stderr=on_stderr, iterate=iterate, finalize=finalize,
                     gate=gate or ExecGate())


class _OpenExec:
    """`open_exec`'s block: a plain class, not a generator-based context manager (entered
    once per command, and a generator's machinery cost more than the work around it)."""

    __slots__ = ("_args", "_exec_id", "_gate", "_lifetime", "_stream")

    def __init__(
        self, engine: Engine, container_id: str, spec: ProcessSpec, *, attach_stdin: bool,
        on_stdout: Callback | None, on_stderr: Callback | None, iterate: bool,
        finalize: Finalizer | None, gate: ExecGate,
    ) -> None:
        self._args = (engine, container_id, spec, attach_stdin, on_stdout, on_stderr, iterate,
                      finalize)
        self._gate = gate
        self._exec_id = ""
        self._stream: ExecStream | None = None
        self._lifetime: contextlib.AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> ExecProcess:
        engine, container_id, spec, attach_stdin, on_stdout, on_stderr, iterate, finalize = \
            self._args
        gate = self._gate
        argv, env, workdir, user, stdin = spec.argv, spec.env, spec.workdir, spec.user, spec.stdin
        marker = os.urandom(16).hex()  # as random as uuid4's, without building a UUID
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
        exec_id = ""
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
            # Closes itself if attaching fails; from here on it is closed in `_close`.
            stream = await engine.attach_exec("attach to the command", exec_id, tty=spec.tty,
                                              stdin=attach_stdin)
        except BaseException as exc:
            gate.started(None)  # before the kill: it closes the gate, which waits for starts
            if exec_id and not isinstance(exc, EngineError):
                # The start may have reached the engine (a cancel or a broken connection
                # while attaching; an error answer means it refused): then the command runs,
                # or starts in a moment, with nobody reading it.
                with contextlib.suppress(Exception):
                    await finish_despite_cancel(end_unattached(
                        engine, container_id, exec_id, user, marker, gate))
            raise
        gate.started(exec_id)
        self._exec_id, self._stream = exec_id, stream
        try:
            proc = ExecProcess(
                engine=engine, container_id=container_id, exec_id=exec_id, stream=stream,
                marker=marker, user=user, argv=argv, max_output_bytes=spec.max_output_bytes,
                timeout=spec.time_limit, idle_timeout=spec.idle_timeout, on_stdout=on_stdout,
                on_stderr=on_stderr, iterate=iterate, finalize=finalize, workdir=workdir,
                gate=gate,
            )
            lifetime = proc.lifetime(stdin, close_stdin=stdin is None and attach_stdin
                                     and not iterate)
            await lifetime.__aenter__()
        except BaseException:
            self._close()
            raise
        self._lifetime = lifetime
        return proc

    async def __aexit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> bool | None:
        assert self._lifetime is not None
        try:
            return await self._lifetime.__aexit__(typ, exc, tb)
        finally:
            self._close()

    def _close(self) -> None:
        self._gate.confirmed(self._exec_id)
        # stdin the engine never took is dropped, or the socket would linger until taken.
        # Without an await: nothing to shield from a cancellation.
        try:
            assert self._stream is not None
            self._stream.close_now()
        except Exception:  # closing what may be broken already
            pass
