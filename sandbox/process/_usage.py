"""Resource usage of a process sandbox: its cgroup's counters, else its processes' /proc.

A sample is read on demand (microseconds: files, no engine), and in the background by the
event loop's one sampler (`_sampling`) for all sandboxes. With a cgroup, CPU time, memory
and block I/O come from it; the process and thread counts always come from the processes in
the sandbox's pid namespace. Samples are kept (the last 600) for ``usage_history``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

import attrs

from .. import _sampling
from .._cgroup_usage import Counters, HostCgroup, lazy_command_usage
from .._models import CommandResult, ResourceUsage
from ._cgroup import SandboxCgroup

log = logging.getLogger("sandbox.process")
HISTORY = 600
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_HOST_MEMORY = os.sysconf("SC_PHYS_PAGES") * _PAGE


class CommandAccounting:
    """What the sandbox's cgroup says about one command: its usage across it when the config
    set a cgroup limit (the whole sandbox's, as on Docker; the defaults alone add no reads,
    ~1 ms of a ~5 ms round trip here), and whether the OOM killer ended it."""

    def __init__(self, cgroup: SandboxCgroup | None, *, per_command: bool) -> None:
        self._cgroup = cgroup
        self._reader = cgroup.reader() if cgroup is not None and per_command else None
        self._ooms = 0  # the cgroup's OOM kills when the last SIGKILLed command ended

    def before(self) -> Counters | None:
        return self._reader.read(limit=False) if self._reader is not None else None

    def after(self, result: CommandResult, before: Counters | None) -> CommandResult:
        after = self._reader.read() if self._reader is not None else None
        if before is not None and after is not None:
            result = attrs.evolve(result, resource_usage=lazy_command_usage(
                None, before, after, result.duration.total_seconds()))
        if self._cgroup is not None and result.signal == "SIGKILL" and not result.timed_out:
            # The kernel counts an OOM kill before the victim dies: one counted since the
            # last SIGKILL looked at is this one's (as on Docker, the sandbox's events).
            ooms, self._ooms = self._ooms, self._cgroup.oom_kills()
            if self._ooms > ooms:
                result = attrs.evolve(result, oom_killed=True, error=" ".join(filter(None, (
                    "killed by the out-of-memory killer (memory limit reached)",
                    result.error))))
        return result


class _Source(Protocol):
    @property
    def init_pid(self) -> int: ...

    @property
    def cgroup(self) -> SandboxCgroup | None: ...


def pids_in(ns: str) -> list[int]:
    """Host pids of every process in the pid namespace ``ns`` (a scan of all of /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    found.append(int(name))
    return found


def _tree(root: int, limit: int = 4096) -> set[int]:
    """``root`` and its descendants, through the kernel's children lists."""
    found: set[int] = set()
    todo = [root]
    while todo and len(found) < limit:
        pid = todo.pop()
        if pid in found:
            continue
        found.add(pid)
        with contextlib.suppress(OSError, ValueError):
            for task in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                    todo.extend(int(c) for c in f.read().split())
    return found


def _pids_of(init: int, ns: str, cgroup: SandboxCgroup) -> list[int]:
    """The sandbox's processes without a scan of /proc: its pid 1 with what it started (the
    keep-alive, orphans), and the cgroup's members in its namespace (every command; not the
    zygote, which is in the cgroup but outside the namespace). Sandbox code can leave
    neither, so this is what `pids_in` finds, at a cost that does not grow with the host."""
    return [pid for pid in _tree(init) | cgroup.procs() if _in_ns(pid, ns)]


def _in_ns(pid: int, ns: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid") == ns
    except OSError:
        return False


#: An idle sandbox (its cgroup's CPU time unchanged) is read in full at least this often.
FULL_EVERY = 30.0


class Sampler:
    """Reads samples of one sandbox and keeps them; in the background through the loop's
    `_sampling.Hub` (`start`/`stop`), on demand through `sample`.

    A sandbox with a cgroup whose CPU time has not moved since the last full reading has not
    run anything: its sample is that reading restamped (one counter file read), refreshed in
    full every `FULL_EVERY` seconds.
    """

    def __init__(self, source: _Source) -> None:
        self._source = source
        self._kept = _sampling.History(HISTORY)
        self._last: tuple[float, int] | None = None  # (monotonic, cpu ns)
        self._full: tuple[float, int, ResourceUsage] | None = None  # (monotonic, cpu ns, it)
        self._t0 = time.monotonic()
        self._lock = threading.Lock()  # the hub reads in a worker thread, callers on the loop
        self._reader: HostCgroup | None = None
        self._interval = 1.0
        self._on_sample: Callable[[ResourceUsage], object] | None = None
        self._hub: _sampling.Hub | None = None

    @property
    def interval(self) -> float:
        return self._interval

    def start(self, interval: float,
              on_sample: Callable[[ResourceUsage], object] | None) -> None:
        """Sample every ``interval`` seconds in the background and hand each sample to
        ``on_sample`` (sync or async; one that raises is logged, and sampling goes on)."""
        self._interval, self._on_sample = interval, on_sample
        self._hub = _sampling.hub()
        self._hub.add(self)

    def stop(self) -> None:
        """End background sampling (idempotent)."""
        if self._hub is not None:
            self._hub.discard(self)
            self._hub = None

    def publish(self, reading: object) -> Awaitable[None] | None:
        if self._on_sample is None or reading is True:
            return None
        assert isinstance(reading, ResourceUsage)
        return _sampling.run_callback(self._on_sample, reading)

    def history(self) -> list[ResourceUsage]:
        with self._lock:
            return self._kept.samples()

    def read(self) -> object:
        """A background sample: kept, and made a `ResourceUsage` only for a callback."""
        with self._lock:
            if not self._idle():
                sample = self._take()
                self._kept.append(sample)
                return sample
            if self._on_sample is None:
                return True  # kept as a stamp (`_sampling.History`)
            last = self._kept.last()
            assert last is not None
            return last

    def sample(self) -> ResourceUsage:
        """Read a sample now and keep it."""
        with self._lock:
            if self._idle():
                sample = self._kept.last()
                assert sample is not None
                return sample
            sample = self._take()
            self._kept.append(sample)
            return sample

    def _idle(self) -> bool:
        """Whether the cgroup's CPU time stands where the last full reading left it (not
        too long ago): then nothing ran, and that reading restamped is kept for now."""
        now = time.monotonic()
        cgroup = self._source.cgroup
        if cgroup is not None and self._reader is None:
            self._reader = cgroup.reader()
        if self._reader is None or self._full is None:
            return False
        cpu = self._reader.cpu_ns()
        at, full_cpu, _ = self._full
        if cpu is None or cpu != full_cpu or now - at >= FULL_EVERY:
            return False
        self._last = (now, cpu)
        self._kept.append_idle(datetime.now(UTC), now - self._t0)
        return True

    def _take(self) -> ResourceUsage:
        now = time.monotonic()
        cgroup = self._source.cgroup
        init = self._source.init_pid
        ns = ""
        with contextlib.suppress(OSError):
            ns = os.readlink(f"/proc/{init}/ns/pid")
        if not ns:
            pids: list[int] = []
        elif cgroup is not None:
            pids = _pids_of(init, ns, cgroup)
        else:
            pids = pids_in(ns)
        threads = rss = cpu_ticks = files = 0
        for pid in pids:
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{pid}/stat", "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                cpu_ticks += int(fields[11]) + int(fields[12])
                threads += int(fields[17])
                rss += int(fields[21]) * _PAGE
            with contextlib.suppress(OSError):
                files += len(os.listdir(f"/proc/{pid}/fd"))
        cpu_ns = cpu_ticks * 1_000_000_000 // _TICK
        memory, peak, limit, reads, writes = rss, 0, 0, 0, 0
        counters = self._reader.read() if self._reader is not None else None
        if counters is not None:
            cpu_ns, memory, peak, limit = (counters.cpu_ns, counters.memory,
                                           counters.high_water, counters.limit)
            reads, writes = counters.read_bytes, counters.write_bytes
        usage = 0.0
        if self._last is not None and now > self._last[0]:
            usage = max(cpu_ns - self._last[1], 0) / 1e9 / (now - self._last[0]) * 100.0
        self._last = (now, cpu_ns)
        total = limit or _HOST_MEMORY
        sample = ResourceUsage(
            timestamp=datetime.now(UTC), cpu_usage=usage,
            cpu_time=timedelta(microseconds=cpu_ns // 1000), memory_usage=memory,
            memory_percent=memory / total * 100.0 if total else 0.0,
            memory_peak=max(peak, memory), disk_reads=reads, disk_writes=writes,
            process_count=len(pids), thread_count=threads, file_handles=files,
            uptime=timedelta(seconds=now - self._t0))
        if counters is not None:
            self._full = (now, counters.cpu_ns, sample)
        return sample
