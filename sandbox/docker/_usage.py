"""Stats arithmetic: one engine stats sample, or a window of them, as a `ResourceUsage`.

Pure functions on the engine's stats JSON (no engine calls); the background task that feeds
them is `_stats.StatsSampler`. What the samples hold and lack (zero-time samples of a stopped
container, no ``networks`` without a network, ``pids_stats`` counting threads, the memory
rule) is in docs/engine-notes.md, section "Stats".
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import attrs

from .._models import ResourceUsage
from .._wire_time import engine_time

__all__ = [
    "PROC_SCRIPT",
    "cpu_percent",
    "memory_used",
    "parse_proc_counts",
    "read_time",
    "sample_is_live",
    "usage_from_stats",
    "usage_over",
    "window_over",
]

#: POSIX sh (busybox ash, dash) printing "processes threads fds" for every process in the
#: sandbox except itself. It forks nothing (no pipes, no command substitution), so the only
#: process it adds is its own shell, which it skips. Only fds the running user may see count.
PROC_SCRIPT: Final = (
    'self=$$; p=0; t=0; f=0\n'
    'for d in /proc/[0-9]*; do\n'
    '  [ "${d#/proc/}" = "$self" ] && continue\n'
    '  n=0\n'
    '  { while read -r k v _; do\n'
    '      if [ "$k" = "Threads:" ]; then n=$v; break; fi\n'
    '    done < "$d/status"; } 2>/dev/null || continue\n'
    '  p=$((p + 1)); t=$((t + n))\n'
    '  set -- "$d"/fd/*\n'
    '  if [ -e "$1" ] || [ -L "$1" ]; then f=$((f + $#)); fi\n'
    'done\n'
    'echo "$p $t $f"\n'
)


def _section(data: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """Return a nested mapping, treating a missing or null section as empty."""
    if not data:
        return {}
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def read_time(stats: Mapping[str, Any]) -> datetime | None:
    """When the engine took the sample; None for a stopped container's zero-time sample."""
    return engine_time(stats.get("read"))


def sample_is_live(stats: Mapping[str, Any]) -> bool:
    """Tell a real sample from the zero-time placeholders sent for a stopped container."""
    return read_time(stats) is not None


def cpu_percent(cur: Mapping[str, Any], prev: Mapping[str, Any] | None = None) -> float:
    """CPU use between two samples in percent of one core, as ``docker stats`` computes it.

    Without ``prev`` the sample's own ``precpu_stats`` is the baseline (stream samples carry
    the previous tick there); with no baseline at all the answer is 0.
    """
    cc = _section(cur, "cpu_stats")
    pc = _section(prev, "cpu_stats") if prev is not None else _section(cur, "precpu_stats")
    d_sys = _int(cc.get("system_cpu_usage")) - _int(pc.get("system_cpu_usage"))
    if not _int(pc.get("system_cpu_usage")) or d_sys <= 0:
        return 0.0
    d_cpu = _int(_section(cc, "cpu_usage").get("total_usage")) - _int(
        _section(pc, "cpu_usage").get("total_usage")
    )
    ncpu = _int(cc.get("online_cpus")) or len(_section(cc, "cpu_usage").get("percpu_usage") or ())
    # system_cpu_usage advances by wall time x online CPUs, hence the factor.
    return max(d_cpu, 0) / d_sys * (ncpu or 1) * 100.0


def memory_used(stats: Mapping[str, Any]) -> int:
    """Memory in use without reclaimable page cache, the rule of the docker CLI since 20.10."""
    mem = _section(stats, "memory_stats")
    usage = _int(mem.get("usage"))
    detail = _section(mem, "stats")
    # cgroup v1 reports total_inactive_file (hierarchical), cgroup v2 inactive_file.
    inactive = _int(detail.get("total_inactive_file", detail.get("inactive_file")))
    return usage - inactive if inactive < usage else usage


def _blkio_bytes(stats: Mapping[str, Any], op: str) -> int:
    entries = _section(stats, "blkio_stats").get("io_service_bytes_recursive") or ()
    # v1 spells the op "Read"/"Write", v2 "read"/"write"; "Total" would count both.
    return sum(
        _int(e.get("value")) for e in entries
        if isinstance(e, Mapping) and str(e.get("op", "")).lower() == op
    )


def _network_bytes(stats: Mapping[str, Any], key: str) -> int:
    networks = stats.get("networks")
    if not isinstance(networks, Mapping):
        return 0
    return sum(_int(n.get(key)) for n in networks.values() if isinstance(n, Mapping))


def usage_from_stats(
    cur: Mapping[str, Any],
    prev: Mapping[str, Any] | None = None,
    *,
    uptime: timedelta = timedelta(0),
    peak: int = 0,
    host_mem: int = 0,
) -> ResourceUsage:
    """Turn one engine stats sample into a `ResourceUsage`.

    Args:
        cur: The sample, as the engine's JSON.
        prev: An earlier sample to measure CPU against; None uses ``cur``'s ``precpu_stats``.
        uptime: Time since the sandbox started.
        peak: Highest memory use seen so far; the result's ``memory_peak`` is never lower.
        host_mem: Host memory, the denominator when the sample carries no limit.

    Fields the sample cannot tell (threads, file handles, disk usage) stay 0.
    """
    mem = _section(cur, "memory_stats")
    used = memory_used(cur)
    limit = _int(mem.get("limit")) or host_mem
    # max_usage is the cgroup's high-water mark (page cache included); cgroup v2 has none.
    peak = max(peak, used, _int(mem.get("max_usage")))
    total_ns = _int(_section(_section(cur, "cpu_stats"), "cpu_usage").get("total_usage"))
    return ResourceUsage(
        timestamp=read_time(cur),
        cpu_usage=cpu_percent(cur, prev),
        cpu_time=timedelta(microseconds=total_ns / 1000),
        memory_usage=used,
        memory_percent=used / limit * 100.0 if limit > 0 else 0.0,
        memory_peak=peak,
        disk_reads=_blkio_bytes(cur, "read"),
        disk_writes=_blkio_bytes(cur, "write"),
        network_in=_network_bytes(cur, "rx_bytes"),
        network_out=_network_bytes(cur, "tx_bytes"),
        process_count=_int(_section(cur, "pids_stats").get("current")),
        uptime=max(uptime, timedelta(0)),
    )


def parse_proc_counts(output: bytes | str) -> tuple[int, int, int]:
    """Parse `PROC_SCRIPT`'s output into (processes, threads, file handles)."""
    text = output.decode() if isinstance(output, bytes) else output
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        raise ValueError(f"expected 'processes threads fds', got {text.strip()[:80]!r}")
    return int(fields[0]), int(fields[1]), int(fields[2])


def _delta(a: int, b: int) -> int:
    """A counter's growth; a reset counter (engine restart) counts as no growth."""
    return b - a if b >= a else 0


def usage_over(records: Iterable[tuple[float, ResourceUsage]], start: float,
               end: float) -> ResourceUsage:
    """Summarise (monotonic stamp, sample) pairs over ``[start, end]``; see `usage_between`."""
    summary = window_over(sorted(records, key=_stamp), start, end)
    if summary is None:
        return ResourceUsage(timestamp=datetime.now(UTC),
                             uptime=timedelta(seconds=max(end - start, 0.0)))
    last, changes = summary
    return attrs.evolve(last, **changes)


_NO_TIME = timedelta(0)


def _stamp(record: tuple[float, ResourceUsage]) -> float:
    return record[0]


def quiet_last(recs: Sequence[tuple[float, ResourceUsage]], start: float,
               ) -> ResourceUsage | None:
    """The last sample when none was taken since ``start`` (`window_over`'s usual case:
    its window is that sample with `quiet_changes`), else None."""
    if not recs:
        return None
    last_at, last = recs[-1]
    if last_at <= start and (len(recs) == 1 or recs[-2][0] < last_at):
        return last
    return None


def quiet_changes(last: ResourceUsage, seconds: float) -> dict[str, Any]:
    """The changes `window_over` makes to ``last``, the only sample of a window of
    ``seconds`` in which no sample was taken: nothing counted, the peak is its reading."""
    return {
        "cpu_usage": 0.0, "cpu_time": _NO_TIME, "memory_peak": last.memory_usage,
        "disk_reads": 0, "disk_writes": 0, "network_in": 0, "network_out": 0,
        "uptime": timedelta(seconds=max(seconds, 0.0)),
    }


def window_over(recs: Sequence[tuple[float, ResourceUsage]], start: float,
                end: float) -> tuple[ResourceUsage, dict[str, Any]] | None:
    """`usage_over` of records already in stamp order, found by bisection (a command reads it
    from up to 600 records), as the closing sample and the changes to make to it (made by the
    caller in one build, with its own); None without records."""
    if not recs:
        return None
    last = quiet_last(recs, start)
    if last is not None:
        # No sample since the command started (a short command, samples a second apart):
        # the window is the last sample alone, what the bisections below find, without them.
        return last, quiet_changes(last, end - start)
    n = len(recs)
    i = bisect.bisect_right(recs, start, key=_stamp)
    t0, u0 = recs[i - 1] if i else recs[0]
    j = bisect.bisect_left(recs, end, key=_stamp)
    t1, u1 = recs[j] if j < n else recs[-1]
    lo = bisect.bisect_left(recs, t0, key=_stamp)
    hi = bisect.bisect_right(recs, t1, key=_stamp)
    cpu = max(u1.cpu_time - u0.cpu_time, timedelta(0))
    span = t1 - t0
    return u1, {
        # A rate over the sampled window, which covers the command (when samples bracket it).
        "cpu_usage": cpu.total_seconds() / span * 100.0 if span > 0 else 0.0,
        "cpu_time": cpu,
        "memory_peak": max(r[1].memory_usage for r in itertools.islice(recs, lo, hi)),
        "disk_reads": _delta(u0.disk_reads, u1.disk_reads),
        "disk_writes": _delta(u0.disk_writes, u1.disk_writes),
        "network_in": _delta(u0.network_in, u1.network_in),
        "network_out": _delta(u0.network_out, u1.network_out),
        "uptime": timedelta(seconds=max(end - start, 0.0)),
    }
