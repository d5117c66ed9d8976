"""Exec over the API server's websocket channel protocol, with the Docker backend's semantics.

Wire (Kubernetes ``remotecommand`` websocket, subprotocols ``v4.channel.k8s.io`` and
``v5.channel.k8s.io``): every binary message starts with one channel byte: 0 stdin (client to
server), 1 stdout, 2 stderr, 3 the error channel, which carries one JSON ``Status`` when the
process ended (``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the exit code
as the message of the cause ``ExitCode``), 4 terminal resize. v5 adds 255 ``close``: the
message ``[255, 0]`` half-closes stdin, so the command sees EOF. A message with no payload
(the server's "channel open") carries nothing.

Kubernetes exec takes only argv: no user, working directory or environment. So every command
runs under a small ``/bin/sh`` wrapper, started by ``env`` with a marker variable, that changes
directory, exports the environment, checks the program can start (reporting "not found" or
"not executable" with a nonce the command's output cannot know, so it cannot forge a start
failure) and ``exec``s it. The wrapper's own state (the nonce, the stdin mode) is fixed in
functions before the exports, so no variable of the command (``d``, ``n``, ``IFS``) bends it.
On a v4 server, where stdin cannot be closed, the wrapper reads stdin as length-prefixed frames (a
decimal length line, then that many bytes; ``0`` is EOF) and pipes it to the command. The
decoder first sends its own pid down the pipe, so when the command exits without reading
its input the exec still ends (the shell waits for every process of a pipeline): see below.
[kube-backend] The runtime (containerd's CRI) ends a v4 exec only once its copy of the client's
stdin ends, and that copy blocks for good writing into a pipe nobody reads; and if it closes the
stream while input is still arriving, the reset can lose the status. So when the command ends
the wrapper reports it (``<nonce>:exit:<code>``, last on stderr, stripped by the client) and
keeps draining frames; the client then stops writing (`StdinClosed`) and sends the end frame;
the decoder ends, and the exec ends with no input in flight. The code of the report is used only
if the status is lost all the same. The command could read the nonce and forge the report: that
only closes its own stdin early (it chooses its own exit code anyway, and the status wins).
Signals sent to the wrapper's shells are caught (the command
gets the default dispositions), so the command's own exit code is reported. The frames are
read with ``dd bs=1`` (busybox's ``head -c`` reads past its count from a pipe), about 1 MB/s:
the price of a server without v5, which every supported Kubernetes release has (1.30+).

A timeout or `kill` runs the Docker backend's marker sweep in a second exec: every process
whose environment holds the marker is stopped and killed, however it was started.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import signal as _signal
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
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
    StdinClosed,
)
from .._models import CommandResult, OutputChunk
from .._output import LazyText, OutputCapture, StreamName, deliver
from .._signals import parse_signal, signal_name
from .._tasks import single_errors
from .._tty import check_terminal_size
from ..docker._exec_kill import _SWEEP_SH, MARKER_VAR
from ..docker._exec_start import check_exec_size
from ._gateway import ExecSocket, ExecStreamLost

__all__ = ["ExecRefused", "KubeProcess", "open_exec", "parse_status", "wrap_argv"]

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255
STDIN_CHUNK = 256 << 10
#: How long a killed command may take to end its output before we stop waiting.
DRAIN_AFTER_KILL = 5.0
SWEEP_ATTEMPTS = 5
#: How long KILL keeps sweeping while the command's output has not ended.
KILL_PATIENCE = 30.0
#: The API server takes the argv in the URL; keep well below its 1 MiB request-line limit.
MAX_URL_ARGV = 512 << 10

_WRAP_SH = r"""n="$1"; d="$2"; f="$3"; shift 3
cd "$d" 2>/dev/null || { printf '%s:workdir\n' "$n" >&2; exit 126; }
eval "fail() { printf '%s:%s\\n' $n \"\$1\" >&2; exit \"\$2\"; }; framed() { [ $f = framed ]; }"
eval "ended() { printf '%s:exit:%s\\n' $n \"\$1\" >&2; }"
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do export "$1" || fail env 125; shift; done
shift
case $1 in
  */*) [ -e "$1" ] || fail notfound 127
       { [ -f "$1" ] && [ -x "$1" ]; } || fail notexec 126;;
  *) command -v "$1" >/dev/null 2>&1 || fail notfound 127;;
esac
framed || exec "$@"
trap : TERM INT HUP QUIT USR1 USR2
{ IFS=' ' read -r me _ < /proc/self/stat && echo "$me" || exit 1
  while IFS= read -r len && [ "$len" -gt 0 ] 2>/dev/null; do
    dd bs=1 count="$len" 2>/dev/null || exit 1; done
} 2>/dev/null | { trap : TERM INT HUP QUIT USR1 USR2; IFS=' ' read -r dec; "$@"; c=$?
  ended "$c"; cat >/dev/null; exit "$c"; }
"""

class ExecRefused(CommandStartFailed):
    """The runtime ended the exec with a status that has no exit code (e.g. the container is
    not running). [kube-backend] A distinct class so the backend can ask whether the Pod
    ended (then that is the error) without parsing messages."""


Callback = Callable[[bytes], Any]
Finalizer = Callable[[CommandResult], Awaitable[CommandResult]]
#: Runs the sweep (argv) in another exec, returns its exit code (None: it could not run).
Killer = Callable[[Sequence[str]], Awaitable[int | None]]


def wrap_argv(spec: ProcessSpec, *, marker: str, nonce: str, framed: bool) -> list[str]:
    """The argv that runs ``spec`` under the wrapper (environment, directory, start check)."""
    env = [f"{k}={v}" for k, v in spec.env.items()]
    check_exec_size(spec.argv, [f"{MARKER_VAR}={marker}", *env])
    # The marker through env(1), so the wrapper carries it from its first instruction: a
    # sweep that comes before the wrapper forked or exec'd still finds it.
    argv = ["env", f"{MARKER_VAR}={marker}", "/bin/sh", "-c", _WRAP_SH, "sandbox-exec", nonce,
            spec.workdir or "/", "framed" if framed else "plain", *env, "--", *spec.argv]
    size = sum(len(a.encode("utf-8", "surrogatepass")) * 3 for a in argv)
    if size > MAX_URL_ARGV:
        raise CommandStartFailed(
            f"cannot start {spec.argv[0]!r}: its arguments and environment take up to {size} "
            f"bytes of URL, over the {MAX_URL_ARGV} the SDK sends to the Kubernetes API server",
            details="pass large data through stdin or a file (write_file) instead")
    return argv


def parse_status(data: bytes) -> tuple[int | None, str]:
    """The exit code and message in an error-channel ``Status`` (None: no exit code in it)."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None, f"unreadable exec status: {data[:200]!r}"
    if not isinstance(doc, dict):
        return None, f"unreadable exec status: {data[:200]!r}"
    if doc.get("status") == "Success":
        return 0, ""
    message = str(doc.get("message") or "")[:2000]
    if doc.get("reason") == "NonZeroExitCode":
        causes = (doc.get("details") or {}).get("causes") or []
        for cause in causes if isinstance(causes, list) else []:
            if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
                try:
                    code = int(str(cause.get("message")))
                except ValueError:
                    break
                if 0 <= code <= 255:
                    return code, ""
    return None, message or "the exec failed without an exit code"


class KubeProcess:
    """A command running in the sandbox Pod (the `Process` handle)."""

    def __init__(self, *, sock: ExecSocket, argv: Sequence[str], marker: str, nonce: str,
                 framed: bool, killer: Killer, max_output_bytes: int,
                 timeout: float | None, idle_timeout: float | None,
                 on_stdout: Callback | None, on_stderr: Callback | None, iterate: bool,
                 workdir: str, finalize: Finalizer | None = None) -> None:
        self._sock = sock
        self.argv = tuple(argv)
        self.protocol = sock.protocol
        self._marker = marker
        self._start_prefix = f"{nonce}:".encode()
        self._framed = framed
        self._killer = killer
        self._capture = OutputCapture(max_output_bytes)
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        self._callbacks: dict[StreamName, Callback | None] = {"stdout": on_stdout,
                                                              "stderr": on_stderr}
        self._iterate = iterate
        self._workdir = workdir
        self._finalize = finalize
        send, receive = anyio.create_memory_object_stream[OutputChunk](16)
        self._send, self._receive = send, receive
        self._eof = anyio.Event()
        self._done = anyio.Event()
        self._status: bytes | None = None
        self._start_failed: CommandStartFailed | None = None
        self._first_stderr = True
        self._exit_suffix = re.compile(re.escape(nonce.encode()) + rb":exit:([0-9]{1,3})\n\Z")
        self._framed_exit: int | None = None  # [kube-backend] the v4 wrapper's exit report
        self._stdin_closed = False
        self._stdin_lock = anyio.Lock()
        self._last_output = time.monotonic()
        self._kill_reason = ""
        self._killed = False
        self._abandoned = False
        self._closed = False
        self._error: BaseException | None = None
        self._result: CommandResult | None = None
        self.start_time = datetime.now(UTC)
        self._t0 = time.monotonic()

    # -- the public handle -----------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        async for chunk in self._receive:
            yield chunk
        if self._start_failed is not None:
            raise self._start_failed

    @property
    def running(self) -> bool:
        return not self._eof.is_set()

    @property
    def result(self) -> CommandResult | None:
        return self._result

    async def write_stdin(self, data: bytes | str) -> None:
        """Send bytes to the command's stdin.

        Raises:
            StdinClosed: The command has exited, or stdin was closed.
        """
        if isinstance(data, str):
            data = data.encode()
        async with self._stdin_lock:
            self._raise_if_ended()
            if self._stdin_closed:
                raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: its stdin "
                                  "was already closed (close_stdin)")
            for off in range(0, len(data), STDIN_CHUNK):
                self._raise_if_ended()
                piece = data[off:off + STDIN_CHUNK]
                if self._framed:
                    piece = b"%d\n" % len(piece) + piece
                try:
                    await self._send_unless_ended(bytes([STDIN]) + piece)
                except ExecStreamLost:
                    self._raise_if_ended()
                    raise

    async def _send_unless_ended(self, message: bytes) -> None:
        """[kube-backend] Send one message, but stop waiting once the exec's stream ended.

        A server that stopped reading stdin (the command exited, the runtime stopped copying
        its input) leaves the send waiting in TCP flow control for good; the end of the
        output stream is what says the input will never be read (`StdinClosed`)."""
        ended, lost = False, None
        async with anyio.create_task_group() as tg:
            async def stop_at_eof() -> None:
                nonlocal ended
                await self._eof.wait()
                ended = True
                tg.cancel_scope.cancel()
            tg.start_soon(stop_at_eof)
            try:
                await self._sock.send(message)
            except ExecStreamLost as exc:  # raised bare, not in the task group's group
                lost = exc
            tg.cancel_scope.cancel()
        if ended:
            self._raise_if_ended()
        if lost is not None:
            raise lost

    def _raise_if_ended(self) -> None:
        if self._eof.is_set() or self._abandoned or self._framed_exit is not None:
            raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: the command "
                              "has exited; input it did not read was dropped")

    async def _end_frame(self) -> None:
        """[kube-backend] After the v4 wrapper's exit report: send its end frame (once), so
        its decoder, which drains until then, ends and the exec with it."""
        async with self._stdin_lock:
            if not self._stdin_closed:
                self._stdin_closed = True
                with contextlib.suppress(ExecStreamLost, StdinClosed):
                    await self._sock.send(bytes([STDIN]) + b"0\n")

    async def close_stdin(self) -> None:
        """Send EOF: v5's close message, or the v4 wrapper's end frame."""
        async with self._stdin_lock:
            if self._stdin_closed:
                return
            self._stdin_closed = True
            if self._eof.is_set():
                return
            message = bytes([STDIN]) + b"0\n" if self._framed else bytes([CLOSE, STDIN])
            if self.protocol != V5 and not self._framed:
                return  # v4 without the framing wrapper: EOF cannot be sent
            with contextlib.suppress(ExecStreamLost, StdinClosed):
                await self._send_unless_ended(message)  # [kube-backend] not a bare send

    async def kill(self, signal: int | str = "KILL") -> None:
        """Send ``signal`` to the command and everything it started (KILL: until none is left).

        Raises:
            ValueError: ``signal`` names no signal.
        """
        name = _signal.Signals(parse_signal(signal)).name.removeprefix("SIG")
        if name == "KILL":
            self._killed = True
        await self._sweep(name)

    async def resize(self, rows: int, cols: int) -> None:
        """Checked, then ignored: this backend runs commands without a terminal (tty=True is
        refused at start)."""
        check_terminal_size(rows, cols)

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
        """Kill the command if it still runs and drop output nobody read; idempotent."""
        if not self._closed:
            self._closed = True
            if not self._eof.is_set():
                self._killed = True
                with anyio.CancelScope(shield=True):
                    await self._sweep("KILL")
        self._receive.close()

    # -- machinery --------------------------------------------------------------------------

    def start(self, tg: TaskGroup, stdin: bytes | AsyncIterable[bytes] | None) -> None:
        tg.start_soon(self._pump)
        if stdin is not None:
            tg.start_soon(self._feed, stdin)
        if self._timeout is not None or self._idle_timeout is not None:
            tg.start_soon(self._watchdog)
        tg.start_soon(self._finish)

    async def _feed(self, stdin: bytes | AsyncIterable[bytes]) -> None:
        with anyio.CancelScope() as scope:
            async def stop_at_eof() -> None:
                await self._eof.wait()
                scope.cancel()
            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_at_eof)
                with contextlib.suppress(SandboxError, OSError):
                    if isinstance(stdin, bytes):
                        await self.write_stdin(stdin)
                    else:
                        async for piece in stdin:
                            await self.write_stdin(piece)
                    await self.close_stdin()
                tg.cancel_scope.cancel()

    async def _pump(self) -> None:
        try:
            async for data in self._sock.messages():
                if len(data) < 2:
                    continue  # "channel open", or nothing
                channel, payload = data[0], data[1:]
                if channel == ERROR:
                    self._status = (self._status or b"") + payload
                    continue
                if channel not in (STDOUT, STDERR):
                    continue
                name: StreamName = "stdout" if channel == STDOUT else "stderr"
                if name == "stderr" and self._framed:
                    found = self._exit_suffix.search(payload)
                    if found is not None:  # [kube-backend] the v4 wrapper's exit report
                        self._framed_exit = int(found.group(1))
                        payload = payload[:found.start()]
                        await self._end_frame()
                        if not payload:
                            continue
                if name == "stderr" and self._first_stderr:
                    self._first_stderr = False
                    if payload.startswith(self._start_prefix):
                        self._start_failed = _start_error(
                            payload[len(self._start_prefix):].decode(errors="replace").strip(),
                            self.argv, self._workdir)
                        continue
                self._last_output = time.monotonic()
                self._capture.feed(name, payload)
                await deliver(self._callbacks[name], payload)
                if self._iterate:
                    chunk = OutputChunk(stream=name, data=payload)
                    with contextlib.suppress(anyio.BrokenResourceError,
                                             anyio.ClosedResourceError):
                        await self._send.send(chunk)
        except ExecStreamLost as exc:
            if not self._killed:
                self._error = EngineUnavailable(f"lost the exec stream of {self.argv[0]!r}",
                                                details=exc.details, cause=exc, retryable=True)
        finally:
            self._eof.set()
            self._send.close()

    async def _watchdog(self) -> None:
        deadline = math.inf if self._timeout is None else self._t0 + self._timeout
        while not self._eof.is_set():
            now = time.monotonic()
            if now >= deadline:
                self._kill_reason = f"command timed out after {self._timeout:g} s"
                break
            wake = deadline
            if self._idle_timeout is not None:
                idle_at = self._last_output + self._idle_timeout
                if now >= idle_at:
                    self._kill_reason = (f"command produced no output for "
                                         f"{self._idle_timeout:g} s (idle timeout)")
                    break
                wake = min(wake, idle_at)
            with anyio.move_on_after(max(wake - now, 0.01)):
                await self._eof.wait()
        else:
            return
        self._killed = True
        await self._sweep("KILL")

    async def _sweep(self, signal: str) -> None:
        """Run the marker sweep in a second exec; for KILL, until the command's output ends.

        A sweep that finds nothing is not proof: the runtime may not have started the
        command yet when the kill comes right after the exec (seen on a loaded host), so KILL
        sweeps again until the exec's stream ends, for at most ``KILL_PATIENCE`` seconds.
        """
        argv = ["/bin/sh", "-c", _SWEEP_SH, "sandbox-kill", f"{MARKER_VAR}={self._marker}",
                signal]
        with anyio.CancelScope(shield=True), anyio.move_on_after(KILL_PATIENCE):
            failures = 0
            while not self._eof.is_set():
                try:
                    code = await self._killer(argv)
                except SandboxError:
                    failures += 1
                    if failures >= SWEEP_ATTEMPTS:
                        break
                    code = None
                if signal != "KILL":
                    break
                with anyio.move_on_after(0.5 if code == 0 else 0.2):
                    await self._eof.wait()
        if signal == "KILL" and not self._eof.is_set():
            with anyio.CancelScope(shield=True), anyio.move_on_after(DRAIN_AFTER_KILL):
                await self._eof.wait()
            if not self._eof.is_set():
                self._abandoned = True
                with anyio.CancelScope(shield=True):
                    await self._sock.close()

    async def _finish(self) -> None:
        try:
            await self._eof.wait()
            if self._status is None and self._framed_exit is not None and not self._killed:
                # [kube-backend] The runtime reset the stream (input was still arriving) and
                # lost the status: the wrapper's exit report has the code.
                self._status = json.dumps({"status": "Failure", "reason": "NonZeroExitCode",
                                           "details": {"causes": [{
                                               "reason": "ExitCode",
                                               "message": str(self._framed_exit)}]}}
                                          ).encode() if self._framed_exit else \
                    b'{"status":"Success"}'
            if self._status is None and not self._killed and self._start_failed is None:
                # The stream ended without the process's status: the connection broke, and
                # the command may run on unseen (closing an exec does not end it). Kill it.
                self._killed = True
                with anyio.CancelScope(shield=True), anyio.move_on_after(30), \
                        contextlib.suppress(SandboxError):
                    await self._killer(["/bin/sh", "-c", _SWEEP_SH, "sandbox-kill",
                                        f"{MARKER_VAR}={self._marker}", "KILL"])
                self._error = self._error or EngineUnavailable(
                    f"lost the exec stream of {self.argv[0]!r} before it reported its end; "
                    "it was killed, run it again", retryable=True)
            if self._error is None:
                result = self._build()
                if self._finalize is not None:
                    result = await self._finalize(result)
                self._result = result
        except SandboxError as exc:
            self._error = self._error or exc
        finally:
            self._done.set()

    def _build(self) -> CommandResult:
        if self._start_failed is not None:
            raise self._start_failed
        code, message = (None, "") if self._status is None else parse_status(self._status)
        if code is None and self._status is not None and not self._killed:
            raise ExecRefused(f"could not start {self.argv[0]!r} in the sandbox",
                              details=message)
        timed_out = bool(self._kill_reason)
        exit_code = -1 if code is None else code
        sig = signal_name(exit_code)
        if self._killed and not sig:
            sig = "SIGKILL"
        errors = [e for e in (self._kill_reason, message) if e]
        if self._abandoned:
            errors.append("the command did not end when killed")
        cap = self._capture
        if cap.truncated:
            errors.append("output truncated at max_output_bytes")
        out = cap.output()
        return CommandResult(
            exit_code=exit_code, success=exit_code == 0 and not timed_out,
            stdout=LazyText(out, "stdout"), stderr=LazyText(out, "stderr"),
            combined=LazyText(out, "combined"), start_time=self.start_time,
            end_time=datetime.now(UTC), duration=timedelta(seconds=time.monotonic() - self._t0),
            error="; ".join(errors), signal=sig, timed_out=timed_out, truncated=cap.truncated,
            metadata={"exec_protocol": self.protocol},
            stdout_bytes=out.stdout, stderr_bytes=out.stderr,
        )


def _start_error(kind: str, argv: Sequence[str], workdir: str) -> CommandStartFailed:
    name = argv[0]
    if kind == "notfound":
        return CommandNotFound(f"cannot start {name!r}: it was not found in the sandbox "
                               "(not in its PATH, or no such file)")
    if kind == "notexec":
        return CommandNotExecutable(f"cannot start {name!r}: it is not an executable file")
    if kind == "workdir":
        return CommandStartFailed(f"cannot start {name!r}: its working directory {workdir!r} "
                                  "does not exist in the sandbox (or is not searchable)")
    return CommandStartFailed(f"could not start {name!r} in the sandbox", details=kind)


Opener = Callable[[Sequence[str], bool], Awaitable[ExecSocket]]


@contextlib.asynccontextmanager
async def open_exec(opener: Opener, spec: ProcessSpec, *, killer: Killer, framed_v4: bool,
                    attach_stdin: bool, on_stdout: Callback | None = None,
                    on_stderr: Callback | None = None, iterate: bool = False,
                    finalize: Finalizer | None = None) -> AsyncIterator[KubeProcess]:
    """Start ``spec`` through ``opener``; on leaving, kill it if it still runs and close up.

    ``framed_v4``: the server is known to speak only v4, so stdin goes framed (see above).
    """
    marker, nonce = uuid.uuid4().hex, "sandbox-start-" + uuid.uuid4().hex
    framed = framed_v4 and attach_stdin
    argv = wrap_argv(spec, marker=marker, nonce=nonce, framed=framed)
    sock = await opener(argv, attach_stdin)
    proc: KubeProcess | None = None
    try:
        proc = KubeProcess(
            sock=sock, argv=spec.argv, marker=marker, nonce=nonce,
            framed=framed and sock.protocol == V4, killer=killer,
            max_output_bytes=spec.max_output_bytes, timeout=spec.time_limit,
            idle_timeout=spec.idle_timeout, on_stdout=on_stdout, on_stderr=on_stderr,
            iterate=iterate, workdir=spec.workdir, finalize=finalize)
        async with single_errors(), anyio.create_task_group() as tg:
            proc.start(tg, spec.stdin)
            if spec.stdin is None and attach_stdin and not iterate:
                await proc.close_stdin()
            try:
                yield proc
            finally:
                await proc.aclose()
    finally:
        if proc is not None:
            proc._send.close()
            proc._receive.close()
        with anyio.CancelScope(shield=True):
            await sock.close()
