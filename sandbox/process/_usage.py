"""Resource usage of a process sandbox: its cgroup's counters, else its processes' /proc.

A sample is read on demand (microseconds: files, no engine). With a cgroup, CPU time, memory
and block I/O come from it; the process and thread counts always come from the processes in
the sandbox's pid namespace. Samples are kept (the last 600) for ``usage_history``.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

import anyio
import attrs

from .._models import CommandResult, ResourceUsage
from .._cgroup_usage import Counters, command_usage
from ._cgroup import SandboxCgroup

log = logging.getLogger("sandbox.process")
HISTORY = 600
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class CommandAccounting:
    """What the sandbox's cgroup says about one command: its usage across it when the config
    set a cgroup limit (the whole sandbox's, as on Docker; the defaults alone add no reads,
    ~1 ms of a ~5 ms round trip here), and whether the OOM killer ended it."""

    def __init__(self, cgroup: SandboxCgroup | None, *, per_command: bool) -> None:
        self._cgroup = cgroup
        self._reader = cgroup.reader() if cgroup is not None and per_command else None
        self._ooms = 0  # the cgroup's OOM kills when the last SIGKILLed command ended

    def before(self) -> Counters | None:
        return self._reader.read() if self._reader is not None else None

    def after(self, result: CommandResult, before: Counters | None) -> CommandResult:
        after = self._reader.read() if self._reader is not None else None
        if before is not None and after is not None:
            result = attrs.evolve(result, resource_usage=command_usage(
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
    def cgroup(self) -> object: ...


def pids_in(ns: str) -> list[int]:
    """Host pids of every process in the pid namespace ``ns``."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    found.append(int(name))
    return found


class Sampler:
    """Reads samples of one sandbox and keeps them."""

    def __init__(self, source: _Source) -> None:
        self._source = source
        self._kept: collections.deque[ResourceUsage] = collections.deque(maxlen=HISTORY)
        self._last: tuple[float, int] | None = None  # (monotonic, cpu ns)
        self._t0 = time.monotonic()

    def history(self) -> list[ResourceUsage]:
        return list(self._kept)

    def sample(self) -> ResourceUsage:
        init = self._source.init_pid
        ns = ""
        with contextlib.suppress(OSError):
            ns = os.readlink(f"/proc/{init}/ns/pid")
        pids = pids_in(ns) if ns else []
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
        cgroup = self._source.cgroup
        if cgroup is not None:
            counters = cgroup.reader().read()  # type: ignore[attr-defined]
            if counters is not None:
                cpu_ns, memory, peak, limit = (counters.cpu_ns, counters.memory,
                                               counters.high_water, counters.limit)
                reads, writes = counters.read_bytes, counters.write_bytes
        now = time.monotonic()
        usage = 0.0
        if self._last is not None and now > self._last[0]:
            usage = max(cpu_ns - self._last[1], 0) / 1e9 / (now - self._last[0]) * 100.0
        self._last = (now, cpu_ns)
        total = limit or os.sysconf("SC_PHYS_PAGES") * _PAGE
        sample = ResourceUsage(
            timestamp=datetime.now(UTC), cpu_usage=usage,
            cpu_time=timedelta(microseconds=cpu_ns // 1000), memory_usage=memory,
            memory_percent=memory / total * 100.0 if total else 0.0,
            memory_peak=max(peak, memory), disk_reads=reads, disk_writes=writes,
            process_count=len(pids), thread_count=threads, file_handles=files,
            uptime=timedelta(seconds=now - self._t0))
        self._kept.append(sample)
        return sample


async def sample_every(sampler: Sampler, interval: float,
                       on_sample: Callable[[ResourceUsage], object] | None) -> None:
    """Take a sample every ``interval`` seconds and hand it to ``on_sample`` (sync or async;
    one that raises is logged, and sampling goes on), as the Docker backend's sampler does."""
    while True:
        await anyio.sleep(interval)
        usage = await anyio.to_thread.run_sync(sampler.sample)
        if on_sample is None:
            continue
        try:
            result = on_sample(usage)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("the on_sample callback failed; sampling goes on")
