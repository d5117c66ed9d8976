"""A local container seen from the host: its processes (through its cgroup) and its files
(through its init's ``/proc/<pid>/root``), for the pool's reset between users.

Nothing here runs inside the container, so nothing the last user left there (a replaced
tool, a process of another uid, a dormant daemon) can lie to it. It needs the engine on this
host, the host's pid namespace and the right to freeze the container's cgroup and to signal
any uid (root here); `HostView.find` returns None otherwise, and the pool then does not reuse
the sandbox. Only a runc container qualifies: its init must be docker-init with exactly the
SDK's keepalive shell as child (a gVisor or VM sandbox's processes are not host processes).
The cgroup and ``/proc`` access itself is `_host`'s (shared with the kill from the host).
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import attrs

from .._hostview import Identity, Meta
from ._host import (
    CGROUP_ROOT,
    PROC_ROOT,
    ContainerCgroup,
    HostProcess,
    find_container_cgroup,
    read_process,
)
from ._keepalive import SLEEP_ARGV

#: How long a freeze may take to settle before the reset gives up (and thaws).
FREEZE_PATIENCE = 2.0
#: How long killed processes may take to leave the cgroup.
EXIT_PATIENCE = 5.0

#: Extended attributes the kernel or overlayfs keeps for itself (never visible to a sandbox).
_PRIVATE_XATTRS = ("trusted.overlay.",)


def _components(path: str) -> list[str]:
    parts = [p for p in path.split("/") if p]
    if not path.startswith("/") or any(p in (".", "..") for p in parts):
        raise ValueError(f"not a normalized absolute path: {path!r}")
    return parts


def _meta(fd: int, *, with_xattrs: bool) -> Meta:
    st = os.fstat(fd)
    xattrs: tuple[tuple[str, bytes], ...] = ()
    if with_xattrs:
        names = sorted(n for n in os.listxattr(fd) if not n.startswith(_PRIVATE_XATTRS))
        xattrs = tuple((n, os.getxattr(fd, n)) for n in names)
    is_dir = stat.S_ISDIR(st.st_mode)
    return Meta(kind=stat.S_IFMT(st.st_mode), mode=stat.S_IMODE(st.st_mode), uid=st.st_uid,
                gid=st.st_gid, xattrs=xattrs, ctime_ns=0 if is_dir else st.st_ctime_ns,
                size=0 if is_dir else st.st_size)


@attrs.define
class HostView:
    """One local runc container, seen from the host. Blocking: call it in a worker thread."""

    container_id: str
    init_pid: int
    init_start: int
    keepalive_pid: int
    keepalive_start: int
    keepalive: bytes  # its command line, NUL-separated
    cgroup: ContainerCgroup
    proc: Path = PROC_ROOT

    @classmethod
    def find(cls, container_id: str, init_pid: int, keepalive: Sequence[str], *,
             proc: Path = PROC_ROOT, root: Path = CGROUP_ROOT) -> HostView | str:
        """The view of a container just started (only its init and keepalive run), or why
        there is none."""
        if init_pid <= 0 or not container_id:
            return "the engine gave no host pid for the container"
        if os.geteuid() != 0:
            return "the SDK is not root on the engine's host (it cannot freeze the " \
                   "container or signal its processes)"
        cgroup = find_container_cgroup(init_pid, container_id, proc=proc, root=root)
        if cgroup is None:
            return "the container's cgroup is not visible from here (a remote engine, or " \
                   "another pid namespace)"
        init = read_process(init_pid, proc)
        procs = [p for p in (read_process(pid, proc) for pid in cgroup.tree_pids())
                 if p is not None]
        wanted = b"\0".join(a.encode() for a in keepalive) + b"\0"
        children = [p for p in procs if p.ppid == init_pid]
        if init is None or len(children) != 1 or children[0].cmdline != wanted or \
                not children[0].identity.is_root or not init.identity.is_root:
            return "the container's processes are not host processes of the expected shape " \
                   "(docker-init and the keepalive shell; a gVisor or VM runtime?)"
        view = cls(container_id=container_id, init_pid=init_pid, init_start=init.start,
                   keepalive_pid=children[0].pid, keepalive_start=children[0].start,
                   keepalive=wanted, cgroup=cgroup, proc=proc)
        if cgroup.freeze is None or not os.access(cgroup.freeze, os.W_OK):
            return "the container's cgroup cannot be frozen from here"
        return view

    # -- processes -------------------------------------------------------------------------

    def _alive(self) -> str:
        """"" while the container's init and keepalive are the ones recorded, else why not."""
        for pid, start in ((self.init_pid, self.init_start),
                           (self.keepalive_pid, self.keepalive_start)):
            got = read_process(pid, self.proc)
            if got is None or got.start != start:
                return "the container's init is not the one recorded (it restarted or ended)"
        return ""

    def _ours(self, p: HostProcess) -> bool:
        """The container's init, its keepalive shell, and that shell's child: its ``sleep``,
        or a fork of itself (its loop where no ``sleep`` is in the system's directories).
        Only the keepalive makes a process its child (it reaps no orphans)."""
        if p.pid in (self.init_pid, self.keepalive_pid):
            return True
        return p.ppid == self.keepalive_pid and p.identity.is_root and \
            p.cmdline in (SLEEP_ARGV, self.keepalive)

    def _others(self) -> list[HostProcess]:
        procs = (read_process(pid, self.proc) for pid in self.cgroup.tree_pids())
        return [p for p in procs if p is not None and not self._ours(p)]

    def kill_all(self, identity: Identity) -> str:
        """Kill every process but the container's own, whatever its uid; "" when none is
        left, else why the sandbox cannot be reused (a process that ran as another identity
        than ``identity`` is reported, not just killed: what it did may outlive it)."""
        why = self._alive()
        if why:
            return why
        with self.cgroup.hold_frozen(FREEZE_PATIENCE) as frozen:
            if not frozen:
                return "the container's cgroup did not freeze"
            others = self._others()  # frozen: none can fork or exit meanwhile
            foreign = sorted({str(p.identity) for p in others if p.identity != identity})
            if foreign:
                return f"a process ran as another user than the sandbox's ({', '.join(foreign)})"
            for p in others:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)  # it dies at the thaw
        return self.wait_none_left()

    def wait_none_left(self) -> str:
        """"" once only the container's own processes are left; else what survived."""
        deadline = time.monotonic() + EXIT_PATIENCE
        while True:
            left = self._others()
            if not left:
                return self._alive()
            if time.monotonic() >= deadline:
                return f"{len(left)} process(es) survived SIGKILL (pid {left[0].pid})"
            time.sleep(0.01)

    # -- files -----------------------------------------------------------------------------

    def _root(self) -> str:
        return str(self.proc / str(self.init_pid) / "root")

    def metadata(self, paths: Iterable[str]) -> dict[str, Meta | None]:
        """Each path's metadata in the container (None: gone, or not reachable without
        following a symbolic link). Directories carry their extended attributes, POSIX ACLs
        included; other files their ctime, which any change of content, mode or xattr moves.
        """
        out: dict[str, Meta | None] = {}
        root = os.open(self._root(), os.O_RDONLY | os.O_DIRECTORY)
        try:
            for path in paths:
                out[path] = self._one(root, _components(path))
        finally:
            os.close(root)
        return out

    def _one(self, root: int, parts: list[str]) -> Meta | None:
        fds: list[int] = []
        try:
            cur = root
            for part in parts[:-1]:
                cur = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=cur)
                fds.append(cur)
            if not parts:
                return _meta(root, with_xattrs=True)
            # O_PATH: opens a fifo or device without side effects, and a symlink as itself.
            fd = os.open(parts[-1], os.O_PATH | os.O_NOFOLLOW, dir_fd=cur)
            fds.append(fd)
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                return _meta(fd, with_xattrs=False)
            real = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            fds.append(real)
            return _meta(real, with_xattrs=True)
        except (FileNotFoundError, NotADirectoryError, OSError):
            return None
        finally:
            for fd in fds:
                os.close(fd)

    def changeable_dirs(self, identity: Identity) -> list[str]:
        """Directories of the container's own filesystem whose mode, owner, xattrs or ACLs
        ``identity`` could change: those it owns, may write (user xattrs), or that carry an
        ACL (which may grant it more than the mode says). Call it on a new sandbox."""
        root = self._root()
        device = os.stat(root).st_dev
        found: list[str] = []
        for top, dirs, _files in os.walk(root):
            keep = []
            for name in dirs:
                path = os.path.join(top, name)
                st = os.lstat(path)
                if st.st_dev != device or not stat.S_ISDIR(st.st_mode):
                    continue  # another mount (/proc, /dev, a tmpfs) or a symlink
                keep.append(name)
                if identity.may_change(st.st_uid, st.st_gid, st.st_mode) or any(
                        n.startswith("system.posix_acl") for n in
                        os.listxattr(path, follow_symlinks=False)):
                    found.append(path[len(root):])
            dirs[:] = keep
        return found
