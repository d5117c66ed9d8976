"""Kill a command from the engine's host: freeze the container's cgroup, SIGKILL the command's
processes, thaw, and look again until none is left.

The marker sweep is an exec, and an exec needs a free pid in the container: a fork bomb at the
process limit starves it, and the command lives on. This path needs nothing inside the
container. It works where the SDK runs as root in the engine's pid namespace (the usual local
engine); elsewhere `find_container_cgroup` gives None and the sweep is all there is.

What it kills: every process of the container whose environment holds the command's marker
(as the sweep does), the exec's own process (the one whose parent is outside the container,
given by the engine's ``Pid``) and every descendant of these, all seen at one frozen instant so
a fork loop cannot outrun it. Each process is judged by what the host's /proc says, never by
anything the sandbox reports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import attrs

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")
#: How long a freeze may take to settle before the kill goes on regardless (a task stuck in
#: uninterruptible sleep keeps a v1 freezer at FREEZING).
FREEZE_SETTLE = 1.0
#: How long the killed processes may take to be gone, per round.
REAP_WAIT = 3.0
#: Freeze-scan-kill rounds before the kill is reported unconfirmed.
ROUNDS = 5


@attrs.frozen
class ContainerCgroup:
    """Where a container's processes are listed and frozen on this host."""

    procs: Path  # cgroup.procs listing every process of the container
    freeze: Path | None  # v1 freezer.state, v2 cgroup.freeze; None: no freezer reachable
    v2: bool

    def state(self) -> str:
        """"THAWED", "FREEZING" or "FROZEN" (v2: "THAWED" or "FROZEN"); "" if unreadable."""
        if self.freeze is None:
            return ""
        try:
            text = self.freeze.read_text().strip()
        except OSError:
            return ""
        if self.v2:
            return "FROZEN" if text == "1" else "THAWED"
        return text

    def set_frozen(self, frozen: bool) -> bool:
        """Write the freezer; False when it cannot be written."""
        if self.freeze is None:
            return False
        value = ("1" if frozen else "0") if self.v2 else ("FROZEN" if frozen else "THAWED")
        try:
            self.freeze.write_text(value)
        except OSError:
            return False
        return True

    def pids(self) -> list[int] | None:
        """The container's processes (their pids in the SDK's namespace); None if unreadable."""
        try:
            text = self.procs.read_text()
        except OSError:
            return None
        return [int(p) for p in text.split() if p.isdigit() and int(p) > 0]


def find_container_cgroup(pid: int, container_id: str, *, proc: Path = PROC_ROOT,
                          root: Path = CGROUP_ROOT) -> ContainerCgroup | None:
    """The cgroup of ``container_id`` through one of its processes ``pid``, else None.

    Trusted only when the path names the container (so another pid namespace or a reused pid
    gives None) and the SDK may write its freezer (root on the engine's host).
    """
    if pid <= 0 or not container_id or os.geteuid() != 0:
        return None
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if container_id not in path:
            continue
        rel = path.lstrip("/")
        if "freezer" in controllers.split(","):
            base = root / controllers / rel
            if (base / "freezer.state").exists():
                return ContainerCgroup(procs=base / "cgroup.procs",
                                       freeze=base / "freezer.state", v2=False)
        if controllers == "" and (root / "cgroup.controllers").exists():
            base = root / rel
            if (base / "cgroup.freeze").exists():
                return ContainerCgroup(procs=base / "cgroup.procs",
                                       freeze=base / "cgroup.freeze", v2=True)
    return None


@attrs.frozen
class _Proc:
    ppid: int
    start: int  # start time in clock ticks since boot: tells a reused pid apart
    zombie: bool


def _stat(pid: int, proc: Path) -> _Proc | None:
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    try:
        return _Proc(ppid=int(fields[1]), start=int(fields[19]), zombie=fields[0] in "ZX")
    except (IndexError, ValueError):
        return None


def _marked(pid: int, needle: bytes, proc: Path) -> bool:
    try:
        environ = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return needle in environ.split(b"\0")


def _targets(cg: ContainerCgroup, needle: bytes, root: int,
             proc: Path) -> dict[int, int] | None:
    """pid -> start time of every live process to kill, read while the cgroup is frozen;
    None when the cgroup cannot be listed."""
    pids = cg.pids()
    if pids is None:
        return None
    procs = {pid: st for pid in pids if (st := _stat(pid, proc)) is not None}
    seeds = [pid for pid, st in procs.items() if not st.zombie and _marked(pid, needle, proc)]
    # The exec's own process: its parent (the engine's shim) is outside the container.
    if root in procs and procs[root].ppid not in procs:
        seeds.append(root)
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st.ppid, []).append(pid)
    found: dict[int, int] = {}
    while seeds:
        pid = seeds.pop()
        if pid in found:
            continue
        if not procs[pid].zombie:
            found[pid] = procs[pid].start
        seeds.extend(children.get(pid, ()))
    return found


def _gone(pid: int, start: int, proc: Path) -> bool:
    st = _stat(pid, proc)
    return st is None or st.zombie or st.start != start


def _wait_frozen(cg: ContainerCgroup) -> None:
    until = time.monotonic() + FREEZE_SETTLE
    while cg.state() != "FROZEN" and time.monotonic() < until:
        time.sleep(0.001)


def kill_from_host(cg: ContainerCgroup, marker_entry: str, root_pid: int, *,
                   freeze: bool = True, proc: Path = PROC_ROOT) -> bool | None:
    """SIGKILL the command's processes (see the module doc); True once a frozen look finds
    none left, False if they could not be confirmed gone; None when the host does not see the
    command at all (the first look found none of its processes: another runtime such as
    gVisor, or it ended), so another way must decide. Blocking: run it in a thread.

    A container someone else froze (a pause) is not thawed here: its processes, SIGKILL
    pending, die the moment it is, before running another instruction; none can fork
    meanwhile. So one look at it is the whole story, and that counts as confirmed.

    ``freeze=False`` (an exec of the SDK may still be starting: freezing its ``runc init``
    can wedge the engine) looks and kills without freezing, round after round; a fork loop
    may then outrun it, which is reported as False, never claimed.
    """
    needle = marker_entry.encode()
    for round_ in range(ROUNDS):
        state = cg.state()
        thawed = state == "THAWED"
        froze = freeze and thawed and cg.set_frozen(True)
        try:
            if froze:
                _wait_frozen(cg)
            found = _targets(cg, needle, root_pid, proc)
            for pid in found or ():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            if froze:
                cg.set_frozen(False)
        if found is None:
            return False
        if not found:
            return None if round_ == 0 else True
        if state == "FROZEN":  # paused by someone else: they die when it is thawed
            return True
        until = time.monotonic() + REAP_WAIT
        while time.monotonic() < until and \
                not all(_gone(pid, start, proc) for pid, start in found.items()):
            time.sleep(0.01)
    return False
