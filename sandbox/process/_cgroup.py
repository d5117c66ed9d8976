"""The process sandbox's own cgroup: memory, pids and CPU limits, and its usage counters.

On cgroup v1 (this host) one directory per controller, ``<controller>/sandbox-sdk/<id>``; on
a v2-only host one directory, ``sandbox-sdk/<id>`` below the unified root. Creating them needs
write access there (root, or a delegated tree): `available` says whether this process has it,
and the plan falls back to rlimits without it (`_plan`). Every command of the sandbox, and so
everything sandbox code starts, is placed in it before it runs (the zygote joins it, see
`_forkserver`), so `procs` is also the list cleanup kills; the holder (bwrap's pid 1 and the
keep-alive, run by the SDK as another host id) is not, and is stopped on its own.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import time
from pathlib import Path

from .._cgroup_usage import HostCgroup
from .._models import ResourceLimits

__all__ = ["SandboxCgroup", "available", "renames"]

ROOT = Path("/sys/fs/cgroup")
PARENT = "sandbox-sdk"
_V1 = ("memory", "pids", "cpu", "cpuacct", "blkio")
_PERIOD_US = 100_000


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def available() -> str:
    """"" when this process can make a sandbox cgroup, else why not (for the refusal)."""
    if _v2():
        if not os.access(ROOT, os.W_OK):
            return (f"{ROOT} (cgroup v2) is not writable by uid {os.getuid()}; run as root or "
                    "in a delegated cgroup")
        return ""
    missing = [c for c in _V1 if not (ROOT / c).is_dir()]
    if missing:
        return f"cgroup v1 controllers {', '.join(missing)} are not mounted under {ROOT}"
    unwritable = [c for c in _V1 if not os.access(ROOT / c, os.W_OK)]
    if unwritable:
        return (f"the cgroup v1 hierarchies under {ROOT} are not writable by uid "
                f"{os.getuid()}; run as root")
    return ""


def renames() -> bool:
    """Whether a sandbox's cgroup can be renamed (cgroup v1; v2 refuses rename(2))."""
    return not _v2()


class SandboxCgroup:
    """One sandbox's cgroup directories; `create`, then `apply`, and `remove` at the end."""

    def __init__(self, sandbox_id: str) -> None:
        self.v2 = _v2()
        name = f"{PARENT}/{sandbox_id}"
        self.dirs = [ROOT / name] if self.v2 else [ROOT / c / name for c in _V1]

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a new process writes itself into."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def reader(self) -> HostCgroup:
        """The usage counters (shared with the Docker backend's exact per-command usage)."""
        if self.v2:
            d = self.dirs[0]
            return HostCgroup(cpu=d, memory=d, io=d, v2=True)
        by = {d.parent.parent.name: d for d in self.dirs}
        return HostCgroup(cpu=by["cpuacct"], memory=by["memory"], io=by["blkio"], v2=False)

    def create(self) -> None:
        if self.v2:
            parent = ROOT / PARENT
            parent.mkdir(exist_ok=True)
            with contextlib.suppress(OSError):
                (ROOT / "cgroup.subtree_control").write_text("+memory +pids +cpu +io")
            with contextlib.suppress(OSError):
                (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu +io")
        for d in self.dirs:
            d.parent.mkdir(exist_ok=True)
            d.mkdir()

    def apply(self, res: ResourceLimits) -> None:
        """Write the limits; 0 leaves a resource unlimited."""
        if self.v2:
            d = self.dirs[0]
            if res.memory_limit:
                _write(d / "memory.max", res.memory_limit)
                with contextlib.suppress(OSError):
                    _write(d / "memory.swap.max", 0)
            if res.memory_request:
                _write(d / "memory.low", res.memory_request)
            if res.process_limit:
                _write(d / "pids.max", res.process_limit)
            if res.cpu_limit:
                (d / "cpu.max").write_text(f"{round(res.cpu_limit * _PERIOD_US)} {_PERIOD_US}")
            if res.cpu_request:
                _write(d / "cpu.weight", max(1, min(10000, round(res.cpu_request * 100))))
            return
        by = {d.parent.parent.name: d for d in self.dirs}
        if res.memory_limit:
            _write(by["memory"] / "memory.limit_in_bytes", res.memory_limit)
            with contextlib.suppress(OSError):  # only with swap accounting
                _write(by["memory"] / "memory.memsw.limit_in_bytes", res.memory_limit)
        if res.memory_request:
            _write(by["memory"] / "memory.soft_limit_in_bytes", res.memory_request)
        if res.process_limit:
            _write(by["pids"] / "pids.max", res.process_limit)
        if res.cpu_limit:
            _write(by["cpu"] / "cpu.cfs_period_us", _PERIOD_US)
            _write(by["cpu"] / "cpu.cfs_quota_us", round(res.cpu_limit * _PERIOD_US))
        if res.cpu_request:
            _write(by["cpu"] / "cpu.shares", max(2, round(res.cpu_request * 1024)))

    def procs(self) -> set[int]:
        """Every process in the cgroup now."""
        return _procs(self.procs_files)

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended in it so far."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:  # dirs[0] is the memory controller's on v1 (see _V1), the only one on v2
            for line in (self.dirs[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self) -> list[str]:
        """Kill what is left in it and remove every directory; the errors, if any.

        Every process of the sandbox is in every one of its directories (the zygote joins
        them all before it starts anything, and nothing in the sandbox can move itself), so
        the first directory's list is the one to kill; the kernel refuses to remove a
        directory that still holds a process (EBUSY), and then every list is read again.
        """
        errors: list[str] = []
        left = list(self.dirs)
        files = self.procs_files[:1]
        pids = _procs(files)
        for _ in range(_ROUNDS):
            if pids:
                _kill_and_wait(pids, files, _KILL_WAIT)
            busy = []
            for d in left:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as exc:
                    if exc.errno == errno.EBUSY:
                        busy.append(d)
                    else:
                        errors.append(f"cannot remove cgroup {d}: {exc}")
            left = busy
            if not left:
                return errors
            files = self.procs_files
            pids = _procs(files)
            if not pids:
                time.sleep(0.01)  # exiting: no longer listed, not yet detached
        errors += [f"cannot remove cgroup {d}: still busy" for d in left]
        return errors


#: Rounds of kill and removal in `SandboxCgroup.remove`, each waiting up to `_KILL_WAIT` s
#: for the killed to exit.
_ROUNDS = 50
_KILL_WAIT = 0.05


def _procs(files: list[str]) -> set[int]:
    """The processes listed in ``files`` (``cgroup.procs``) now."""
    found: set[int] = set()
    for path in files:
        with contextlib.suppress(OSError, ValueError), open(path) as f:
            found.update(int(line) for line in f.read().split())
    return found


def _kill_and_wait(pids: set[int], files: list[str], timeout: float) -> None:
    """SIGKILL ``pids`` through pidfds and wait, up to ``timeout`` s, until all have exited.

    Only a process still listed in ``files`` once its pidfd is open is killed: a pid read
    from the list could have ended and been reused by a host process before the pidfd_open,
    but a pidfd names one process for good, and a pid listed after it was opened is that
    process (alive, in the cgroup) or one that joined the cgroup since.

    A pidfd turns readable when its process exits (a child of ours or not), so the wait ends
    as soon as the last one is gone: no sleep-and-read-again per 10 ms (each read of the
    cgroup's ``cgroup.procs`` files and each wake-up cost the SDK CPU and a GIL hand-off
    while hundreds of sandboxes close). One whose pidfd cannot be had (gone already) is
    skipped; the caller reads the cgroup again either way.
    """
    poller = select.poll()
    opened: list[tuple[int, int]] = []  # (pid, its pidfd)
    left = 0
    try:
        for pid in pids:
            try:
                opened.append((pid, os.pidfd_open(pid)))
            except OSError:
                continue
        listed = _procs(files)
        for pid, fd in opened:
            if pid not in listed:
                continue
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                continue
            poller.register(fd, select.POLLIN)
            left += 1
        deadline = time.monotonic() + timeout
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            for fd, _ in poller.poll(wait * 1000):
                poller.unregister(fd)
                left -= 1
    finally:
        for _, fd in opened:
            os.close(fd)


def _write(path: Path, value: int) -> None:
    path.write_text(str(value))
