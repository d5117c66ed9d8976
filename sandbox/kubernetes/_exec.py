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
The runtime (containerd's CRI) ends a v4 exec only once its copy of the client's
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

A session's shell (`ProcessSpec.sealed`) is started after a death watch (`._watch`): the
runtime reports an exec's end only once its output ends, which a job the shell left holds,
so a shell killed outright would not be seen; the watch then kills what it left. Its wrapper
is run by the shell's unreadable copy itself, not by ``env`` and ``/bin/sh`` (`_own_wrapper`):
no dumpable process ever holds the session's stdin, stdout or stderr.

`KubeProcess` is the handle (the shared machinery is `.._process_base.ProcessBase`; this
module supplies the websocket's hooks). A timeout or `kill` runs the marker sweep
(`.._sweep`) in a second exec: every process whose environment holds the marker is stopped and
killed, however it was started.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from typing import ClassVar

import anyio
from anyio.abc import TaskGroup

from .._backend import ProcessSpec
from .._errors import CommandStartFailed, EngineUnavailable, SandboxError
from .._exec_start import StartFault, check_exec_size, start_error
from .._models import CommandResult
from .._output import StreamName
from .._process_base import Callback, Finalizer, ProcessBase, Reader
from .._signals import signal_name
from .._sweep import MARKER_VAR, SWEEP_ATTEMPTS, sweep_argv
from .._tty import check_terminal_size
from ._gateway import ExecSocket, ExecStreamLost
from ._watch import WATCH_SH

__all__ = ["ExecRefused", "KubeProcess", "open_exec", "parse_status", "wrap_argv"]

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
STDIN, STDOUT, STDERR, ERROR, CLOSE = 0, 1, 2, 3, 255
STDIN_CHUNK = 256 << 10
#: How long KILL keeps sweeping while the command's output has not ended.
KILL_PATIENCE = 30.0
#: The API server takes the argv in the URL; keep well below its 1 MiB request-line limit.
MAX_URL_ARGV = 512 << 10

_WRAP_SH = r"""n="$1"; d="$2"; f="$3"; shift 3
if [ "$f" = watched ]; then
  /bin/sh -c "$1" sandbox-session-watch "$$" "$2" </dev/null >/dev/null 2>&1 &
  shift 2
fi
cd "$d" 2>/dev/null || { printf '%s:workdir\n' "$n" >&2; exit 126; }
eval "fail() { printf '%s:%s\\n' $n \"\$1\" >&2; exit \"\$2\"; }; framed() { [ $f = framed ]; }"
eval "ended() { printf '%s:exit:%s\\n' $n \"\$1\" >&2; }"
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  command export "$1" 2>/dev/null ||
    case ${1%%=*} in SHELLOPTS|BASHOPTS) ;; *) fail env 125;; esac
  shift
done
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

#: The wrapper as run by a session shell's unreadable copy (`_own_wrapper`): the exec's marker
#: first, so the death watch it forks carries it (the kill sweeps find the shell's group by it).
_SEALED_WRAP_SH = 'export "$1" || exit 125; shift\n' + _WRAP_SH
#: The names a session shell's unreadable copy has (`.._session_shell`).
_SHELL_NAMES = frozenset({"bash", "sh"})


class ExecRefused(CommandStartFailed):
    """The runtime ended the exec with a status that has no exit code (e.g. the container is
    not running). A distinct class so the backend can ask whether the Pod ended (then that is
    the error) without parsing messages."""


#: Runs the sweep (argv) in another exec, returns its exit code (None: it could not run).
Killer = Callable[[Sequence[str]], Awaitable[int | None]]


def wrap_argv(spec: ProcessSpec, *, marker: str, nonce: str, framed: bool,
              watched: bool = False) -> list[str]:
    """The argv that runs ``spec`` under the wrapper (environment, directory, start check).

    ``watched`` (a session's shell, not framed): the wrapper first starts the death watch
    (`._watch`), which ends what the shell left once it is killed outright."""
    env = [f"{k}={v}" for k, v in spec.env.items()]
    mark = f"{MARKER_VAR}={marker}"
    check_exec_size(spec.argv, [mark, *env])
    mode = ["framed"] if framed else ["watched", WATCH_SH, mark] if watched else ["plain"]
    tail = [nonce, spec.workdir or "/", *mode, *env, "--", *spec.argv]
    if watched and _own_wrapper(spec.argv):
        argv = [*spec.argv, "-c", _SEALED_WRAP_SH, "sandbox-exec", mark, *tail]
    else:
        # The marker through env(1), so the wrapper carries it from its first instruction: a
        # sweep that comes before the wrapper forked or exec'd still finds it.
        argv = ["env", mark, "/bin/sh", "-c", _WRAP_SH, "sandbox-exec", *tail]
    size = sum(len(a.encode("utf-8", "surrogatepass")) * 3 for a in argv)
    if size > MAX_URL_ARGV:
        raise CommandStartFailed(
            f"cannot start {spec.argv[0]!r}: its arguments and environment take up to {size} "
            f"bytes of URL, over the {MAX_URL_ARGV} the SDK sends to the Kubernetes API server",
            details="pass large data through stdin or a file (write_file) instead")
    return argv


def _own_wrapper(argv: Sequence[str]) -> bool:
    """Whether a session's shell ``argv`` runs its own wrapper: a shell by absolute path
    reading its commands from stdin (no ``-c``), which is how a session starts the unreadable
    copy (`.._session_shell.shell_argv`).

    The exec's first program holds its stdin, stdout and stderr. A readable one (``env``,
    ``/bin/sh``) is dumpable until it ``exec``s the copy: a process of the sandbox user that
    sees it then (its argv is public; it may stop it) opens those pipes through
    ``/proc/<pid>/fd`` and keeps them, reading every later command, nonces and success token
    included, and writing end markers. Run by the copy itself, with the same options, the
    wrapper is non-dumpable from its first instruction, and so is the fork that becomes the
    death watch until its redirections are done. The ``exec`` at its end starts the copy
    again: no more execs than before (``env``, ``sh``, the shell), no round trip added.
    """
    return (bool(argv) and argv[0].startswith("/") and "-c" not in argv
            and argv[0].rsplit("/", 1)[-1] in _SHELL_NAMES)


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


class KubeProcess(ProcessBase):
    """A command running in the sandbox Pod (the `Process` handle)."""

    STDIN_CHUNK: ClassVar[int] = STDIN_CHUNK

    def __init__(self, *, sock: ExecSocket, argv: Sequence[str], marker: str, nonce: str,
                 framed: bool, killer: Killer, max_output_bytes: int,
                 timeout: float | None, idle_timeout: float | None,
                 on_stdout: Callback | None, on_stderr: Callback | None, iterate: bool,
                 workdir: str, finalize: Finalizer | None = None) -> None:
        super().__init__(argv, max_output_bytes=max_output_bytes, timeout=timeout,
                         idle_timeout=idle_timeout, on_stdout=on_stdout, on_stderr=on_stderr,
                         iterate=iterate, finalize=finalize)
        self._sock = sock
        self._messages = sock.messages()
        self.protocol = sock.protocol
        self._marker = marker
        self._start_prefix = f"{nonce}:".encode()
        self._framed = framed
        self._killer = killer
        self._workdir = workdir
        self._status: bytes | None = None
        self._first_stderr = True
        self._exit_suffix = re.compile(re.escape(nonce.encode()) + rb":exit:([0-9]{1,3})\n\Z")
        self._framed_exit: int | None = None  # the v4 wrapper's exit report
        self._end_sent = False  # the v4 wrapper's end frame went out
        self._tg: TaskGroup | None = None

    def _start(self, tg: TaskGroup, stdin: bytes | AsyncIterable[bytes] | None) -> None:
        self._tg = tg  # for the end frame, sent beside the pump (see _read)
        super()._start(tg, stdin)

    def _raise_if_ended(self) -> None:
        if self._framed_exit is not None:
            self._stdin_ended = True
        super()._raise_if_ended()

    async def resize(self, rows: int, cols: int) -> None:
        """Checked, then ignored: this backend runs commands without a terminal (tty=True is
        refused at start)."""
        check_terminal_size(rows, cols)

    # -- hooks --------------------------------------------------------------------------------

    def _sources(self) -> Sequence[Reader]:
        return (self._read,)

    async def _read(self) -> tuple[StreamName, bytes] | None:
        """The next output message; the error channel's ``Status`` is kept, the wrapper's
        start report (behind the nonce) becomes `_start_failed`."""
        try:
            async for data in self._messages:
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
                    if found is not None:  # the v4 wrapper's exit report
                        self._framed_exit = int(found.group(1))
                        payload = payload[:found.start()]
                        if self._tg is not None:
                            # Beside the pump: a writer may hold the stdin lock meanwhile.
                            self._tg.start_soon(self._end_frame)
                        if not payload:
                            continue
                if name == "stderr" and self._first_stderr:
                    self._first_stderr = False
                    if payload.startswith(self._start_prefix):
                        self._start_failed = _start_error(
                            payload[len(self._start_prefix):].decode(errors="replace").strip(),
                            self.argv, self._workdir)
                        continue
                return name, payload
        except ExecStreamLost as exc:
            raise EngineUnavailable(f"lost the exec stream of {self.argv[0]!r}",
                                    details=exc.details, cause=exc, retryable=True) from exc
        return None

    async def _write_in(self, data: bytes) -> None:
        # After the v4 wrapper's exit report the command reads no more: `StdinClosed`.
        self._raise_if_ended()
        if self._framed:
            data = b"%d\n" % len(data) + data
        await self._sock.send(bytes([STDIN]) + data)

    async def _write_eof(self) -> None:
        """Send EOF: v5's close message, or the v4 wrapper's end frame."""
        if self._eof.is_set() or self._end_sent:
            return
        message = bytes([STDIN]) + b"0\n" if self._framed else bytes([CLOSE, STDIN])
        if self.protocol != V5 and not self._framed:
            return  # v4 without the framing wrapper: EOF cannot be sent
        self._end_sent = True
        with contextlib.suppress(ExecStreamLost):
            await self._send_unless_ended(message)

    async def _end_frame(self) -> None:
        """After the v4 wrapper's exit report: send its end frame (once), so its decoder,
        which drains until then, ends and the exec with it."""
        async with self._stdin_lock:
            await self._write_eof()

    async def _send_unless_ended(self, message: bytes) -> None:
        """Send one message, but stop waiting once the exec's stream ended.

        A server that stopped reading stdin (the command exited, the runtime stopped copying
        its input) leaves the send waiting in TCP flow control for good; the end of the
        output stream says the input will never be read."""
        lost: ExecStreamLost | None = None
        async with anyio.create_task_group() as tg:
            async def stop_at_eof() -> None:
                await self._eof.wait()
                tg.cancel_scope.cancel()
            tg.start_soon(stop_at_eof)
            try:
                await self._sock.send(message)
            except ExecStreamLost as exc:  # raised bare, not in the task group's group
                lost = exc
            tg.cancel_scope.cancel()
        if lost is not None:
            raise lost

    async def _close_stream(self) -> None:
        await self._sock.close()

    async def _signal_tree(self, signal: str) -> None:
        """Run the marker sweep in a second exec; for KILL, until the command's output ends.

        A sweep that finds nothing is not proof: the runtime may not have started the
        command yet when the kill comes right after the exec (seen on a loaded host), so KILL
        sweeps again until the exec's stream ends, for at most ``KILL_PATIENCE`` seconds.
        """
        argv = sweep_argv(self._marker, signal)
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
        if signal == "KILL":
            await self._await_end_after_kill()

    async def _conclude(self) -> CommandResult:
        await self._eof.wait()
        if self._status is None and self._framed_exit is not None and not self._killed:
            # The runtime reset the stream (input was still arriving) and lost the status:
            # the wrapper's exit report has the code.
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
                await self._killer(sweep_argv(self._marker, "KILL"))
            self._error = self._error or EngineUnavailable(
                f"lost the exec stream of {self.argv[0]!r} before it reported its end; "
                "it was killed, run it again", retryable=True)
        if self._error is not None:
            raise self._error
        return self._build()

    def _build(self) -> CommandResult:
        if self._start_failed is not None:
            raise self._start_failed
        code, message = (None, "") if self._status is None else parse_status(self._status)
        if code is None and self._status is not None and not self._killed:
            refused = start_error(self.argv[0], "other", details=message)
            raise ExecRefused(refused.message, details=message)
        exit_code = -1 if code is None else code
        sig = signal_name(exit_code)
        if self._killed and not sig:
            sig = "SIGKILL"
        errors = [self._kill_reason, message]
        if self._abandoned:
            errors.append("the command did not end when killed")
        return self._make_result(exit_code=exit_code, signal=sig, errors=errors,
                                 metadata={"exec_protocol": self.protocol})


def _start_error(kind: str, argv: Sequence[str], workdir: str) -> CommandStartFailed:
    """The error for the wrapper's start report ``kind`` (notfound, notexec, workdir, env)."""
    fault: StartFault = kind if kind in ("notfound", "notexec", "workdir") else "other"  # type: ignore[assignment]
    return start_error(argv[0], fault, workdir=workdir,
                       details="" if fault != "other" else kind)


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
    # A session's shell takes its input straight from the exec's stdin: through the decoder,
    # dumpable processes of the sandbox user, any process of that user read every command,
    # nonces and success token included. It never needs an end of input (`ProcessSpec.sealed`).
    framed = framed_v4 and attach_stdin and not spec.sealed
    argv = wrap_argv(spec, marker=marker, nonce=nonce, framed=framed, watched=spec.sealed)
    sock = await opener(argv, attach_stdin)
    try:
        proc = KubeProcess(
            sock=sock, argv=spec.argv, marker=marker, nonce=nonce,
            framed=framed and sock.protocol == V4, killer=killer,
            max_output_bytes=spec.max_output_bytes, timeout=spec.time_limit,
            idle_timeout=spec.idle_timeout, on_stdout=on_stdout, on_stderr=on_stderr,
            iterate=iterate, workdir=spec.workdir, finalize=finalize)
        async with proc.lifetime(spec.stdin, close_stdin=spec.stdin is None and attach_stdin
                                 and not iterate):
            yield proc
    finally:
        with anyio.CancelScope(shield=True):
            await sock.close()
