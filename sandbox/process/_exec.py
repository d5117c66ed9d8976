"""One command in a process sandbox, started by the fork server, output streamed apart.

`SandboxProcess` is the backend's `Process` handle (the shared machinery is
`.._process_base.ProcessBase`; this module supplies the hooks) and `open_command` starts one.
Output is read from two pipes as it comes; stdin is a pipe with a real EOF; a deadline or
`kill` reaches every process the command started (`_tree.sweep`, from the host).
The command ends when its first process exits; output still held open by something it left in the
background is read for `DRAIN_AFTER_EXIT` more seconds, then dropped.

A plain ``execute_command`` (no stdin, no iteration, no time limit) runs *inline*
(`ProcessBase.INLINE`): the caller's task reads the output and concludes, with no task group
and no two tasks per command; the exit report, seen by a callback on the loop, ends the
command and bounds the read that follows it.
"""


from __future__ import annotations

import asyncio
import contextlib
import os
import signal as _signal
import termios
from collections.abc import AsyncIterator, Sequence
from typing import ClassVar

import anyio
import attrs

from .._backend import ProcessSpec
from .._errors import CommandStartFailed, StdinClosed
from .._exec_start import StartFault, start_error
from .._models import CommandResult
from .._process_base import Callback, ProcessBase, Reader, unconfirmed_kill
from .._signals import signal_name
from .._tty import check_terminal_size
from ._spawner import RemoteProcess, SandboxSpawner, start
from ._tree import MARKER_VAR, sweep

#: How long output may stay open after the command exited (a background job holding it).
DRAIN_AFTER_EXIT = 2.0
#: How long a killed command's spawner may take to report its end.
KILL_GRACE = 5.0


class SandboxProcess(ProcessBase):
    """A command running in a process sandbox (see `sandbox.Process`)."""

    #: The command ends when its first process exits; its output may outlive it.
    OUTPUT_ENDS_COMMAND: ClassVar[bool] = False
    CONCLUDE_ERRORS: ClassVar[tuple[type[Exception], ...]] = (Exception,)
    INLINE: ClassVar[bool] = True

    def __init__(self, proc: RemoteProcess, spec: ProcessSpec, *, marker: str,
                 pid_ns: str, iterate: bool, on_stdout: Callback | None,
                 on_stderr: Callback | None) -> None:
        super().__init__(spec.argv, max_output_bytes=spec.max_output_bytes,
                         timeout=spec.time_limit, idle_timeout=spec.idle_timeout,
                         on_stdout=on_stdout, on_stderr=on_stderr, iterate=iterate)
        self._proc = proc
        self._spec = spec
        self._marker = marker
        self._pid_ns = pid_ns
        self._kill_confirmed = True  # False once a KILL sweep saw survivors
        self._stdin_closed = proc.stdin is None
        self._drain_done = False  # an inline read already waited DRAIN_AFTER_EXIT
        proc.on_exit(self._exited)

    def _exited(self) -> None:
        """The command's first process ended (a callback on the loop): the command is over,
        and an inline read of output still held open stops `DRAIN_AFTER_EXIT` from now.
        Seen here, not in `_conclude`, which an inline read only reaches at end of output:
        a KILL (`_signal_tree`) waits for this."""
        self._ended.set()
        self._cut_at = min(self._cut_at, asyncio.get_running_loop().time() + DRAIN_AFTER_EXIT)
        self._move_cut()

    async def resize(self, rows: int, cols: int) -> None:
        """Set the terminal's size (the program gets SIGWINCH); checked, then ignored for a
        command without a terminal."""
        check_terminal_size(rows, cols)
        if self._proc.terminal >= 0 and not self._ended.is_set():
            with contextlib.suppress(OSError):  # the command just ended
                termios.tcsetwinsize(self._proc.terminal, (rows, cols))

    # -- hooks -------------------------------------------------------------------------------

    def _sources(self) -> Sequence[Reader]:
        # One reader for both pipes: one pump task (see `_pipes`).
        return (self._proc.output.read,)

    async def _write_in(self, data: bytes) -> None:
        writer = self._proc.stdin
        assert writer is not None
        try:
            writer.write(data)
            await writer.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise StdinClosed(f"cannot write to the stdin of {self.argv[0]!r}: it closed "
                              "its stdin or exited", cause=exc) from exc

    async def _write_eof(self) -> None:
        self._close_writer()

    def _close_writer(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(Exception):
                self._proc.stdin.close()

    def _command_ended(self) -> None:
        super()._command_ended()
        self._stdin_closed = True
        self._close_writer()

    def _needs_kill(self) -> bool:
        return not self._ended.is_set()

    async def _signal_tree(self, signal: str) -> None:
        if self._ended.is_set():
            return
        number = _signal.Signals["SIG" + signal]
        with anyio.CancelScope(shield=True):
            gone = await anyio.to_thread.run_sync(sweep, self._proc.pid, self._marker,
                                                  self._pid_ns, number)
            if number == _signal.SIGKILL:
                self._kill_confirmed = gone
                with anyio.move_on_after(KILL_GRACE):  # reported once the joiner reaped it
                    await self._ended.wait()

    async def _output_cut(self) -> None:
        """An inline read: the command ended and its output stayed open `DRAIN_AFTER_EXIT`
        longer (a background job holds it): conclude without the rest, as `_conclude` does
        beside a pump."""
        self._drain_done = True
        await self._finish()

    async def _conclude(self) -> CommandResult:
        try:
            code = await self._proc.wait()
            self._command_ended()
            if not self._eof.is_set() and not self._drain_done:  # else no timer: the usual
                with anyio.move_on_after(DRAIN_AFTER_EXIT):
                    await self._eof.wait()
            self._stop_reading()
            return self._build(code)
        except BaseException:
            self._stop_reading()
            raise
        finally:
            self._command_ended()

    def _stop_reading(self) -> None:
        """Stop waiting for output a background job still holds open."""
        if self._send is not None:
            self._send.close()
        self._proc.output.close()

    def _build(self, code: int) -> CommandResult:
        sig = ""
        exit_code = code
        if code < 0:
            exit_code = 128 - code
            sig = signal_name(exit_code)
        elif self._killed and not self._kill_confirmed:
            raise unconfirmed_kill(f"{self.argv[0]!r}: {self._kill_reason or 'it was killed'}",
                                   details=f"it ended by itself with exit code {code}")
        elif self._killed:
            sig = "SIGKILL"
        return self._make_result(exit_code=exit_code, signal=sig, errors=[self._kill_reason],
                                 process_id=self._proc.pid, metadata={"backend": "process"})


def errno_start_error(reason: str, argv: Sequence[str]) -> CommandStartFailed:
    """The error for a program that could not be executed, by ``strerror`` text."""
    low = reason.lower()
    fault: StartFault = ("notfound" if "no such file" in low
                         else "notexec" if "permission denied" in low else "other")
    return start_error(argv[0], fault, details=reason)


@attrs.frozen(kw_only=True)
class Entry:
    """How every command enters one sandbox (see `_spawner.start`)."""

    spawner: SandboxSpawner
    rlimits: tuple[tuple[int, int, int], ...]


#: Whether the pipes this process makes belong to the sandbox user: run by another user than
#: root, the SDK maps its own uid to the sandbox user (root maps host nobody; its own pipes
#: stay root's, unmapped there, so no process inside may chmod or reopen them). Only then does
#: a sealed spec need sockets, which cost ``>/dev/stderr`` (ENXIO).
PIPES_ARE_THE_USERS = os.geteuid() != 0


async def start_command(
    spec: ProcessSpec, *, entry: Entry, env: dict[str, str], workdir_fd: int, pid_ns: str,
    iterate: bool, on_stdout: Callback | None = None, on_stderr: Callback | None = None,
) -> SandboxProcess:
    """Start ``spec`` in the sandbox ``entry`` enters (``workdir_fd`` taken over); the caller
    runs its `lifetime`, then `reap`."""
    marker = os.urandom(16).hex()  # as uuid4().hex, without its 5 us of UUID building
    env = {**env, MARKER_VAR: marker}
    try:
        proc = await start(entry.spawner, spec.argv, env=env, workdir_fd=workdir_fd,
                           attach_stdin=iterate or spec.stdin is not None,
                           rlimits=entry.rlimits, tty=spec.tty,
                           sealed=spec.sealed and PIPES_ARE_THE_USERS,
                           collect=not iterate and on_stdout is None and on_stderr is None
                           and spec.stdin is None and not spec.tty
                           and spec.idle_timeout is None)
    except OSError as exc:
        raise errno_start_error(exc.strerror or str(exc), spec.argv) from exc
    finally:
        os.close(workdir_fd)
    return SandboxProcess(proc, spec, marker=marker, pid_ns=pid_ns, iterate=iterate,
                          on_stdout=on_stdout, on_stderr=on_stderr)


async def reap(handle: SandboxProcess) -> None:
    """Kill the command of ``handle`` if it still runs, and wait for its end (shielded)."""
    proc = handle._proc
    if proc.returncode is None:
        with anyio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def open_command(
    spec: ProcessSpec, *, entry: Entry, env: dict[str, str], workdir_fd: int, pid_ns: str,
    iterate: bool, on_stdout: Callback | None = None, on_stderr: Callback | None = None,
) -> AsyncIterator[SandboxProcess]:
    """Start ``spec`` in the sandbox ``entry`` enters; leaving kills it if it still runs."""
    handle = await start_command(spec, entry=entry, env=env, workdir_fd=workdir_fd,
                                 pid_ns=pid_ns, iterate=iterate, on_stdout=on_stdout,
                                 on_stderr=on_stderr)
    try:
        async with handle.lifetime(spec.stdin):
            yield handle
    finally:
        await reap(handle)
