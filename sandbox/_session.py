"""Sessions: one long-lived shell per session, commands at about the cost of a pipe write.

A `Session` starts one shell process through the backend's ``open_process`` (one exec on
Docker) and feeds it one line per command (``_session_wire``). The shell runs from an
unreadable copy (``_session_shell``), so other processes of the sandbox user cannot open its
input or output through /proc. The shell prints end markers
holding a fresh nonce when the command is done, so completion is an event: no polling, no
second round trip. State persists as in a terminal (``cd``, ``export``, functions, aliases).
Where the backend offers it, a guarded shell then moves its stdio to FIFOs past the engine's
daemons (``_session_fifo``), which halves a round trip; the attach stream stays otherwise.

A timeout kills every process the command started (each carries a per-command environment
variable; a second process sweeps ``/proc`` for it, as the same user), and the shell lives on.
A command stuck in the shell itself (a ``while :`` loop) cannot be killed apart from the
shell: then the shell is replaced, and the result says its state was lost. The shell dying
(``exit``, a kill, OOM) ends the running command at once with a result saying so; the next
command starts a new shell, or raises `SessionClosed` when the session was opened with
``restart=False``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.lowlevel
import attrs
from anyio.abc import TaskGroup, TaskStatus

from ._backend import Backend, ProcessSpec, SupportsCommandFinalizer, SupportsKillMarked
from ._below_shell import boot_tick
from ._constants import DEFAULT_MAX_OUTPUT_BYTES
from ._errors import ConfigError, SandboxError, SessionClosed, StdinClosed
from ._models import Command, CommandResult, ResourceUsage
from ._output import StreamName
from ._policy import is_root, seconds
from ._process_base import make_result, overdue, unconfirmed_kill
from ._session_fifo import Handshake, SupportsSessionFifo
from ._session_fifo import enabled as fifo_enabled
from ._session_run import Callback, Run, Shell
from ._session_shell import GUARD_PROBE, GUARDED, ShellCopy, guarded_shell, shell_argv
from ._session_wire import (
    AUTO_SHELL,
    COMMAND_VAR,
    POSIX_OFF,
    SETUP,
    STDIN_END,
    exit_trap,
    head_tail,
    quote,
    stdin_lines,
    wrap,
)
from ._signals import signal_name
from ._sweep import shell_sweep_argv
from ._tasks import first_of, single_errors

log = logging.getLogger("sandbox.session")

__all__ = ["Callback", "Session", "SessionJob", "head_tail"]

#: How long a killed command's shell may take to print its end markers before it is replaced.
KILL_GRACE = 3.0
#: The most markers of commands ended in one clock tick that a kill spares (`_note_end`).
MAX_SPARED = 32
#: The usage of a result without a measurement: built once (validating one costs ~0.5 ms).
_NO_USAGE = ResourceUsage()
#: How long the forked stdin reader of a command may take to start.
READER_START = 30.0
#: Characters of output a `SessionJob` keeps for a model between two looks (head and tail).
DEFAULT_KEEP_CHARS = 16_000

@attrs.frozen(kw_only=True)
class SessionHost:
    """What a session needs of its sandbox: the backend its shell runs on, how the sandbox
    plans a command (policy, user, audit of users), its working directory now, and whether
    it runs (given by `Sandbox.session`, so a session reaches into no sandbox internals)."""

    backend: Backend
    plan: Callable[[Command], ProcessSpec]
    working_directory: Callable[[], str]
    require_running: Callable[[], None]


class Session:
    """A persistent shell in the sandbox: ``cd``, ``export`` and functions carry over, and a
    command costs a pipe write instead of an exec.

    Get one with ``async with sandbox.session() as sh``. Commands on one session run one at a
    time: a second call waits until the first has ended (a sandbox may hold several sessions,
    and ``execute_command`` keeps working beside them). Each command's stdin is /dev/null
    unless ``stdin=`` is given; then it reads that input and EOF. Output a background process
    prints while no command of the session runs is dropped.

    Attributes:
        id: A random id for this session (in each result's metadata).
    """

    def __init__(self, host: SessionHost, *, shell: str | None, restart: bool,
                 usage: bool = False) -> None:
        self._sandbox = host
        self._usage = usage
        self._backend: Backend = host.backend
        self._shell_cmd = shell
        self._restart = restart
        self.id = secrets.token_hex(6)
        self._cwd = host.working_directory()
        self._lock = anyio.Lock(fast_acquire=True)
        self._shell: Shell | None = None
        self._shells = 0
        self._tg: TaskGroup | None = None
        self._closed = False
        self._kind = ""
        self._spec: ProcessSpec | None = None
        self._lost = ""  # how the last shell ended under a command, until a new one starts
        self._last_nonce = ""  # the previous command's marker nonce
        # The clock tick the last commands ended in, and their markers (`_note_end`).
        self._end_tick = 0
        self._ended: list[str] = []
        self._guarded = False
        self._fifo_off = False  # its shells keep the attach stream (a FIFO handshake failed)

    # -- public ------------------------------------------------------------------------------

    @property
    def cwd(self) -> str:
        """The shell's working directory after the last command."""
        return self._cwd

    @property
    def shell(self) -> str:
        """Which shell runs: "bash", or "sh" (the image's POSIX shell)."""
        return self._kind

    @property
    def guarded(self) -> bool:
        """True when no other process of the sandbox can open the shell's input and output
        (so none can forge a result; the command itself still can): the shell runs from a
        root-owned copy its user cannot read, and was checked to be closed when it started.

        False when the sandbox user is root, on backends that cannot run a command as root
        (process, Kubernetes: the copy is then the user's own, which it could replace), on
        runtimes that cannot run an unreadable program (gVisor), and with ``shell=``.
        """
        return self._guarded

    @property
    def alive(self) -> bool:
        """True while the current shell runs."""
        return self._shell is not None and self._shell.alive

    async def run(
        self, cmd: str, *,
        timeout: float | None = None,  # noqa: ASYNC109 (the command's limit: it is killed)
        idle_timeout: float | None = None,
        stdin: bytes | str | None = None, on_stdout: Callback | None = None,
        on_stderr: Callback | None = None, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    ) -> CommandResult:
        """Run a shell command line in the session and return its result.

        Args:
            cmd: A shell command line (it may span lines, define functions, ``cd``...).
            timeout: Seconds before the command and all it started are killed; None uses the
                sandbox config's timeout (0 there: no limit).
            idle_timeout: Seconds without output before it is killed; None: no limit.
            stdin: Input for the command, followed by EOF; None: /dev/null.
            on_stdout: Called with each chunk of stdout as it arrives (may be async).
            on_stderr: The same for stderr.
            max_output_bytes: Output kept per stream in the result; more is flagged truncated.

        Raises:
            SessionClosed: The session was closed, or its shell ended and it was opened with
                ``restart=False``.
        """
        self._check_args(cmd, timeout, idle_timeout, max_output_bytes)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        async with self._lock:
            run = await self._begin(cmd, stdin=data, open_stdin=False,
                                    max_output_bytes=max_output_bytes, on_stdout=on_stdout,
                                    on_stderr=on_stderr, keep_chars=0)
            return await self._finish(run, cmd, timeout, idle_timeout)

    async def start(
        self, cmd: str, *, yield_after: float = 10.0,
        timeout: float | None = None,  # noqa: ASYNC109 (the command's limit, as in run)
        idle_timeout: float | None = None, max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
        keep_chars: int = DEFAULT_KEEP_CHARS,
    ) -> CommandResult | SessionJob:
        """Start a command and wait up to ``yield_after`` seconds for it, as a model's tool.

        Returns its result if it ended by then; else a `SessionJob` whose `output` holds what
        it printed so far (at most ``keep_chars`` characters: head and tail), to `poll`,
        `write` to (its stdin stays open until `close_stdin`) or `kill`.
        The job holds the session: later commands wait until it has ended.
        """
        self._check_args(cmd, timeout, idle_timeout, max_output_bytes)
        _check_wait("yield_after", yield_after)
        if keep_chars < 0:
            raise ConfigError(f"keep_chars must be at least 0, not {keep_chars}")
        tg = self._require_open()
        started: list[Run] = []
        outcome: list[CommandResult | BaseException] = []
        task_done = anyio.Event()

        async def job(*, task_status: TaskStatus[None]) -> None:
            try:
                async with self._lock:
                    run = await self._begin(cmd, stdin=None, open_stdin=True,
                                            max_output_bytes=max_output_bytes, on_stdout=None,
                                            on_stderr=None, keep_chars=keep_chars)
                    started.append(run)
                    task_status.started()
                    outcome.append(await self._finish(run, cmd, timeout, idle_timeout))
            except Exception as exc:
                outcome.append(exc)
                if not started:
                    raise
            finally:
                task_done.set()

        await tg.start(job)
        handle = SessionJob(self, started[0], cmd, task_done, outcome)
        return await handle.poll(yield_after)

    async def restart(self) -> None:
        """Replace the shell with a new one (in the sandbox's working directory); everything
        the old one started is killed."""
        async with self._lock:
            self._require_open()
            await self._stop_shell()
            self._cwd = self._sandbox.working_directory()
            self._lost = ""
            await self._start_shell()

    # -- the shell -----------------------------------------------------------------------------

    def _check_args(self, cmd: str, timeout: float | None, idle_timeout: float | None,
                    max_output_bytes: int) -> None:
        if not isinstance(cmd, str) or not cmd.strip():
            raise ConfigError(f"the session command must be a non-empty shell string, not "
                              f"{cmd!r}")
        if "\0" in cmd:
            raise ConfigError("the session command contains a NUL character, which no shell "
                              "can take")
        _check_wait("timeout", timeout)
        _check_wait("idle_timeout", idle_timeout)
        if not isinstance(max_output_bytes, int) or max_output_bytes < 0:
            raise ConfigError(f"max_output_bytes must be an int >= 0, not {max_output_bytes!r}")

    def _require_open(self) -> TaskGroup:
        if self._closed or self._tg is None:
            raise SessionClosed("the session is closed; open a new one with sandbox.session()")
        return self._tg

    async def _start_shell(self) -> Shell:
        """Start a shell and probe it. One that should be guarded and is not (its copy was
        removed or replaced before it ran) is replaced once by one from a fresh copy."""
        shell, guarded, retry = await self._try_shell(fresh=False)
        if retry:
            await self._stop_shell()
            self._lost = ""
            shell, guarded, retry = await self._try_shell(fresh=True)
            if retry:
                log.warning("session %s: its shell runs from a root-owned unreadable copy, yet "
                            "its /proc entries are open to other processes", self.id)
        self._guarded = guarded
        return shell

    async def _try_shell(self, *, fresh: bool) -> tuple[Shell, bool, bool]:
        """Start one shell: it, whether it is guarded, and whether it should have been."""
        tg = self._require_open()
        copy = ShellCopy("", by_root=False)
        if self._shell_cmd is not None:
            argv: tuple[str, ...] = ("/bin/sh", "-c", f"exec {self._shell_cmd}",
                                     "sandbox-session")
        else:
            copy = await guarded_shell(self._backend, self._backend, fresh=fresh)
            argv = (shell_argv(copy.path) if copy.path
                    else ("/bin/sh", "-c", AUTO_SHELL, "sandbox-session"))
        spec = self._sandbox.plan(Command.argv(list(argv)))
        # The shell itself has no time limit and keeps no output: each command has its own.
        self._spec = attrs.evolve(spec, time_limit=None, idle_timeout=None,
                                  max_output_bytes=0, stdin=None, sealed=True)
        # Guarded only from a root-owned copy the sandbox user (not root) could not replace
        # by a program that lies to the probe.
        sealed = copy.by_root and bool(spec.user) and not is_root(spec.user)
        self._shells += 1
        shell = Shell(self._shells)
        await tg.start(self._hold, shell, attrs.evolve(self._spec, workdir=self._cwd))
        self._shell = shell
        assert shell.proc is not None
        await shell.write((POSIX_OFF if self._shell_cmd is None else "") + SETUP
                          + exit_trap(shell.nonce))
        probe_cmd = 'printf %s:%s "${BASH_VERSION:+bash}" "$$"' + GUARD_PROBE
        if copy.path and not copy.by_root:  # made for this shell alone: it runs, remove it
            probe_cmd += f"; rm -rf {quote(copy.path.rsplit('/', 1)[0])}"
        probe = await self._begin_on(shell, probe_cmd, measure=False)
        result = await self._finish(probe, "", 30.0, None, audit=False)
        if probe.shell_lost:
            if copy.path and not fresh:  # the copy is gone or broken: try a fresh one
                return shell, False, True
            if shell.error is not None:
                raise shell.error
            raise SessionClosed("the session's shell ended as it started",
                                details=f"{probe.shell_lost}; output: {result.combined}")
        kind, _, rest = result.stdout.partition(":")
        pid, _, guard = rest.partition(":")
        self._kind = "bash" if kind == "bash" else "sh"
        digits = pid.isascii() and pid.isdigit()  # not "²": int() refuses it
        shell.pid = pid if digits and copy.path else ""
        shell.own_pid = int(pid) if digits and len(pid) < 10 else 0
        closed = ":" + guard == GUARDED
        if sealed and closed and not await self._to_fifo(shell):
            await self._stop_shell()
            self._lost = ""
            return await self._try_shell(fresh=fresh)
        return shell, sealed and closed, sealed and not closed

    async def _hold(self, shell: Shell, spec: ProcessSpec, *,
                    task_status: TaskStatus[None]) -> None:
        """Own the shell process: route its output to the running command until it ends."""
        why = "the session's shell ended"
        try:
            with shell.scope:
                async with self._backend.open_process(spec) as proc, \
                        anyio.create_task_group() as pumps:
                    shell.proc = proc
                    shell.pumps = pumps  # a FIFO link's reader runs here (see `_to_fifo`)
                    task_status.started()
                    try:
                        async for chunk in proc:
                            if shell.tap is not None:
                                if chunk.stream == "stdout":
                                    shell.tap(chunk.data)
                                continue
                            await self._route(shell, chunk.stream, chunk.data)
                    except SandboxError as exc:  # e.g. the shell's program is missing
                        shell.error = exc
                        shell.why = f"the session's shell could not run: {exc}"
                    try:
                        with anyio.move_on_after(10):
                            result = await proc.wait()
                            shell.exit_code = result.exit_code
                            why = (f"the session's shell exited with code {result.exit_code}"
                                   + (f" ({result.signal})" if result.signal else ""))
                    except SandboxError as exc:
                        why = f"the session's shell was lost: {exc}"
                    shell.exited = True
                    if shell.link is not None:
                        # A process the shell left (``sleep 9 &``, a daemon) may hold its
                        # FIFOs open for ever: take what is written and stop reading.
                        shell.link.end()
        finally:
            if shell.link is not None:
                shell.link.close()
            if shell.scope.cancelled_caught and not shell.why:
                why = "the session's shell was stopped"
            shell.why = shell.why or why
            shell.ended.set()
            run = self._running
            if run is not None and run.shell is shell:
                run.shell_ended(shell.why)

    async def _route(self, shell: Shell, stream: StreamName, data: bytes) -> None:
        """Hand output of ``shell`` to the command running on it, if any."""
        run = self._running
        if run is not None and run.shell is shell:
            await run.feed(stream, data)

    async def _to_fifo(self, shell: Shell) -> bool:
        """Move a guarded shell's stdio from the attach stream to FIFOs where the backend
        offers them (`_session_fifo`): False when the shell's state is unknown after a
        handshake that timed out (replace it); True when it runs on either transport."""
        offer = self._backend.session_fifo() if isinstance(
            self._backend, SupportsSessionFifo) else None
        if offer is None or self._fifo_off or not fifo_enabled():
            return True
        where, target = offer
        handshake = Handshake(where, target)
        try:
            handshake.prepare()
        except OSError as exc:
            log.warning("session %s: no FIFOs for its shell (%s); it keeps the attach stream",
                        self.id, exc)
            return True
        failed = anyio.Event()
        seen = bytearray()
        mark = handshake.fail_mark.encode()

        def tap(data: bytes) -> None:
            seen.extend(data)
            if mark in seen:
                failed.set()
            del seen[:-len(mark)]

        shell.tap = tap
        try:
            await shell.write(handshake.line)
            link = await handshake.wait_shell(failed)
        finally:
            shell.tap = None
            handshake.discard()
        if link is None:
            self._fifo_off = True  # this sandbox's shells cannot take them: stop trying
            if failed.is_set():
                log.info("session %s: its shell could not open its FIFOs; it keeps the attach "
                         "stream", self.id)
                return True
            log.warning("session %s: its shell did not take its FIFOs (%s); replaced by one "
                        "on the attach stream", self.id, handshake.error or "in time")
            return False
        if shell.ended.is_set():  # it ended meanwhile: the next command finds it gone
            link.close()
            return True
        shell.link = link
        assert shell.pumps is not None
        shell.pumps.start_soon(link.pump, functools.partial(self._route, shell))
        if shell.exited:
            link.end()
        return True

    async def _stop_shell(self) -> None:
        """Stop the current shell (see `_stop`) and wait until it is gone."""
        shell, self._shell = self._shell, None
        if shell is not None:
            await self._stop(shell)

    async def _stop(self, shell: Shell) -> None:
        """Kill ``shell`` and all it started (also when it already exited: its background
        jobs may live on), and wait until its task is gone; a second call just waits."""
        with anyio.CancelScope(shield=True):
            if shell.stopping:
                with anyio.move_on_after(40):
                    await shell.ended.wait()
                return
            shell.stopping = True
            if shell.pid and self._spec is not None:
                # Its non-dumpable processes are closed to the backend's kill (by environment).
                alive = "" if shell.ended.is_set() else "1"
                sweep = ProcessSpec(argv=shell_sweep_argv("", shell.pid, alive,
                                                          "sandbox-session-end"),
                                    user=self._spec.user, workdir="/",
                                    max_output_bytes=1 << 12, time_limit=30.0)
                with contextlib.suppress(SandboxError):
                    await self._backend.run_process(sweep)
            if shell.proc is not None:
                with contextlib.suppress(Exception):
                    await shell.proc.kill()
            with anyio.move_on_after(10):
                await shell.ended.wait()
            if not shell.ended.is_set():
                shell.scope.cancel()
                await shell.ended.wait()

    _running: Run | None = None

    async def _ready_shell(self) -> Shell:
        self._require_open()
        shell = self._shell
        if shell is not None and shell.alive:
            return shell
        if shell is not None:
            self._lost = self._lost or shell.why
            await self._stop_shell()
        if self._lost and not self._restart:
            raise SessionClosed(
                f"{self._lost}; this session was opened with restart=False",
                details="open a new session, or call restart() for a fresh shell")
        self._lost = ""
        return await self._start_shell()

    async def _begin(self, cmd: str, *, stdin: bytes | None, open_stdin: bool,
                     max_output_bytes: int, on_stdout: Callback | None,
                     on_stderr: Callback | None, keep_chars: int) -> Run:
        shell = await self._ready_shell()
        return await self._begin_on(shell, cmd, stdin=stdin, open_stdin=open_stdin,
                                    max_output_bytes=max_output_bytes, on_stdout=on_stdout,
                                    on_stderr=on_stderr, keep_chars=keep_chars)

    async def _begin_on(self, shell: Shell, cmd: str, *, stdin: bytes | None = None,
                        open_stdin: bool = False, max_output_bytes: int = 1 << 16,
                        on_stdout: Callback | None = None, on_stderr: Callback | None = None,
                        keep_chars: int = 0, measure: bool = True) -> Run:
        """Send ``cmd`` to ``shell`` (the caller holds the lock); return it in flight."""
        run = Run(shell, stale_nonce=self._last_nonce, cwd=self.cwd,
                  max_output_bytes=max_output_bytes, on_stdout=on_stdout,
                  on_stderr=on_stderr, keep_chars=keep_chars)
        self._last_nonce = run.nonce
        if measure and self._usage:
            run.finalize = await self._finalizer()
        reader = stdin is not None or open_stdin
        # A POSIX sh runs a command fed stdin in a subshell: the directory it ends in is not
        # the shell's, so the session's working directory stays as it was.
        run.subshell = reader and self._kind != "bash"
        self._running = run
        assert shell.proc is not None
        try:
            # Before the write: the shell forks nothing for it earlier (a timeout's kill takes
            # the shell's children started since, `_below_shell.forked_since`).
            run.sent = boot_tick()
            await shell.write(wrap(cmd, run.nonce, run.command_id, reader=reader,
                                       token=run.token, bash=self._kind == "bash"))
            if reader:
                # Even when the command is done: the reader waits for its end line.
                with anyio.move_on_after(READER_START):
                    await first_of(run.ready, shell.ended)
                if not run.ready.is_set():
                    run.shell_ended(shell.why or "the command's stdin reader did not start "
                                    "(no free process?); the shell was replaced")
                    return run
                run.stdin_open = run.stdin_end_due = True
                if stdin is not None:
                    await self._send_stdin(run, stdin)
                    await self._close_stdin(run)
        except (SandboxError, OSError) as exc:
            run.shell_ended(f"the session's shell could not take the command: {exc}")
        return run

    async def _finalizer(self) -> Callable[[CommandResult], Awaitable[CommandResult]] | None:
        """The backend's per-command completion (resource usage, OOM), if it has one."""
        if not isinstance(self._backend, SupportsCommandFinalizer):
            return None
        return await self._backend.command_finalizer()

    # -- stdin -----------------------------------------------------------------------------

    async def _send_stdin(self, run: Run, data: bytes) -> None:
        for line in stdin_lines(data):
            if run.done.is_set() or not run.stdin_open:  # ended, or a kill closed it
                break
            await run.shell.write(line)

    async def _write_stdin(self, run: Run, data: bytes) -> None:
        async with run.stdin_lock:
            if not run.stdin_open or run.done.is_set():
                raise StdinClosed("cannot write to the command's stdin: "
                                  + ("it has ended" if run.done.is_set() else
                                     "it was closed (close_stdin)"))
            try:
                await self._send_stdin(run, data)
            except (SandboxError, OSError) as exc:
                raise StdinClosed("cannot write to the command's stdin: the session's shell "
                                  "is gone", cause=exc) from exc

    async def _close_stdin(self, run: Run) -> None:
        """Send the line ending the command's input (once), after any write under way."""
        if not (run.stdin_open or run.stdin_end_due):
            # No reader ran, or its end line went: no write can be under way. A cancelled
            # caller is still interrupted here, as the lock's acquire would have.
            await anyio.lowlevel.checkpoint_if_cancelled()
            return
        async with run.stdin_lock:
            run.stdin_open = False
            if not run.stdin_end_due:
                return
            try:
                if run.shell.alive:
                    with contextlib.suppress(SandboxError, OSError):
                        await run.shell.write(STDIN_END)
            finally:
                # Only once it went: a second caller waits on the lock for this one's write
                # (a command line written meanwhile would be read as the input's end).
                run.stdin_end_due = False

    # -- ending a command ------------------------------------------------------------------

    async def _finish(self, run: Run, cmd: str, time_limit: float | None,
                      idle_timeout: float | None, *, audit: bool = True) -> CommandResult:
        """Wait for ``run`` to end (killing it at its limits) and build its result."""
        limit = time_limit if time_limit is not None else seconds(self._backend.config.timeout)
        limit = limit or None
        try:
            await self._watch(run, limit, idle_timeout)
            if run.callback_error is not None and not run.shell_lost:
                run.kill_reason = run.kill_reason or "an output callback raised"
                await self._kill_command(run)
        finally:
            if not run.done.is_set():  # cancelled: leave nothing running, the shell usable
                with anyio.CancelScope(shield=True):
                    run.kill_reason = run.kill_reason or "the call was cancelled"
                    await self._kill_command(run)
            try:
                with anyio.CancelScope(shield=True):
                    if run.kill_started:  # by another task (`SessionJob.kill`): its last look
                        await run.kill_finished.wait()
                    await self._close_stdin(run)
            finally:
                self._running = None
                self._note_end(run)
        if run.callback_error is not None:
            raise run.callback_error
        result = self._result(run)
        if run.finalize is not None:
            with contextlib.suppress(SandboxError):
                result = await run.finalize(result)
        if audit:
            self._backend.audit.command(["session", cmd], user=self._spec.user if self._spec
                                        else "", cwd=run.cwd, env={}, result=result)
        if run.shell_lost:
            self._lost = run.shell_lost
            if run.shell is self._shell:  # cleared now, killed meanwhile: the result is ready
                self._shell = None
                if self._tg is not None and not self._closed:
                    self._tg.start_soon(self._stop, run.shell)
                else:
                    await self._stop(run.shell)
        return result

    async def _watch(self, run: Run, limit: float | None, idle: float | None) -> None:
        """Until ``run`` ends or a callback raised; kill it at its limits."""
        reason = await overdue(run.wake, run.t0, limit, idle, lambda: run.last_output,
                               floor=0.005)
        if reason:
            run.kill_reason = reason
            run.timed_out = True
        if not run.done.is_set():
            await self._kill_command(run)

    def _note_end(self, run: Run) -> None:
        """Keep ``run``'s marker while the clock tick it ended in lasts: a command sent in that
        same tick, timed out, spares the shell's children carrying one of these (an earlier
        command's jobs, started in that tick too; `_below_shell.forked_since`). A later tick
        leaves nothing to tell apart: the shell makes no child between two commands."""
        tick = boot_tick()
        if tick != self._end_tick:
            self._end_tick, self._ended = tick, []
        if len(self._ended) < MAX_SPARED:
            self._ended.append(f"{COMMAND_VAR}={run.command_id}")

    def _spared(self, run: Run) -> tuple[str, ...]:
        """The markers a kill of ``run`` spares (see `_note_end`)."""
        return tuple(self._ended) if run.sent and self._end_tick >= run.sent else ()

    async def _kill_marked(self, run: Run) -> bool | None:
        """`SupportsKillMarked.kill_marked` for ``run``'s processes; None where the backend
        cannot (or it failed)."""
        if not isinstance(self._backend, SupportsKillMarked):
            return None
        try:
            return await self._backend.kill_marked(f"{COMMAND_VAR}={run.command_id}",
                                                   run.shell.own_pid, run.sent,
                                                   self._spared(run))
        except (SandboxError, OSError):  # the sweep from inside decides instead
            return None

    async def _kill_command(self, run: Run) -> None:
        """Kill every process ``run`` started; replace the shell if it does not come back."""
        if run.done.is_set():
            return
        run.killed = True
        if run.kill_started:  # another task kills it: wait for the same end
            with anyio.CancelScope(shield=True):
                await run.kill_finished.wait()
            return
        run.kill_started = True
        try:
            await self._kill_started(run)
        finally:
            run.kill_finished.set()

    async def _kill_started(self, run: Run) -> None:
        """`_kill_command`'s work, once per command (``run.kill_finished`` follows it: the
        session's lock is not let go before, so the next command is never sent while a look
        that takes the shell's children since this command's send may still come)."""
        with anyio.CancelScope(shield=True):
            # Nothing is written before the kill: a writer may hold the input's lock, blocked
            # on a full FIFO or pipe the command does not read, and the end line itself can
            # block so. Writers stop at their next line; the end line follows the kill.
            run.stdin_open = False
            spec = self._spec
            assert spec is not None
            # From outside the sandbox where the backend can (nothing in it can starve that:
            # a fork bomb at the process limit leaves no pid for a sweep), else the sweep.
            host = gone = await self._kill_marked(run)
            if host is None:
                sweep = ProcessSpec(argv=shell_sweep_argv(f"{COMMAND_VAR}={run.command_id}",
                                                          run.shell.pid, "",
                                                          "sandbox-session-kill",
                                                          run.shell.own_pid),
                                    user=spec.user, workdir="/", max_output_bytes=1 << 12,
                                    time_limit=30.0)
                with contextlib.suppress(SandboxError):
                    gone = (await self._backend.run_process(sweep)).exit_code == 0
            run.kill_confirmed = bool(gone)
            with anyio.move_on_after(KILL_GRACE):
                # The command's processes are gone: a blocked writer's input is read now (by
                # its reader, or by the shell as comments), and the reader, should it have
                # outlived the kill (a subshell carries no marker), ends at this line.
                await self._close_stdin(run)
                await run.done.wait()
            # Once the shell said the command ended, nothing of it forks again: one more look
            # takes what the shell started after the kill's last look (the rest of a line
            # such as ``sleep 100; (while :; do :; done) &``).
            if run.done.is_set() and host is not None and not run.shell_lost and \
                    await self._kill_marked(run) is False:
                run.kill_confirmed = False
            if not run.done.is_set():
                # Stuck in the shell itself (a builtin loop), or it cleared its environment.
                run.shell.why = ("the command did not end when its processes were killed "
                                 "(a loop in the shell itself?); the shell was replaced, its "
                                 "variables, functions and directory were lost")
                run.shell_ended(run.shell.why)
                if run.shell is self._shell:
                    await self._stop_shell()

    def _result(self, run: Run) -> CommandResult:
        errors = [run.kill_reason]
        if run.forged:
            errors.append("the command's end marker was not the one its shell prints (written "
                          "by another process?); its exit status is unknown")
        exit_code = run.status
        if run.shell_lost:
            errors.append(run.shell_lost)
            if run.shell.exit_code is not None and not run.killed:
                exit_code = run.shell.exit_code
            elif run.killed:
                exit_code = 137
        elif not run.subshell:
            self._cwd = run.cwd
        sig = signal_name(exit_code) if exit_code > 128 else ""
        if run.killed and not sig and not run.kill_confirmed and not run.shell_lost:
            # Never report a kill that did not happen: it ran on, and ended by itself.
            raise unconfirmed_kill(run.kill_reason or "the command was killed",
                                   details=f"it ended by itself with exit code {exit_code}")
        if run.killed and not sig:
            sig = "SIGKILL"
        metadata = {"session_id": self.id, "shell": str(run.shell.number)}
        if run.shell_lost:
            metadata["shell_ended"] = "true"
        return make_result(
            run.capture, exit_code=exit_code, signal=sig, errors=errors,
            timed_out=run.timed_out, start_time=run.start_time, t0=run.t0, metadata=metadata,
            success=exit_code == 0 and not run.timed_out and not run.shell_lost,
            resource_usage=_NO_USAGE)

    # -- lifetime -------------------------------------------------------------------------------

    async def _close(self) -> None:
        self._closed = True
        await self._stop_shell()


@contextlib.asynccontextmanager
async def open_session(host: SessionHost, *, shell: str | None = None, restart: bool = True,
                       usage: bool = False) -> AsyncIterator[Session]:
    """Start a session's shell; on leaving, kill it and everything started in it."""
    host.require_running()
    session = Session(host, shell=shell, restart=restart, usage=usage)
    async with single_errors(), anyio.create_task_group() as tg:
        session._tg = tg
        try:
            async with session._lock:
                await session._start_shell()
            yield session
        finally:
            with anyio.CancelScope(shield=True):
                await session._close()
            tg.cancel_scope.cancel()


class SessionJob:
    """A command `Session.start` left running: poll it, write to it, kill it.

    Attributes:
        command: The command line it runs.
        output: The output printed since the previous look (start or poll), as text bounded
            with its head and tail kept and a marker where the middle was dropped.
    """

    def __init__(self, session: Session, run: Run, command: str, task_done: anyio.Event,
                 outcome: list[CommandResult | BaseException]) -> None:
        self._session = session
        self._run = run
        self.command = command
        self.output = ""
        self._task_done = task_done
        self._outcome = outcome

    @property
    def running(self) -> bool:
        """True until the command has ended."""
        return not self._task_done.is_set()

    async def poll(self, yield_after: float) -> CommandResult | SessionJob:
        """Wait up to ``yield_after`` seconds: the result if it ended, else this job with
        `output` set to what it printed meanwhile."""
        _check_wait("yield_after", yield_after)
        with anyio.move_on_after(yield_after):
            await self._task_done.wait()
        if self._task_done.is_set():
            return self._result()
        self.output = self._run.take_recent()
        return self

    def _result(self) -> CommandResult:
        if not self._outcome:
            raise SessionClosed(f"the job {self.command!r} was cancelled with its session")
        outcome = self._outcome[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def write(self, data: bytes | str) -> None:
        """Send input to the command's stdin.

        Raises:
            StdinClosed: The command ended, or its stdin was closed.
        """
        await self._session._write_stdin(self._run, data.encode() if isinstance(data, str)
                                         else data)

    async def close_stdin(self) -> None:
        """End the command's input: it reads EOF (the session's shell does not)."""
        await self._session._close_stdin(self._run)

    async def kill(self) -> CommandResult:
        """Kill the command and everything it started; return its result."""
        if not self._task_done.is_set():
            self._run.kill_reason = self._run.kill_reason or "killed by SessionJob.kill()"
            await self._session._kill_command(self._run)
        await self._task_done.wait()
        return self._result()

    async def wait(self) -> CommandResult:
        """Wait for the command to end and return its result."""
        await self._task_done.wait()
        return self._result()


def _check_wait(name: str, value: float | None) -> None:
    if value is not None and (not isinstance(value, int | float) or isinstance(value, bool)
                              or math.isnan(value) or value < 0):
        raise ConfigError(f"{name} must be a number of seconds >= 0 (or None for no limit), "
                          f"not {value!r}")
