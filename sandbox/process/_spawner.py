"""One sandbox's spawning: its holder and zygote (`SandboxSpawner`), and its commands.

`SandboxSpawner` has the fork server (`_server`) start the sandbox's holder (bwrap) and a
zygote that loads the seccomp filter while bwrap starts, then sends the zygote in. `start`
sends it one command and returns a `RemoteProcess`: the command's pipes as asyncio streams,
its end as a future, signals through a pidfd (never a pid that could have been reused).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import CommandStartFailed
from .._output import StreamName
from .._tasks import fd_readable
from ._channel import Pending, Zygote, close_fds
from ._pipes import OutputPipes
from ._server import prepare, start_holder

__all__ = ["COLLECT_HOLD", "RemoteProcess", "SandboxSpawner", "readable", "start"]

#: Seconds a collected command's output may wait in its pipes for the command's end (see
#: `start`): about a short command's run, short beside any deadline.
COLLECT_HOLD = 0.002


class SandboxSpawner:
    """One sandbox's zygote, replaced when it is found gone (its fork server was killed, say)."""

    def __init__(self, seccomp: bytes, holder: Mapping[str, Any] | None = None,
                 holder_fds: Sequence[int] = (), cgroup_procs: Sequence[str] = ()) -> None:
        self._seccomp = seccomp
        self._cgroup_procs = tuple(cgroup_procs)  # the zygote joins it before its sandbox
        self._channel = start_holder(holder, holder_fds) if holder is not None else None
        self._holder = self._channel.expect(0) if self._channel is not None else None
        try:
            self._zygote = prepare(seccomp, self._cgroup_procs)
        except BaseException:
            self._let_go()
            raise
        self._stderr: OutputPipes | None = None
        self._target: tuple[int, str, tuple[str, ...], tuple[str, ...],
                            tuple[int, int] | None, tuple[tuple[int, int, int], ...]] | None = None

    def join(self, init_pid: int, pid_ns: str, names: Sequence[str],
             cgroup_procs: Sequence[str], ids: tuple[int, int] | None,
             rlimits: Sequence[tuple[int, int, int]] = ()) -> None:
        """Send the zygote into the sandbox whose first process is ``init_pid``; it takes
        ``rlimits`` last, for every command it starts."""
        self._target = (init_pid, pid_ns, tuple(names), tuple(cgroup_procs), ids,
                        tuple(rlimits))
        self._send_join(self._zygote)

    async def joined(self) -> None:
        """Wait until the zygote is in its sandbox (in its cgroup, namespaces and ids).

        Raises:
            CommandStartFailed: It could not enter it, or it is gone.
        """
        await asyncio.shield(self._zygote.joined)

    @property
    def failed(self) -> bool:
        """Whether the zygote is known to be gone or unable to enter its sandbox."""
        return self._zygote.failed

    def moved(self, cgroup_procs: Sequence[str]) -> None:
        """The sandbox's cgroup was renamed: a zygote made again joins it there."""
        self._cgroup_procs = tuple(cgroup_procs)

    def _send_join(self, zygote: Zygote) -> None:
        assert self._target is not None
        init_pid, pid_ns, names, cgroup_procs, ids, rlimits = self._target
        fds: list[int] = []
        try:
            for name in names:
                fds.append(os.open(f"/proc/{init_pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
            if os.readlink(f"/proc/{init_pid}/ns/pid") != pid_ns:
                raise ProcessLookupError(init_pid)
        except OSError as exc:  # that pid is gone, or no longer the sandbox's
            close_fds(fds)
            raise CommandStartFailed("the sandbox's first process is gone",
                                     details=str(exc)) from exc
        try:
            zygote.join(list(zip(names, fds, strict=True)), cgroup_procs=cgroup_procs, ids=ids,
                        rlimits=rlimits)
        finally:
            close_fds(fds)

    async def holder(self, stderr_fd: int) -> RemoteProcess:
        """The holder the fork server started (its end is reported like a command's), with
        its stderr read from ``stderr_fd`` (taken over)."""
        assert self._holder is not None
        loop = asyncio.get_running_loop()
        try:
            pid, pidfd = await self._holder.settled(self._holder.pidfd)
        except BaseException:  # closing the channel (close()) has the server kill it
            close_fds([stderr_fd])
            _kill_late(self._holder)  # and the pidfd, if it comes, is closed
            raise
        try:
            stderr = OutputPipes(loop, {"stderr": stderr_fd})  # closes it if it fails
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
            raise
        self._stderr = stderr
        return RemoteProcess(pid, pidfd, self._holder, None, stderr)

    def _let_go(self) -> None:
        """Close the holder's channel: the server then kills a holder still running (one not
        handed over, even before its pid came)."""
        if self._channel is not None:
            self._channel.close()

    def zygote(self) -> Zygote:
        """The live zygote: a new one, sent in, when the current one is known to be gone."""
        if self._zygote.failed and self._target is not None:
            self._zygote.close()
            self._zygote = prepare(self._seccomp, self._cgroup_procs)
            self._send_join(self._zygote)
        return self._zygote

    def close(self) -> None:
        """Close the zygote, the holder's channel and its stderr (the holder is the
        sandbox's to stop first)."""
        self._zygote.close()
        self._let_go()
        if self._stderr is not None:
            self._stderr.close()


class RemoteProcess:
    """A command the fork server started: the subset of `asyncio.subprocess.Process` the
    process backend uses."""

    def __init__(self, pid: int, pidfd: int, pending: Pending,
                 stdin: asyncio.StreamWriter | None, output: OutputPipes) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._pending = pending
        self.stdin, self.output = stdin, output
        self.returncode: int | None = None
        self.terminal = -1  # the pseudo-terminal's master side (owned by ``output``)
        self._gone: asyncio.Future[None] | None = None
        self._watch: asyncio.Future[int] | None = None  # see `on_exit`

    def on_exit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop once the process has ended: when its end is reported,
        or (its reporter gone) when its pidfd says so; at once if `wait` saw it already."""
        if self.returncode is not None:
            asyncio.get_running_loop().call_soon(callback)
            return

        def reported(future: asyncio.Future[int]) -> None:
            if future.cancelled():
                return
            if future.exception() is None:
                callback()
            else:  # the zygote is gone: the pidfd tells the end
                self._watch = asyncio.ensure_future(self.wait())  # kept: not collected
                self._watch.add_done_callback(ended)

        def ended(watch: asyncio.Future[int]) -> None:
            if not watch.cancelled():
                watch.exception()  # retrieved: `wait` raises it to whoever waits
            callback()
        self._pending.status.add_done_callback(reported)

    async def wait(self) -> int:
        """The exit code, or minus the signal number that ended the command.

        When whoever reported its end is gone (its zygote or the fork server), the end is
        seen on the pidfd instead, and the status is unknown: -SIGKILL (what the parent's
        death sends it).
        """
        if self.returncode is None:
            try:
                status = await self._pending.settled(self._pending.status)  # shared by waiters
                code = os.waitstatus_to_exitcode(status)
            except CommandStartFailed:
                if self._pidfd >= 0:
                    if self._gone is None:  # one reader for every waiter
                        self._gone = asyncio.ensure_future(readable(self._pidfd))
                    await asyncio.shield(self._gone)
                code = -signal.SIGKILL
            if self.returncode is None:
                self.returncode = code
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        return self.returncode

    def alive(self) -> bool:
        """Whether the process still exists (signal 0 through its pidfd: never another
        process that reused its pid)."""
        if self.returncode is not None or self._pidfd < 0:
            return False
        try:
            signal.pidfd_send_signal(self._pidfd, 0)
        except ProcessLookupError:
            return False
        return True

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def readable(fd: int) -> None:
    """Wait on the event loop until ``fd`` is readable (a pidfd: its process ended)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)
    with fd_readable(fd, wake):
        await ready


async def _writer(loop: asyncio.AbstractEventLoop, fd: int,
                  made: list[asyncio.BaseTransport]) -> asyncio.StreamWriter:
    """A stream writing pipe ``fd`` (taken over); its transport is added to ``made``."""
    pipe = os.fdopen(fd, "wb", buffering=0)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                            pipe)
    except BaseException:
        pipe.close()
        raise
    made.append(transport)
    return asyncio.StreamWriter(transport, protocol, None, loop)


def _sealed_pair() -> tuple[int, int]:
    """A connected stream socket pair as (our read end, the sandbox's write end), both
    close-on-exec; ours is shut for writing."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        ours.shutdown(socket.SHUT_WR)
        theirs.shutdown(socket.SHUT_RD)
    except BaseException:
        ours.close()
        theirs.close()
        raise
    return ours.detach(), theirs.detach()


async def start(spawner: SandboxSpawner, argv: Sequence[str], *, env: Mapping[str, str],
                attach_stdin: bool, workdir_fd: int, rlimits: Sequence[tuple[int, int, int]],
                tty: bool = False, collect: bool = False, sealed: bool = False
                ) -> RemoteProcess:
    """Start ``argv`` in the sandbox of ``spawner`` (with ``tty``, on a new pseudo-terminal:
    its stdin, stdout and stderr, its controlling terminal; the handle's ``terminal`` is the
    master side, and its stderr is empty).

    ``collect``: nobody looks at the output before the command ends (no callback, no
    iteration, no stdin, no terminal, no idle timeout): its pipes are not watched until its
    end is reported or `COLLECT_HOLD` passes, whichever is first. A short command then
    wakes the caller twice (its pid, its end, the pipes read at once beside the end), not
    three times (pid, pipes' end, end); its pid (kill, deadline) is known at once as ever;
    output over a pipe's buffer waits in the writer at most `COLLECT_HOLD`.

    ``sealed`` (a session's shell, when the SDK is not root; not with ``tty``): stdout and
    stderr are sockets, not pipes. A pipe the SDK makes belongs to the SDK's uid, which is
    the sandbox user's when the SDK is not root (its user namespace maps that uid alone), so
    any process of that user could chmod it and reopen it for reading through
    ``/proc/<pid>/fd`` of a child a command left holding it, and take later commands' output
    and end markers. ``open`` of a socket through ``/proc`` is ENXIO whatever its mode; our
    end is shut for writing, so the sandbox's end reads nothing.

    Raises:
        OSError: The program could not be executed (``errno`` says why).
        CommandStartFailed: The spawner could not enter the sandbox.
    """
    loop = asyncio.get_running_loop()
    ours: list[int] = []
    theirs: list[int] = []
    try:
        if tty:
            master, slave = os.openpty()
            ours += [master, os.dup(master)]  # read, write: one transport each
            theirs += [slave] * 3
        elif attach_stdin:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            ours.append(write_end)
            theirs.append(read_end)
        else:
            theirs.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        for _ in range(0 if tty else 2):
            read_end, write_end = _sealed_pair() if sealed else os.pipe2(os.O_CLOEXEC)
            ours.append(read_end)
            theirs.append(write_end)
        request = {"argv": list(argv), "env": [f"{k}={v}" for k, v in env.items()],
                   "rlimits": list(rlimits), "tty": tty}
        pending = spawner.zygote().submit(request, [*theirs, workdir_fd])
    except BaseException:
        close_fds(ours)
        raise
    finally:
        close_fds(list(set(theirs)))
    output: OutputPipes | None = None
    try:
        pipes: dict[StreamName, int] = (
            {"stdout": ours.pop(0)} if tty else {"stdout": ours.pop(-2), "stderr": ours.pop(-1)})
        terminal = pipes["stdout"] if tty else -1
        output = OutputPipes(loop, pipes, watch=False)  # closes them if it fails
        pid, pidfd = await pending.settled(pending.pidfd)
    except BaseException:
        close_fds(ours)
        if output is not None:
            output.close()
        _kill_late(pending)
        raise
    try:
        # Output waits in its pipes until now. A short command has often ended already
        # (its end came with its pid): what it wrote is taken at once, and pipes at their
        # end are never added to the event loop; else they are watched from here on.
        if pending.status.done():
            output.take_ended()
        elif collect:
            _hold(loop, pending, output)
        else:
            output.watch()
        failed, step = await pending.settled(pending.started)
        if step == "exec":
            raise OSError(failed, os.strerror(failed))
        if step:
            raise CommandStartFailed(f"could not start {argv[0]!r}: entering the sandbox "
                                     f"failed at {step!r}",
                                     details=os.strerror(failed) if failed else "")
        made: list[asyncio.BaseTransport] = []
        stdin: asyncio.StreamWriter | None = None
        try:
            if ours:  # stdin's write end (a terminal's: the master side's duplicate)
                stdin = await _writer(loop, ours.pop(0), made)
        except BaseException:
            for transport in made:
                transport.close()
            raise
    except BaseException:
        close_fds(ours)
        output.close()
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
        raise
    proc = RemoteProcess(pid, pidfd, pending, stdin, output)
    proc.terminal = terminal
    return proc


def _hold(loop: asyncio.AbstractEventLoop, pending: Pending, output: OutputPipes) -> None:
    """Leave ``output`` unwatched until the command's end is reported (then take what its
    pipes hold, `OutputPipes.take_ended`) or `COLLECT_HOLD` passes (then watch them).
    Either is harmless after the other, or after `OutputPipes.close`."""
    timer = loop.call_later(COLLECT_HOLD, output.watch)

    def ended(_: asyncio.Future[int]) -> None:
        timer.cancel()
        output.take_ended()
    pending.status.add_done_callback(ended)


def _kill_late(pending: Pending) -> None:
    """A start given up before its pid came: kill the command whenever the pid does."""
    def kill(future: asyncio.Future[tuple[int, int]]) -> None:
        if not future.cancelled() and future.exception() is None:
            _, pidfd = future.result()
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
    pending.pidfd.add_done_callback(kill)
