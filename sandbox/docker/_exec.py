"""Streaming exec: output as it arrives, stdin with a real EOF, and a kill that reaches every
process the command started.

Each exec carries a marker variable; a second exec, run as the same user, stops and kills every
process whose environment holds it (the engine cannot kill an exec). The end of the output
means the command exited; its exit code is then read by inspect, and stdin it never read is
dropped. The engine facts behind this are in docs/engine-notes.md, sections "exec: streams,
stdin, exit codes" and "Killing a command's process tree"; the attach stream itself is the
gateway's `ExecStream`.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import signal as _signal
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
from anyio.abc import TaskGroup

from .._backend import ProcessSpec
from .._errors import (
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    EngineUnavailable,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    StdinClosed,
)
from .._models import CommandResult, OutputChunk
from .._output import LazyText, OutputCapture, StreamName
from .._signals import parse_signal, signal_name
from ._gateway import Engine, EngineConflict, EngineNotFound, ExecStream, engine_address

MARKER_VAR = "SANDBOX_EXEC_ID"
STDIN_CHUNK = 1 << 20
#: How long a killed command may take to close its output before we stop waiting for it.
DRAIN_AFTER_KILL = 5.0

# POSIX sh (busybox ash, dash, bash): STOP then KILL every process whose environment holds the
# marker until none is left. STOP first so a fork loop cannot outrun the sweep.
_SWEEP_SH = r"""m="$1"; sig="$2"; i=0
while [ $i -lt 100 ]; do
  pids=""; unsure=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    [ -r "$d/environ" ] || continue
    # A failed read of a readable, still-present process is a failed fork (a fork bomb at
    # the pids limit), not proof of absence: look again rather than report success.
    e=$(tr '\0' '\n' < "$d/environ" 2>/dev/null) || { [ -e "$d" ] && unsure=1; continue; }
    case "$e" in
      *"$m"*) pids="$pids $p"
        # Stop and kill the whole process group at once with builtins (no fork needed), so a
        # fork bomb in it cannot outrun the sweep. runc makes each exec its own group leader.
        if [ "$sig" = KILL ] && read -r st < "$d/stat" 2>/dev/null; then
          set -- ${st##*) }
          if [ "${3:-1}" -gt 1 ] && [ "$3" != "$$" ]; then
            kill -STOP -"$3" 2>/dev/null; kill -KILL -"$3" 2>/dev/null
          fi
        fi;;
    esac
  done
  [ -z "$pids" ] && [ -z "$unsure" ] && exit 0
  if [ -n "$pids" ]; then
    if [ "$sig" = KILL ]; then kill -STOP $pids 2>/dev/null; fi
    kill -"$sig" $pids 2>/dev/null
  fi
  [ "$sig" = KILL ] || exit 0
  i=$((i+1)); sleep 0.02
done
exit 1"""

#: How long a command's output may stay open after its container stopped.
STOPPED_GRACE = 5.0

#: A sweep that could not finish (it could not fork, or found survivors) is run again.
SWEEP_ATTEMPTS = 5

Callback = Callable[[bytes], Any]
Finalizer = Callable[[CommandResult], Awaitable[CommandResult]]
"""Adds to a result what only the sandbox knows (usage during the command, OOM kills)."""


async def _call(callback: Callback | None, data: bytes) -> None:
    if callback is None:
        return
    result = callback(data)
    if inspect.isawaitable(result):
        await result


#: Linux's limits for a new program (execve): bytes per argument or environment string
#: (MAX_ARG_STRLEN, NUL included), and for all of them plus their pointers (a quarter of the
#: default 8 MiB stack). runc enforces them; gVisor is more lenient, but commands stay portable.
MAX_ARG_STRLEN = 128 << 10
ARG_MAX = 2 << 20
#: Kept free for the environment the container adds (image ENV, PATH, HOSTNAME, HOME).
ENV_RESERVE = 64 << 10


def _check_exec_size(argv: Sequence[str], env: Sequence[str]) -> None:
    """Refuse, before the engine sees it, a command Linux (or the engine) could not start.

    Otherwise a 200 KB argument comes back as exit 1 with runc's message on stderr (which a
    program could print too, so it cannot be trusted), and a 10 MB environment as the engine's
    "message length exceeds maximum message size" (4 MiB).
    """
    total = 0
    labelled = [(f"argv[{i}]", a) for i, a in enumerate(argv)]
    labelled += [(f"environment entry {e.partition('=')[0]!r} (KEY=value)", e) for e in env]
    for label, text in labelled:
        size = len(text.encode("utf-8", "surrogatepass")) + 1
        if size > MAX_ARG_STRLEN:
            raise CommandStartFailed(
                f"cannot start {argv[0]!r}: {label} is {size - 1} bytes, but Linux allows at "
                f"most {MAX_ARG_STRLEN - 1} bytes per argument or environment entry",
                details="pass large data through stdin or a file (write_file) instead",
            )
        total += size + 8
    if total > ARG_MAX - ENV_RESERVE:
        raise CommandStartFailed(
            f"cannot start {argv[0]!r}: its arguments and environment take {total} bytes, but "
            f"Linux allows about {ARG_MAX} bytes in all ({ENV_RESERVE} of them kept for the "
            "container's own environment)",
            details="pass large data through stdin or a file (write_file) instead",
        )


def _start_error(text: str, argv: Sequence[str], user: str, workdir: str) -> CommandStartFailed:
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
        return CommandStartFailed(
            f"cannot start {name!r}: its working directory {workdir!r} does not exist in the "
            "sandbox", details=text,
        )
    if "message length" in low and "maximum message size" in low:
        return CommandStartFailed(
            f"cannot start {name!r}: its arguments and environment exceed the engine's 4 MiB "
            "message limit", details=f"pass large data through stdin or a file; engine: {text}",
        )
    if "executable file not found" in low or "error finding executable" in low:
        return CommandNotFound(f"cannot start {name!r}: it was not found in the sandbox's PATH",
                               details=text)
    if "no such file or directory" in low:
        return CommandNotFound(
            f"cannot start {name!r}: it (or the interpreter its #! line names) does not exist "
            "in the sandbox", details=text)
    if "permission denied" in low:
        return CommandNotExecutable(
            f"cannot start {name!r}: it is not executable (no execute permission, a "
            "directory, or on a noexec mount)", details=text)
    return CommandStartFailed(f"could not start {name!r} in the sandbox", details=text)


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
    ) -> None:
        self._engine = engine
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
        self._stdin_closed = False
        self._stdin_lock = anyio.Lock()
        # Writers to stdin and the feeder; cancelled once the output ends (see _stop_stdin).
        self._stdin_scopes: set[anyio.CancelScope] = set()
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
                    self._stdin_scopes.discard(scope)
            if scope.cancelled_caught:
                self._raise_if_ended()

    def _raise_if_ended(self) -> None:
        if self._eof.is_set() or self._abandoned:
            raise StdinClosed(
                f"cannot write to the stdin of {self.argv[0]!r}: the command has exited "
                "(its output ended); input it did not read was dropped"
            )

    def _stop_stdin(self) -> None:
        """The output ended (or was abandoned): writes can never be read now; stop them."""
        for scope in list(self._stdin_scopes):
            scope.cancel()

    async def close_stdin(self) -> None:
        """Send EOF: the command sees the end of its input and ``cat`` ends."""
        async with self._stdin_lock:
            if self._stdin_closed:
                return
            self._stdin_closed = True
            self._stream.write_eof()

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
            if not self._drained and not self._abandoned:
                self._killed = True
                with anyio.CancelScope(shield=True):
                    await self._sweep_unread()
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
            tg.start_soon(self._feed, stdin)
        if self._timeout is not None or self._idle_timeout is not None:
            tg.start_soon(self._watchdog)

    async def _feed(self, stdin: bytes | AsyncIterable[bytes]) -> None:
        # Cancelled when the output ends: a command that exits without reading its input (or
        # is killed by its timeout) must not wait for input it will never read.
        with anyio.CancelScope() as scope:
            self._stdin_scopes.add(scope)
            if self._eof.is_set() or self._abandoned:
                scope.cancel()
            try:
                if isinstance(stdin, bytes):
                    await self.write_stdin(stdin)
                else:
                    async for piece in stdin:
                        if self._eof.is_set():
                            break
                        await self.write_stdin(piece)
            except (SandboxError, OSError, RuntimeError):
                # The command ended or closed its stdin before reading it all; like a pipe,
                # the rest is dropped and the result tells what the command did.
                pass
            finally:
                self._stdin_scopes.discard(scope)
        if not self._eof.is_set():
            with anyio.CancelScope(shield=True):
                await self.close_stdin()

    async def _start_failure(self, name: StreamName, data: bytes) -> bool:
        """Whether the first message is the engine saying the command could not start.

        The engine writes its error as one stdout line ending in CRLF, after marking the
        exec exited (code 126) with no Pid. Any command can print the same text, so only
        the Pid decides: the engine holds the exec's lock from the start until the Pid is
        set, so an inspect made after a started command's output always shows its Pid.
        """
        if name != "stdout" or not data.endswith(b"\r\n") or b"\n" in data[:-2] \
                or len(data) > 64 << 10:
            return False  # not one CRLF line: output (no inspect for most CRLF text)
        try:
            info = await self._engine.inspect_exec(self.exec_id, deadline=10)
        except SandboxError:
            return False  # deliver it as output; _build still sees Pid 0 if it never ran
        if info.get("Pid") or info.get("Running") or info.get("ExitCode") not in (126, 127):
            return False
        text = data.decode(errors="replace").strip()
        self._start_failed = _start_error(text, self.argv, self._user, self._workdir)
        return True

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
                    if await self._start_failure(name, data):
                        continue  # the engine's message, not output; EOF follows
                self._last_output = time.monotonic()
                self._capture.feed(name, data)
                await _call(self._callbacks[name], data)
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
            self._eof.set()
            self._stop_stdin()
            self._send.close()

    async def _watchdog(self) -> None:
        deadline = math.inf if self._timeout is None else self._t0 + self._timeout
        while not self._eof.is_set():
            now = time.monotonic()
            if now >= deadline:
                assert self._timeout is not None
                self._kill_reason = f"command timed out after {self._timeout:g} s"
                break
            wake = deadline
            if self._idle_timeout is not None:
                idle_at = self._last_output + self._idle_timeout
                if now >= idle_at:
                    self._kill_reason = (
                        f"command produced no output for {self._idle_timeout:g} s (idle timeout)"
                    )
                    break
                wake = min(wake, idle_at)
            with anyio.move_on_after(max(wake - now, 0.01)):
                await self._eof.wait()
        else:
            return
        self._killed = True
        await self._sweep("KILL")

    async def _sweep(self, signal: str) -> None:
        """Run the marker sweep in a second exec as the same user; fall back to nothing."""
        engine = self._engine
        with anyio.CancelScope(shield=True), anyio.move_on_after(30):
            for _attempt in range(SWEEP_ATTEMPTS):
                try:
                    killer = await engine.create_exec("kill the command", self.container_id, {
                        "Cmd": ["/bin/sh", "-c", _SWEEP_SH, "sandbox-kill",
                                f"{MARKER_VAR}={self._marker}", signal],
                        "User": self._user, "AttachStdout": True, "AttachStderr": True,
                    })
                    async with await engine.attach_exec("kill the command", killer) as s:
                        while await s.read_out("kill the command") is not None:
                            pass
                    done = await engine.inspect_exec(killer)
                except SandboxError:
                    break
                # Exit 0: nothing carrying the marker is left. Otherwise the sweep could not
                # start or finish (no free pid under a fork bomb): try again shortly.
                if done.get("ExitCode") == 0 or signal != "KILL":
                    break
                await anyio.sleep(0.2)
        if signal == "KILL" and not self._eof.is_set():
            # Normally the output ends at once. If it does not (the sweep could not run: the
            # container is paused, the engine is gone), stop reading so nobody waits forever.
            with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_AFTER_KILL):
                await self._eof.wait()
            if not self._eof.is_set():
                self._abandoned = True
                self._stop_stdin()
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
            await _first_of(self._eof, self._stopped_event)
            if not self._eof.is_set():
                await self._end_with_container()
            await self._eof.wait()  # bounded after a kill: see _sweep
            info = await self._exit_info()
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
        self._stop_stdin()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            await self._stream.close()
        assert self._stopped is not None
        raise self._stopped

    async def _exit_info(self) -> dict[str, Any]:
        info: dict[str, Any] = {}
        with anyio.move_on_after(5):
            while True:
                info = await self._engine.inspect_exec(self.exec_id)
                if not info.get("Running") and info.get("ExitCode") is not None:
                    return info
                if self._abandoned:
                    break  # it did not end when killed: waiting longer tells nothing new
                await anyio.sleep(0.05)
        return {"ExitCode": None, "Pid": 0, "Running": info.get("Running", False)}

    def _build(self, info: Mapping[str, Any]) -> CommandResult:
        end = datetime.now(UTC)
        cap = self._capture
        if self._start_failed is not None:
            raise self._start_failed
        out = cap.output()
        code_raw = info.get("ExitCode")
        pid = int(info.get("Pid") or 0)
        if pid == 0 and code_raw in (126, 127) and not self._killed:
            # Never started (no Pid), but the first message was not seen as the engine's.
            text = out.decode("combined").strip()
            raise _start_error(text, self.argv, self._user, self._workdir)
        timed_out = bool(self._kill_reason)
        exit_code = -1 if code_raw is None else int(code_raw)
        sig = signal_name(exit_code)
        if self._killed and not sig:
            sig = "SIGKILL"
        error = self._kill_reason
        if code_raw is None and not error:
            error = "the engine did not report an exit code"
        if self._abandoned:
            error = (error + "; " if error else "") + \
                "the command did not end when killed (is the container paused?)"
        if cap.truncated:
            error = (error + "; " if error else "") + "output truncated at max_output_bytes"
        return CommandResult(
            exit_code=exit_code,
            success=exit_code == 0 and not timed_out,
            stdout=LazyText(out, "stdout"),
            stderr=LazyText(out, "stderr"),
            combined=LazyText(out, "combined"),
            start_time=self.start_time,
            end_time=end,
            duration=timedelta(seconds=time.monotonic() - self._t0),
            error=error,
            signal=sig,
            process_id=pid,
            metadata={"container_id": self.container_id, "exec_id": self.exec_id},
            timed_out=timed_out,
            truncated=cap.truncated,
            stdout_bytes=out.stdout,
            stderr_bytes=out.stderr,
        )


async def _first_of(*events: anyio.Event) -> None:
    """Wait until any one of ``events`` is set."""
    async with anyio.create_task_group() as tg:
        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()
        for event in events:
            tg.start_soon(wait, event)


@contextlib.asynccontextmanager
async def _single_errors() -> AsyncIterator[None]:
    """Raise a task group's lone error as itself, so callers can ``except`` our error types."""
    try:
        yield
    except BaseExceptionGroup as group:
        errors = group.exceptions
        if len(errors) == 1 and not isinstance(errors[0], BaseExceptionGroup):
            raise errors[0] from errors[0].__cause__
        raise


@contextlib.asynccontextmanager
async def open_exec(
    engine: Engine, container_id: str, spec: ProcessSpec, *, attach_stdin: bool,
    on_stdout: Callback | None = None, on_stderr: Callback | None = None, iterate: bool = False,
    finalize: Finalizer | None = None,
) -> AsyncIterator[ExecProcess]:
    """Start ``spec`` in the container; on leaving, kill it if it still runs and close up."""
    argv, env, workdir, user, stdin = spec.argv, spec.env, spec.workdir, spec.user, spec.stdin
    max_output_bytes, time_limit, idle_timeout = (spec.max_output_bytes, spec.time_limit,
                                                  spec.idle_timeout)
    marker = uuid.uuid4().hex
    env_list = [f"{k}={v}" for k, v in env.items()] + [f"{MARKER_VAR}={marker}"]
    _check_exec_size(argv, env_list)
    body = {
        "Cmd": list(argv),
        "Env": env_list,
        "WorkingDir": workdir,
        "User": user,
        "AttachStdin": attach_stdin,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
    }
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
    stream = await engine.attach_exec("attach to the command", exec_id)
    proc: ExecProcess | None = None
    try:
        proc = ExecProcess(
            engine=engine, container_id=container_id, exec_id=exec_id, stream=stream,
            marker=marker, user=user, argv=argv, max_output_bytes=max_output_bytes,
            timeout=time_limit, idle_timeout=idle_timeout, on_stdout=on_stdout,
            on_stderr=on_stderr, iterate=iterate, finalize=finalize, workdir=workdir,
        )
        async with _single_errors(), anyio.create_task_group() as tg:
            proc.start(tg, stdin)
            if stdin is None and attach_stdin and not iterate:
                await proc.close_stdin()
            tg.start_soon(proc.finish)
            try:
                yield proc
            finally:
                await proc.aclose()
    finally:
        if proc is not None:
            # Also when a second asyncio cancel broke into the shielded sweep above.
            proc._send.close()
            proc._receive.close()
        with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
            # stdin the engine never took is dropped, or the socket would linger until taken.
            await stream.close()

