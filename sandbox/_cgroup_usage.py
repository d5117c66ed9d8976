"""Read a sandbox's cgroup usage counters straight from the host, for every backend.

Shared by the Docker backend (exact per-command usage of a local container: the engine's
stats come once a second, too coarse for a short command) and the process backend (its own
cgroup, sampled and per command). The files answer in microseconds. A container's cgroup
is found through its main process, and only trusted when its path names the container, so
a remote engine, another pid namespace or a reused pid gives None, not numbers of something
else.
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from ._lazy_usage import LazyUsage
from ._models import ResourceUsage, derived_usage, slot_setters

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


_SET_COUNTER = slot_setters(Counters, (
    "cpu_ns", "memory", "read_bytes", "write_bytes", "high_water", "limit"), "_counters")


def _counters(cpu_ns: int, memory: int, read_bytes: int, write_bytes: int, high_water: int,
              limit: int) -> Counters:
    """``Counters(...)`` through its slots' setters: its generated ``__init__`` finds each
    slot by name (twice per command, per field). The values are the parsers' ints."""
    c = object.__new__(Counters)
    s_cpu, s_memory, s_reads, s_writes, s_high, s_limit = _SET_COUNTER
    s_cpu(c, cpu_ns)
    s_memory(c, memory)
    s_reads(c, read_bytes)
    s_writes(c, write_bytes)
    s_high(c, high_water)
    s_limit(c, limit)
    return c


_READ_SIZE = 65536


def _read(path: str | Path) -> str:
    """A cgroup file's text (see `_read_bytes`)."""
    return _read_bytes(path).decode()


def _read_bytes(path: str | Path) -> bytes:
    """A cgroup file's bytes: os.read, a third of pathlib's cost (read twice per command).

    A read that returns less than asked for is the end: the kernel's cgroup files (seq files)
    fill a read as far as they can, so no second read asks to see the end (a syscall fewer
    per file). The counters parse from bytes (``int`` takes them).
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
    return b"".join(chunks)


def _stat_value(text: bytes, key: bytes) -> int:
    """The value of the line "``key`` value" of a stat file (0 when absent): one search,
    where parsing every line of memory.stat cost more than reading it (twice per command)."""
    head = key + b" "
    if text.startswith(head):
        at = 0
    else:
        at = text.find(b"\n" + head)
        if at < 0:
            return 0
        at += 1
    end = text.find(b"\n", at)
    value = text[at + len(head):end if end >= 0 else len(text)].strip()
    return int(value) if value.isdigit() else 0


#: The most counter-file descriptors all sandboxes of this process keep open together (see
#: `HostCgroup.keep_open`); past it a sandbox opens its files per read, as before. A quarter of
#: the soft open-files limit (1,024 with 256 for these: ~40 sandboxes of six files), so the
#: fds kept never crowd out what the program opens itself.
_FD_BUDGET_SHARE = 4
_fd_lock = threading.Lock()
_fds_kept = 0


def _fd_budget() -> int:
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(soft // _FD_BUDGET_SHARE, 0)


_FD_BUDGET = _fd_budget()


#: Bytes asked for per read of each kept file (`HostCgroup._files` order): a number (or a few
#: lines) but for memory.stat and the io counters. Each read allocates what it asks for, and
#: 64 KiB per file (then shrunk) was a sixth of a read's cost; a longer file is read on.
_KEPT_READ_SIZES = (512, 512, 8192, 4096, 512, 512)
#: The kept files' bytes as read: memory used, memory.stat, io, cpu, the high mark, the limit.
_Texts = tuple[bytes, bytes, bytes, bytes, bytes | None, bytes | None]


class _KeptFiles:
    """Open descriptors of one cgroup's counter files (-1: the file is absent), read with
    pread at offset 0 (a cgroup file answers afresh at offset 0): an open and a close fewer
    per file and read, where the open (a path walk through the cgroup filesystem) cost the
    most. Counted against `_FD_BUDGET`; closed by `close` or when dropped."""

    def __init__(self, fds: list[int]) -> None:
        self.fds = fds

    @classmethod
    def open(cls, paths: tuple[str, ...]) -> _KeptFiles | None:
        """Open ``paths`` if the budget has room for them all, else None."""
        global _fds_kept
        with _fd_lock:
            if _fds_kept + len(paths) > _FD_BUDGET:
                return None
            _fds_kept += len(paths)
        fds: list[int] = []
        try:
            for path in paths:
                try:
                    fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
                except FileNotFoundError:
                    fds.append(-1)
        except OSError:
            kept = cls(fds)
            kept.close(len(paths))
            return None
        return cls(fds)

    def read(self, index: int) -> bytes | None:
        """The bytes of file ``index``; None: absent. Raises OSError once the cgroup is gone."""
        fd = self.fds[index]
        if fd < 0:
            return None
        size = _KEPT_READ_SIZES[index]
        data = os.pread(fd, size, 0)
        if len(data) == size:  # longer than one read: the rest, at its offset
            chunks = [data]
            while len(chunk := os.pread(fd, size, size * len(chunks))):
                chunks.append(chunk)
                if len(chunk) < size:
                    break
            data = b"".join(chunks)
        return data

    def close(self, counted: int | None = None) -> None:
        global _fds_kept
        fds, self.fds = self.fds, []
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with _fd_lock:
            _fds_kept -= len(fds) if counted is None else counted

    def __del__(self) -> None:
        if self.fds:
            with contextlib.suppress(Exception):  # at interpreter exit the module may be gone
                self.close()


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
    #: The files kept open (`keep_open`), else None: opened per read.
    _kept: _KeptFiles | None = attrs.field(init=False, default=None, eq=False, repr=False)

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

    def keep_open(self) -> bool:
        """Keep the counter files open from now on and read them in place (`close` them):
        for a caller that reads them per command, from one thread (the event loop). False:
        the process's budget of kept files is spent (reads open the files, as before)."""
        if self._kept is None:
            object.__setattr__(self, "_kept", _KeptFiles.open(self._files))
        return self._kept is not None

    def close(self) -> None:
        """Close the files `keep_open` kept (idempotent); reads open them again."""
        kept = self._kept
        if kept is not None:
            object.__setattr__(self, "_kept", None)
            kept.close()

    def _text(self, index: int) -> bytes:
        """Counter file ``index``'s bytes (FileNotFoundError: it does not exist)."""
        kept = self._kept
        if kept is None:
            return _read_bytes(self._files[index])
        fd = kept.fds[index]
        if fd >= 0:  # `_KeptFiles.read`'s usual case, without a call more per file
            size = _KEPT_READ_SIZES[index]
            data = os.pread(fd, size, 0)
            if len(data) < size:
                return data
        text = kept.read(index)
        if text is None:
            raise FileNotFoundError(self._files[index])
        return text

    def read(self, *, limit: bool = True) -> Counters | None:
        """Read the counters now; None once the cgroup is gone or unreadable. ``limit``:
        read the memory limit too (else it is 0: a command's start needs none)."""
        kept = self._kept
        try:
            if kept is not None:
                counters = self._read_kept(kept.fds, limit)
                if counters is not None:
                    return counters
            return self._read_v2(limit) if self.v2 else self._read_v1(limit)
        except (OSError, ValueError):
            if self._kept is None:
                return None
        # Kept files of a cgroup that was removed (and made again, by a restart) answer
        # ENODEV: the paths, then, are the truth.
        self.close()
        try:
            return self._read_v2(limit) if self.v2 else self._read_v1(limit)
        except (OSError, ValueError):
            return None

    def cpu_ns(self) -> int | None:
        """Only the CPU time used so far (one small file: a sampler's is-it-idle check)."""
        try:
            if self.v2:
                return _stat_value(_read_bytes(self._files[0]), b"usage_usec") * 1000
            fd = os.open(self._files[0], os.O_RDONLY | os.O_CLOEXEC)
            try:
                return int(os.read(fd, 64))
            finally:
                os.close(fd)
        except (OSError, ValueError):
            return None

    def _read_kept(self, fds: list[int], limit: bool) -> Counters | None:
        """`read` from the kept files in one pass (`_kept_bytes`), parsed as `_read_v1` /
        `_read_v2` parse; None (read them the general way) where `_kept_bytes` gives up. A
        `_text` call per file and a generated ``__init__`` were a sixth of a command's two reads
        (callgrind: 88k -> 74k instructions for the pair; the system calls are the kernel's)."""
        texts = self._kept_bytes(fds, limit)
        return None if texts is None else (_parse_v2 if self.v2 else _parse_v1)(*texts)

    def read_raw(self, *, limit: bool = True) -> RawCounters | None:
        """The kept files' bytes now, not parsed (`RawCounters.parse` does that), for a
        caller that may never need the numbers: a command's usage, built on first read. The
        reads are `_read_kept`'s; None where it would give up or on an error: `read` then.
        Parsing both ends of a command was most of the Python of its usage (cold caches
        after an exec make each line dearer than a loop of them shows)."""
        kept = self._kept
        if kept is None:
            return None
        try:
            texts = self._kept_bytes(kept.fds, limit)
        except OSError:
            return None
        return None if texts is None else RawCounters(texts, self.v2)

    def _kept_bytes(self, fds: list[int], limit: bool) -> _Texts | None:
        """One pread per kept file, in `_read_v1`'s / `_read_v2`'s order; None when a file
        the reading needs is absent (closed meanwhile) or longer than its one read."""
        if len(fds) != 6:
            return None  # closed meanwhile: the general path opens the paths
        pread = os.pread
        f_cpu, f_used, f_stat, f_io, f_high, f_limit = fds
        v2 = self.v2
        if f_cpu < 0 or f_used < 0 or f_stat < 0 or f_io < 0 or (f_high < 0 and not v2):
            return None
        s_cpu, s_used, s_stat, s_io, s_high, s_limit = _KEPT_READ_SIZES
        used = pread(f_used, s_used, 0)
        stat = pread(f_stat, s_stat, 0)
        io = pread(f_io, s_io, 0)
        if v2:
            high = pread(f_high, s_high, 0) if f_high >= 0 else None
            cpu = pread(f_cpu, s_cpu, 0)
        else:
            cpu = pread(f_cpu, s_cpu, 0)
            high = pread(f_high, s_high, 0)
        lim = pread(f_limit, s_limit, 0) if limit and f_limit >= 0 else None
        if (len(used) >= s_used or len(stat) >= s_stat or len(io) >= s_io
                or len(cpu) >= s_cpu or (high is not None and len(high) >= s_high)
                or (lim is not None and len(lim) >= s_limit)):
            return None  # one of them reads on: the general path does
        return used, stat, io, cpu, high, lim

    def _read_v1(self, limit: bool) -> Counters:
        text = self._text
        used, stat, io = text(1), text(2), text(3)
        cpu, high = text(0), text(4)
        return _parse_v1(used, stat, io, cpu, high, self._limit_text() if limit else None)

    def _read_v2(self, limit: bool) -> Counters:
        text = self._text
        used, stat, io = text(1), text(2), text(3)
        try:
            high: bytes | None = text(4)
        except FileNotFoundError:
            high = None  # memory.peak came with Linux 5.19
        cpu = text(0)
        return _parse_v2(used, stat, io, cpu, high, self._limit_text() if limit else None)

    def _limit_text(self) -> bytes | None:
        """The memory limit file's bytes; None without one."""
        try:
            return self._text(5)
        except FileNotFoundError:
            return None



class RawCounters:
    """`HostCgroup.read_raw`'s bytes: the counters as the kernel wrote them, parsed on
    demand (`parse`) as `HostCgroup.read` parses them."""

    __slots__ = ("texts", "v2")

    def __init__(self, texts: _Texts, v2: bool) -> None:
        self.texts, self.v2 = texts, v2

    def parse(self) -> Counters | None:
        """The counters; None where `HostCgroup.read` would find them unreadable."""
        try:
            return (_parse_v2 if self.v2 else _parse_v1)(*self.texts)
        except ValueError:
            return None


#: At or above this a v1 ``memory.limit_in_bytes`` means no limit (it reads 2**63 - 4096).
_NO_LIMIT = 1 << 62


def _limit_value(text: bytes | None) -> int:
    """The memory limit; 0 for none ("max" on v2, near 2**63 on v1, no file or not read)."""
    if text is None:
        return 0
    text = text.strip()
    value = int(text) if text.isdigit() else 0
    return value if value < _NO_LIMIT else 0


def _parse_v1(used_text: bytes, stat: bytes, io: bytes, cpu: bytes, high: bytes | None,
              limit: bytes | None) -> Counters:
    """cgroup v1's counters from its files' bytes (``high``: always read on v1)."""
    used = int(used_text)
    inactive = _stat_value(stat, b"total_inactive_file")
    reads = writes = 0
    # Block I/O only counts on cgroup v1 when the kernel attributes it to the cgroup
    # (direct or synchronous I/O); page-cache writeback is charged to the root.
    if not io.startswith(b"Total "):  # else no device has any: "Total 0" alone
        for line in io.splitlines():
            parts = line.split()
            if len(parts) == 3:
                if parts[1] == b"Read":
                    reads += int(parts[2])
                elif parts[1] == b"Write":
                    writes += int(parts[2])
    return _counters(int(cpu), used - inactive if inactive < used else used, reads, writes,
                     0 if high is None else int(high), _limit_value(limit))


def _parse_v2(used_text: bytes, stat: bytes, io: bytes, cpu: bytes, high: bytes | None,
              limit: bytes | None) -> Counters:
    """cgroup v2's counters from its files' bytes (``high`` None: no memory.peak)."""
    used = int(used_text)
    inactive = _stat_value(stat, b"inactive_file")
    reads = writes = 0
    for line in io.splitlines():
        for field in line.split()[1:]:
            key, _, value = field.partition(b"=")
            if key == b"rbytes":
                reads += int(value)
            elif key == b"wbytes":
                writes += int(value)
    return _counters(_stat_value(cpu, b"usage_usec") * 1000,
                     used - inactive if inactive < used else used, reads, writes,
                     0 if high is None else int(high), _limit_value(limit))


def lazy_command_usage(window: ResourceUsage | None, before: Counters, after: Counters,
                       seconds: float, pending: Mapping[str, Any] | None = None,
                       ) -> ResourceUsage | LazyUsage:
    """`command_usage`, built on first read (`LazyUsage`) when it is built unchecked (the
    counters in a kernel counter's range: nothing in the build can fail), else now, so a
    value the checks refuse still fails where it did. The clock is read now, for the usage's
    timestamp; ``window`` and ``pending`` are the sampler's (a fresh dict, never changed)."""
    if _bounded(before, after) and seconds == seconds:
        return LazyUsage(command_usage, (window, before, after, seconds, pending,
                                         datetime.now(UTC)))
    return command_usage(window, before, after, seconds, pending)


def raw_command_usage(window: ResourceUsage | None, before: RawCounters, after: RawCounters,
                      seconds: float, pending: Mapping[str, Any] | None,
                      timestamp: datetime) -> ResourceUsage:
    """`command_usage` of counters read but not parsed (`HostCgroup.read_raw`), for
    `LazyUsage`: parsed here, on first read. Counters that do not parse give what the eager
    path gives without counters (the window, else no usage); counters out of a kernel
    counter's range are built checked, as `lazy_command_usage` builds them (the checks then
    fail here, where the usage is read, not where the command ended)."""
    start, end = before.parse(), after.parse()
    if start is None or end is None:
        if window is None:
            return _EMPTY
        return attrs.evolve(window, **pending) if pending else window
    return command_usage(window, start, end, seconds, pending, timestamp)


def command_usage(window: ResourceUsage | None, before: Counters, after: Counters,
                  seconds: float, pending: Mapping[str, Any] | None = None,
                  timestamp: datetime | None = None) -> ResourceUsage:
    """Sharpen a sampled window with exact counters read at a command's start and end.

    CPU time, block I/O and the memory readings come from the counters; network and the
    point-in-time fields the counters lack (processes, files) stay as the window has them.
    A high-water mark that rose during the command was reached during it, so it is the peak.
    ``memory_percent`` is ``memory_usage`` over the cgroup's limit (else over the denominator
    the sampler used, host memory), so the two always describe the same reading.
    ``pending``: changes to ``window`` not made yet (`StatsSampler.window`'s), made here in
    the same build. Built unchecked (`derived_usage`) when every counter is in a kernel
    counter's range, else checked field by field. ``timestamp``: the usage's (None: now).
    """
    base = window or _EMPTY
    changes = pending or {}
    cpu_ns = max(after.cpu_ns - before.cpu_ns, 0)
    peak = max(changes.get("memory_peak", base.memory_peak) if window else 0, before.memory,
               after.memory)
    if after.high_water > before.high_water:
        peak = max(peak, after.high_water)
    total = after.limit
    if not total and window and window.memory_usage and window.memory_percent:
        total = round(window.memory_usage * 100.0 / window.memory_percent)
    values = {
        **changes,
        "timestamp": datetime.now(UTC) if timestamp is None else timestamp,
        "cpu_time": timedelta(microseconds=cpu_ns // 1000),
        "cpu_usage": cpu_ns / 1e9 / seconds * 100.0 if seconds > 0 else 0.0,
        "memory_usage": after.memory,
        "memory_percent": after.memory / total * 100.0 if total > 0 else 0.0,
        "memory_peak": peak,
        "disk_reads": max(after.read_bytes - before.read_bytes, 0),
        "disk_writes": max(after.write_bytes - before.write_bytes, 0),
        "uptime": timedelta(seconds=max(seconds, 0.0)),
    }
    # Counters within [0, 2**64) (what the kernel's u64 counters hold) give values of the
    # right type and range by construction, and ``pending`` is derived from validated samples
    # (`window_over`): built unchecked. Anything else is checked, as before.
    if _bounded(before, after) and seconds == seconds:
        return derived_usage(base, values)
    return attrs.evolve(base, **values)


#: The base of a usage with no window: every field at its default (timestamp set per use).
_EMPTY = ResourceUsage()
_U64 = 1 << 64


def _bounded(before: Counters, after: Counters) -> bool:
    """Every counter of both is an int in [0, 2**64) (a kernel counter's range)."""
    values = (before.cpu_ns, before.memory, before.read_bytes, before.write_bytes,
              before.high_water, before.limit, after.cpu_ns, after.memory, after.read_bytes,
              after.write_bytes, after.high_water, after.limit)
    return set(map(type, values)) == _INT_ONLY and min(values) >= 0 and max(values) < _U64


_INT_ONLY = {int}
