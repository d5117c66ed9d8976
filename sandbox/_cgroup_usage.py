"""Read a sandbox's cgroup usage counters straight from the host, for every backend.

Shared by the Docker backend (exact per-command usage of a local container: the engine's
stats come once a second, too coarse for a short command) and the process backend (its own
cgroup, sampled and per command). The files answer in microseconds. A container's cgroup
is found through its main process, and only trusted when its path names the container, so
a remote engine, another pid namespace or a reused pid gives None, not numbers of something
else.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs

from ._models import ResourceUsage

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_ROOT = Path("/proc")


@attrs.frozen
class Counters:
    """Cumulative counters of one cgroup at one moment."""

    cpu_ns: int
    memory: int  # in use, without the inactive page cache (as ``docker stats`` shows it)
    read_bytes: int
    write_bytes: int
    high_water: int = 0  # the cgroup's memory high-water mark (page cache included); 0: none
    limit: int = 0  # the cgroup's memory limit; 0: none


_READ_SIZE = 65536


def _read(path: str | Path) -> str:
    """A cgroup file's text: os.read, a third of pathlib's cost (read twice per command).

    A read that returns less than asked for is the end: the kernel's cgroup files (seq files)
    fill a read as far as they can, so no second read asks to see the end (a syscall fewer
    per file).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, _READ_SIZE):
            chunks.append(chunk)
            if len(chunk) < _READ_SIZE:
                break
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


def _stat_value(text: str, key: str) -> int:
    """The value of the line "``key`` value" of a stat file (0 when absent): one search,
    where parsing every line of memory.stat cost more than reading it (twice per command)."""
    head = key + " "
    if text.startswith(head):
        at = 0
    else:
        at = text.find("\n" + head)
        if at < 0:
            return 0
        at += 1
    end = text.find("\n", at)
    value = text[at + len(head):end if end >= 0 else len(text)].strip()
    return int(value) if value.isdigit() else 0


@attrs.frozen
class HostCgroup:
    """The cgroup directories of one container: v1 per controller, or one v2 directory."""

    cpu: Path
    memory: Path
    io: Path
    v2: bool
    #: The counter files' paths as strings, joined once (a Path join per file per read cost
    #: more than the read): cpu, memory in use, memory.stat, io, high-water mark, limit.
    _files: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        names = (("cpu.stat", "memory.current", "memory.stat", "io.stat", "memory.peak",
                  "memory.max") if self.v2 else
                 ("cpuacct.usage", "memory.usage_in_bytes", "memory.stat",
                  "blkio.throttle.io_service_bytes_recursive", "memory.max_usage_in_bytes",
                  "memory.limit_in_bytes"))
        dirs = (self.cpu, self.memory, self.memory, self.io, self.memory, self.memory)
        object.__setattr__(self, "_files", tuple(
            os.path.join(d, n) for d, n in zip(dirs, names, strict=True)))

    @classmethod
    def find(cls, pid: int, container_id: str, *, proc: Path = PROC_ROOT,
             root: Path = CGROUP_ROOT) -> HostCgroup | None:
        """Locate the cgroup of ``container_id`` through its main process ``pid``, else None."""
        if pid <= 0 or not container_id:
            return None
        try:
            lines = _read(proc / str(pid) / "cgroup").splitlines()
        except OSError:
            return None
        v1: dict[str, Path] = {}
        unified: Path | None = None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if container_id not in path:
                continue
            rel = path.lstrip("/")
            if controllers == "":
                unified = root / rel if (root / "cgroup.controllers").exists() else None
            for name in controllers.split(","):
                v1[name] = root / controllers / rel
        if {"cpuacct", "memory", "blkio"} <= v1.keys():
            found = cls(cpu=v1["cpuacct"], memory=v1["memory"], io=v1["blkio"], v2=False)
        elif unified is not None:
            found = cls(cpu=unified, memory=unified, io=unified, v2=True)
        else:
            return None
        return found if found.read() is not None else None

    def read(self, *, limit: bool = True) -> Counters | None:
        """Read the counters now; None once the cgroup is gone or unreadable. ``limit``:
        read the memory limit too (else it is 0: a command's start needs none)."""
        try:
            return self._read_v2(limit) if self.v2 else self._read_v1(limit)
        except (OSError, ValueError):
            return None

    def cpu_ns(self) -> int | None:
        """Only the CPU time used so far (one small file: a sampler's is-it-idle check)."""
        try:
            if self.v2:
                return _stat_value(_read(self._files[0]), "usage_usec") * 1000
            fd = os.open(self._files[0], os.O_RDONLY | os.O_CLOEXEC)
            try:
                return int(os.read(fd, 64))
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return None

    def _read_v1(self, limit: bool) -> Counters:
        cpu, current, stat, io, peak, most = self._files
        used = int(_read(current))
        inactive = _stat_value(_read(stat), "total_inactive_file")
        reads = writes = 0
        # Block I/O only counts on cgroup v1 when the kernel attributes it to the cgroup
        # (direct or synchronous I/O); page-cache writeback is charged to the root.
        for line in _read(io).splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in ("Read", "Write"):
                if parts[1] == "Read":
                    reads += int(parts[2])
                else:
                    writes += int(parts[2])
        return Counters(
            cpu_ns=int(_read(cpu)),
            memory=_without_cache(used, inactive),
            read_bytes=reads, write_bytes=writes,
            high_water=int(_read(peak)),
            limit=_limit(most) if limit else 0,
        )

    def _read_v2(self, limit: bool) -> Counters:
        cpu, current, stat, io, peak, most = self._files
        used = int(_read(current))
        inactive = _stat_value(_read(stat), "inactive_file")
        reads = writes = 0
        for line in _read(io).splitlines():
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "rbytes":
                    reads += int(value)
                elif key == "wbytes":
                    writes += int(value)
        return Counters(
            cpu_ns=_stat_value(_read(cpu), "usage_usec") * 1000,
            memory=_without_cache(used, inactive),
            read_bytes=reads, write_bytes=writes,
            high_water=_optional_int(peak),
            limit=_limit(most) if limit else 0,
        )


def _optional_int(path: str) -> int:
    try:
        return int(_read(path))
    except FileNotFoundError:
        return 0  # memory.peak came with Linux 5.19


#: At or above this a v1 ``memory.limit_in_bytes`` means no limit (it reads 2**63 - 4096).
_NO_LIMIT = 1 << 62


def _limit(path: str) -> int:
    """A memory limit file's value; 0 for none ("max" on v2, near 2**63 on v1, no file)."""
    try:
        text = _read(path).strip()
    except FileNotFoundError:
        return 0
    value = int(text) if text.isdigit() else 0
    return value if value < _NO_LIMIT else 0


def _without_cache(used: int, inactive: int) -> int:
    return used - inactive if inactive < used else used


def command_usage(window: ResourceUsage | None, before: Counters, after: Counters,
                  seconds: float) -> ResourceUsage:
    """Sharpen a sampled window with exact counters read at a command's start and end.

    CPU time, block I/O and the memory readings come from the counters; network and the
    point-in-time fields the counters lack (processes, files) stay as the window has them.
    A high-water mark that rose during the command was reached during it, so it is the peak.
    ``memory_percent`` is ``memory_usage`` over the cgroup's limit (else over the denominator
    the sampler used, host memory), so the two always describe the same reading.
    """
    base = window or ResourceUsage(timestamp=datetime.now(UTC))
    cpu_ns = max(after.cpu_ns - before.cpu_ns, 0)
    peak = max(base.memory_peak if window else 0, before.memory, after.memory)
    if after.high_water > before.high_water:
        peak = max(peak, after.high_water)
    total = after.limit
    if not total and window and window.memory_usage and window.memory_percent:
        total = round(window.memory_usage * 100.0 / window.memory_percent)
    return attrs.evolve(
        base,
        timestamp=datetime.now(UTC),
        cpu_time=timedelta(microseconds=cpu_ns // 1000),
        cpu_usage=cpu_ns / 1e9 / seconds * 100.0 if seconds > 0 else 0.0,
        memory_usage=after.memory,
        memory_percent=after.memory / total * 100.0 if total > 0 else 0.0,
        memory_peak=peak,
        disk_reads=max(after.read_bytes - before.read_bytes, 0),
        disk_writes=max(after.write_bytes - before.write_bytes, 0),
        uptime=timedelta(seconds=max(seconds, 0.0)),
    )
