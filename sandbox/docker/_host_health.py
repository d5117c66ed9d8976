"""Whether a local container runs and is not paused, seen from the host in microseconds.

A pool asks `DockerBackend.health` on every acquire; one engine inspect is 1.5-5 ms on a loaded
2-core host, most of a warm acquire. Where the engine is on this host and the SDK sees the
container's processes (root in the engine's pid namespace, a runc container), the same two
facts are on the host:

* **running**: pidfds of the container's init (docker-init, the engine's ``State.Pid``) and
  of its one child, the SDK's keepalive shell, opened once. One turns readable the moment its
  process exits, whatever killed it: ``docker kill``/``stop``/``rm -f`` from outside, or a
  process inside killing the keepalive (docker-init exits a moment later, which the keepalive's
  pidfd does not wait for). A pidfd names one process, never a pid number that could be reused.
* **paused**: the container's freezer (cgroup v1 ``freezer.state``; v2 ``cgroup.freeze``,
  then ``cgroup.events``), which ``docker pause`` sets before it returns. Any freeze, the
  engine's or a freeze still settling, counts as paused.

`HostHealth.open` returns why not instead (another pid namespace, a remote engine, not root,
gVisor or a VM runtime whose processes are not host processes, no readable freezer); the
backend then asks the engine as before (and looks again for a while when the answer is
`SHAPE`, which right after start may only mean "not yet"). `HostHealth.check` answers None
when it cannot read the freezer (the backend asks the engine then too).
"""

from __future__ import annotations

import contextlib
import os
import select
from pathlib import Path

from ._host import CGROUP_ROOT, PROC_ROOT, ContainerCgroup, find_container_cgroup

__all__ = ["SHAPE", "HostHealth"]

#: What ``/proc/<pid>/comm`` says of the engine's init for a container made with ``Init``.
INIT_COMM = "docker-init"
#: Why a container whose init has ended cannot take commands.
ENDED = "the container's main process has ended"
PAUSED = "the container is paused"
#: `HostHealth.open`'s answer when the init is not docker-init with the keepalive as its one
#: child. Right after start it may be not yet (``runc init`` still to exec docker-init, or
#: docker-init still to fork): worth another look later. For good with gVisor or a VM
#: runtime, whose processes are not host processes.
SHAPE = "the container's processes are not (yet) docker-init and the keepalive as its child"


class HostHealth:
    """One container's init and keepalive (pidfds) and freezer, read from the host. Close
    it when done."""

    __slots__ = ("_fds", "_poll", "cgroup", "container_id")

    def __init__(self, container_id: str, pidfds: tuple[int, ...],
                 cgroup: ContainerCgroup) -> None:
        """Take ownership of ``pidfds`` (closed by `close`)."""
        self.container_id = container_id
        self.cgroup = cgroup
        self._fds = pidfds
        self._poll = select.poll()
        for fd in pidfds:
            self._poll.register(fd, select.POLLIN)

    @classmethod
    def open(cls, container_id: str, pid: int, *, proc: Path = PROC_ROOT,
             root: Path = CGROUP_ROOT) -> HostHealth | str:
        """The view of ``container_id`` through its init ``pid`` (the engine's
        ``State.Pid``), or why there is none (then ask the engine)."""
        if pid <= 0 or not container_id:
            return "the engine gave no host pid for the container"
        if os.geteuid() != 0:
            return "the SDK is not root on the engine's host"
        fds: list[int] = []
        try:
            fds.append(fd := _pidfd(pid))
            cgroup = find_container_cgroup(pid, container_id, proc=proc, root=root)
            if cgroup is None:
                return "the container's cgroup is not visible from here (a remote engine, " \
                       "or another pid namespace)"
            argv = _read(proc / str(pid) / "cmdline")
            if _read(proc / str(pid) / "comm") != INIT_COMM.encode() + b"\n" or \
                    b"--\0" not in argv:
                return SHAPE
            keepalive = argv.split(b"--\0", 1)[1]
            children = _children(pid, proc)
            if len(children) != 1:
                return SHAPE
            fds.append(_pidfd(children[0]))  # then its files: the pid cannot change hands
            if _stat_ppid(children[0], proc) != pid or \
                    _read(proc / str(children[0]) / "cmdline") != keepalive:
                return SHAPE
            if cgroup.state() not in ("THAWED", "FREEZING", "FROZEN"):
                return "the container's freezer cannot be read from here"
            # Read after each pidfd was opened: while both show their process alive, neither
            # pid was free meanwhile, so the files read were theirs and not a newcomer's.
            if _ended(fd) or _ended(fds[-1]):
                return ENDED
            found, fds = cls(container_id, tuple(fds), cgroup), []
            return found
        except OSError as exc:
            return f"the container's processes cannot be read from here: {exc}"
        finally:
            for left in fds:
                os.close(left)

    def check(self) -> tuple[str, bool] | None:
        """("", False) while the container's init and keepalive live and it is not frozen;
        (why not, whether it is paused) otherwise; None when the freezer cannot be read (or
        after `close`)."""
        if not self._fds:
            return None
        if self._poll.poll(0):
            return ENDED, False
        state = self.cgroup.state()
        if state == "THAWED":
            return "", False
        if state in ("FROZEN", "FREEZING"):
            return PAUSED, True
        return None

    def close(self) -> None:
        """Close the pidfds; idempotent. `check` then answers None."""
        fds, self._fds = self._fds, ()
        for fd in fds:
            with contextlib.suppress(KeyError, ValueError):
                self._poll.unregister(fd)
            os.close(fd)


def _pidfd(pid: int) -> int:
    """A pidfd of ``pid``.

    Raises:
        OSError: No such process here (another pid namespace or host), or no pidfds.
    """
    return os.pidfd_open(pid)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _children(pid: int, proc: Path) -> list[int]:
    """``pid``'s children (its main thread's; docker-init has no other)."""
    text = _read(proc / str(pid) / "task" / str(pid) / "children")
    return [int(c) for c in text.split()]


def _stat_ppid(pid: int, proc: Path) -> int:
    stat = _read(proc / str(pid) / "stat")
    fields = stat.rpartition(b")")[2].split()
    return int(fields[1]) if len(fields) > 1 else 0


def _ended(fd: int) -> bool:
    """Whether the process of pidfd ``fd`` has exited (readable: a zombie counts)."""
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))
