"""A local container seen from the engine's host: its cgroup (list its processes, freeze and
thaw it) and its processes as the host's ``/proc`` shows them.

The one place that finds, freezes and reads a container from outside, for both users: the
kill of a command's tree (`_host_kill`, and the checkpoint's freeze watch) and the pool's reset
(`_hostview`). Nothing here asks the container anything, so nothing inside can lie to it. It
needs root in the engine's pid namespace; `find_container_cgroup` gives None otherwise.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import attrs

from .._hostview import Identity, identity_of_status

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")


@attrs.frozen
class ContainerCgroup:
    """Where a container's processes are listed and frozen on this host."""

    procs: Path  # cgroup.procs listing every process of the container
    freeze: Path | None  # v1 freezer.state, v2 cgroup.freeze; None: no freezer reachable
    v2: bool

    @property
    def path(self) -> Path:
        """The container's cgroup directory."""
        return self.procs.parent

    def state(self) -> str:
        """"THAWED", "FREEZING" or "FROZEN"; "" if unreadable. On v2 a freeze asked of
        ``cgroup.freeze`` is "FREEZING" until ``cgroup.events`` says it took hold, as v1's
        freezer.state says, so a wait for the freeze and a stuck freeze are seen alike."""
        if self.freeze is None:
            return ""
        try:
            text = self.freeze.read_text().strip()
            if self.v2:
                if text != "1":
                    return "THAWED"
                events = (self.path / "cgroup.events").read_text().splitlines()
                return "FROZEN" if "frozen 1" in events else "FREEZING"
        except OSError:
            return ""
        return text

    def frozen(self) -> bool:
        """Whether the freeze took hold (v2: ``cgroup.events`` says so, not just asked).

        Raises:
            OSError: The freezer cannot be read (or there is none).
        """
        if self.v2:
            return "frozen 1" in (self.path / "cgroup.events").read_text().splitlines()
        return self._freeze_file().read_text().strip() == "FROZEN"

    def write_frozen(self, frozen: bool) -> None:
        """Write the freezer.

        Raises:
            OSError: It cannot be written (or there is none).
        """
        value = ("1" if frozen else "0") if self.v2 else ("FROZEN" if frozen else "THAWED")
        self._freeze_file().write_text(value)

    def set_frozen(self, frozen: bool) -> bool:
        """Write the freezer; False when it cannot be written."""
        try:
            self.write_frozen(frozen)
        except OSError:
            return False
        return True

    @contextlib.contextmanager
    def hold_frozen(self, patience: float) -> Iterator[bool]:
        """Freeze the cgroup for the block (no process can fork, exit or run); yield
        whether it froze within ``patience`` s. Always thawed after, even on error.

        Raises:
            OSError: The freezer cannot be read or written.
        """
        try:
            self.write_frozen(True)
            deadline = time.monotonic() + patience
            while not self.frozen() and time.monotonic() < deadline:
                time.sleep(0.005)
            yield self.frozen()
        finally:
            self.write_frozen(False)

    def pids(self) -> list[int] | None:
        """The container's processes (their pids in the SDK's namespace); None if unreadable."""
        try:
            text = self.procs.read_text()
        except OSError:
            return None
        return [int(p) for p in text.split() if p.isdigit() and int(p) > 0]

    def tree_pids(self) -> set[int]:
        """Every process of the cgroup and of any cgroup below it (one the container made)."""
        found: set[int] = set()
        for top, _dirs, _files in os.walk(self.path):
            with contextlib.suppress(FileNotFoundError):
                found.update(int(line) for line in
                             Path(top, "cgroup.procs").read_text().split())
        return found

    def _freeze_file(self) -> Path:
        if self.freeze is None:
            raise FileNotFoundError(f"no freezer for the cgroup {self.path}")
        return self.freeze


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
class ProcStat:
    """What ``/proc/<pid>/stat`` says of a host process."""

    pid: int
    comm: str  # the command name, as the process set it
    state: str  # "R", "S", "D", "Z", ...
    ppid: int
    start: int  # start time in clock ticks since boot: tells a reused pid apart

    @property
    def zombie(self) -> bool:
        """Dead, waiting for its parent (or being reaped)."""
        return self.state in ("Z", "X")


def read_stat(pid: int, proc: Path = PROC_ROOT) -> ProcStat | None:
    """A host process's `ProcStat`; None once it is gone.

    Raises:
        OSError: Its stat cannot be read for another reason.
        ValueError: The stat line is malformed.
    """
    try:
        text = (proc / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ")".
    head, _, rest = text.rpartition(")")
    fields = rest.split()
    try:
        return ProcStat(pid=pid, comm=head.partition("(")[2], state=fields[0],
                        ppid=int(fields[1]), start=int(fields[19]))
    except IndexError as exc:
        raise ValueError(f"malformed /proc/{pid}/stat") from exc


@attrs.frozen
class HostProcess:
    """A host process's stat, ids and command line (for the pool's reset)."""

    pid: int
    ppid: int
    start: int
    identity: Identity
    cmdline: bytes  # NUL-separated


def read_process(pid: int, proc: Path = PROC_ROOT) -> HostProcess | None:
    """A host process's parent, start time, ids and command line; None once it is gone.

    Raises:
        OSError: Its files cannot be read for another reason.
        ValueError: Its stat or status is malformed.
    """
    try:
        st = read_stat(pid, proc)
        status = (proc / str(pid) / "status").read_text()
        cmdline = (proc / str(pid) / "cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    if st is None:
        return None
    return HostProcess(pid=pid, ppid=st.ppid, start=st.start,
                       identity=identity_of_status(status), cmdline=cmdline)
