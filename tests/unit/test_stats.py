"""Stats arithmetic on samples recorded from Docker 20.10 (cgroup v1, 2 CPUs, network none).

Recordings in tests/unit/data:
    stats_stream_first      first stream sample: empty precpu_stats (no CPU baseline)
    stats_stream_busy       third stream sample of a busy loop holding 64 MiB, 256 MiB limit
    stats_oneshot           one-shot of the same container, 3 s later
    stats_oneshot_unlimited idle busybox without a memory limit (limit = host RAM)
    stats_oneshot_cache     after writing and reading a 50 MB file (page cache)
    stats_oneshot_network   a container on a user bridge network, after a few pings
    stats_oneshot_stopped   a stopped container (zero time, null blkio lists)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from sandbox._models import ResourceUsage
from sandbox.docker._usage import (
    cpu_percent,
    memory_used,
    parse_proc_counts,
    sample_is_live,
    usage_from_stats,
    usage_over,
    window_over,
)

DATA = Path(__file__).parent / "data"
HOST_MEM = 25276502016


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"stats_{name}.json").read_text())
    return data


def test_busy_stream_sample_is_one_full_core() -> None:
    # (2042088035 - 1040375882) ns of CPU over (1106190 - 1104190) ms of 2 CPUs' system time.
    assert cpu_percent(load("stream_busy")) == pytest.approx(100.1712, abs=1e-3)


def test_first_stream_sample_and_one_shot_have_no_baseline() -> None:
    assert cpu_percent(load("stream_first")) == 0.0
    assert cpu_percent(load("oneshot")) == 0.0


def test_one_shot_measured_against_an_earlier_sample() -> None:
    # (5051138680 - 2042088035) / (1112210 - 1106190) ms x 2 CPUs.
    pct = cpu_percent(load("oneshot"), load("stream_busy"))
    assert pct == pytest.approx(99.9684, abs=1e-3)


def test_counter_going_backwards_is_not_negative() -> None:
    assert cpu_percent(load("stream_busy"), load("oneshot")) == 0.0


def test_memory_rule_subtracts_inactive_file_cache() -> None:
    cache = load("oneshot_cache")
    mem = cache["memory_stats"]
    assert mem["usage"] == 52158464 and mem["stats"]["total_inactive_file"] == 50003968
    assert memory_used(cache) == 52158464 - 50003968
    assert memory_used(load("stream_busy")) == 70729728  # no inactive file pages


def test_memory_rule_cgroup_v2_key_and_inactive_above_usage() -> None:
    v2 = {"memory_stats": {"usage": 1000, "stats": {"inactive_file": 300}}}
    assert memory_used(v2) == 700
    odd = {"memory_stats": {"usage": 100, "stats": {"total_inactive_file": 500}}}
    assert memory_used(odd) == 100
    assert memory_used({}) == 0


def test_usage_from_busy_sample() -> None:
    u = usage_from_stats(load("stream_busy"), uptime=timedelta(seconds=3), host_mem=HOST_MEM)
    assert u.timestamp == datetime(2026, 11, 22, 2, 17, 26, 840510, tzinfo=UTC)
    assert u.cpu_usage == pytest.approx(100.1712, abs=1e-3)
    assert u.cpu_time == timedelta(microseconds=2042088.035)
    assert u.memory_usage == 70729728
    assert u.memory_percent == pytest.approx(70729728 / 268435456 * 100)
    assert u.memory_peak == 70729728
    assert u.process_count == 2
    assert (u.disk_reads, u.disk_writes, u.network_in, u.network_out) == (0, 0, 0, 0)
    assert (u.thread_count, u.file_handles, u.disk_usage) == (0, 0, 0)
    assert u.uptime == timedelta(seconds=3)


def test_peak_never_drops_and_includes_max_usage() -> None:
    cache = load("oneshot_cache")
    # max_usage (cgroup high-water mark) is above the current use without cache.
    assert usage_from_stats(cache).memory_peak == 52707328
    assert usage_from_stats(cache, peak=10**9).memory_peak == 10**9
    no_max = {"memory_stats": {"usage": 5000, "limit": 10000}}
    assert usage_from_stats(no_max, peak=100).memory_peak == 5000


def test_unlimited_container_percent_is_of_host_memory() -> None:
    idle = load("oneshot_unlimited")
    assert idle["memory_stats"]["limit"] == HOST_MEM
    u = usage_from_stats(idle)
    assert u.memory_percent == pytest.approx(u.memory_usage / HOST_MEM * 100)
    assert u.process_count == 1


def test_missing_limit_falls_back_to_host_memory() -> None:
    sample = {"memory_stats": {"usage": 1000}}
    assert usage_from_stats(sample, host_mem=4000).memory_percent == 25.0
    assert usage_from_stats(sample).memory_percent == 0.0


def test_network_sums_interfaces_and_is_zero_without_networks() -> None:
    u = usage_from_stats(load("oneshot_network"))
    assert (u.network_in, u.network_out) == (1432, 336)
    two = {"networks": {"eth0": {"rx_bytes": 10, "tx_bytes": 1},
                        "eth1": {"rx_bytes": 5, "tx_bytes": 2}}}
    assert (usage_from_stats(two).network_in, usage_from_stats(two).network_out) == (15, 3)
    assert "networks" not in load("stream_busy")


def test_blkio_bytes_sum_devices_and_ignore_total() -> None:
    sample = {"blkio_stats": {"io_service_bytes_recursive": [
        {"major": 8, "minor": 0, "op": "Read", "value": 4096},
        {"major": 8, "minor": 0, "op": "Write", "value": 8192},
        {"major": 8, "minor": 0, "op": "Total", "value": 12288},
        {"major": 8, "minor": 16, "op": "Read", "value": 1},
        {"major": 8, "minor": 16, "op": "write", "value": 2},  # cgroup v2 spelling
    ]}}
    u = usage_from_stats(sample)
    assert (u.disk_reads, u.disk_writes) == (4097, 8194)


def test_stopped_container_sample() -> None:
    stopped = load("oneshot_stopped")
    assert not sample_is_live(stopped)
    assert sample_is_live(load("oneshot"))
    u = usage_from_stats(stopped)  # null blkio lists, empty pids_stats, no limit
    assert u.timestamp is None
    assert (u.memory_usage, u.memory_percent, u.process_count, u.cpu_usage) == (0, 0.0, 0, 0.0)


def test_proc_counts() -> None:
    assert parse_proc_counts(b"3 7 41\n") == (3, 7, 41)
    with pytest.raises(ValueError, match="processes threads fds"):
        parse_proc_counts("sh: oops")


def _rec(t: float, **kw: Any) -> tuple[float, ResourceUsage]:
    cpu = kw.pop("cpu", 0.0)
    return t, ResourceUsage(cpu_time=timedelta(seconds=cpu), **kw)


def test_window_uses_samples_around_it() -> None:
    records = [
        _rec(10.0, cpu=1.0, memory_usage=100, network_in=5, disk_writes=7),
        _rec(11.0, cpu=1.5, memory_usage=900, network_in=9),
        _rec(12.0, cpu=2.0, memory_usage=300, network_in=20, disk_writes=10),
        _rec(13.0, cpu=9.0, memory_usage=5000),  # after the window
    ]
    u = usage_over(records, 10.5, 11.8)
    assert u.cpu_time == timedelta(seconds=1.0)  # 2.0 at t=12 minus 1.0 at t=10
    assert u.cpu_usage == pytest.approx(50.0)  # 1 s of CPU over the 2 s sampled
    assert u.memory_peak == 900
    assert u.memory_usage == 300
    assert (u.network_in, u.disk_writes) == (15, 3)
    assert u.uptime == timedelta(seconds=1.3)


def test_window_without_closing_sample_uses_latest() -> None:
    records = [_rec(1.0, cpu=1.0), _rec(2.0, cpu=1.25)]
    u = usage_over(records, 1.5, 5.0)
    assert u.cpu_time == timedelta(seconds=0.25)
    assert u.uptime == timedelta(seconds=3.5)


def test_window_with_no_samples_and_reset_counters() -> None:
    u = usage_over([], 1.0, 2.0)
    assert u.cpu_time == timedelta(0) and u.uptime == timedelta(seconds=1)
    assert u.timestamp is not None
    reset = [_rec(1.0, cpu=5.0, network_out=100), _rec(2.0, cpu=1.0, network_out=3)]
    v = usage_over(reset, 1.0, 2.0)
    assert v.cpu_time == timedelta(0) and v.network_out == 0


def _linear_window(recs: list[tuple[float, ResourceUsage]], start: float,
                   end: float) -> tuple[float, float, int]:
    """The window as the scan over every record found it: (base stamp, closing stamp, peak)."""
    before = [r for r in recs if r[0] <= start]
    base = before[-1] if before else recs[0]
    after = [r for r in recs if r[0] >= end]
    fin = after[0] if after else recs[-1]
    peak = max(u.memory_usage for t, u in recs if base[0] <= t <= fin[0])
    return base[0], fin[0], peak


def test_window_by_bisection_matches_a_scan_of_every_record() -> None:
    import random

    rng = random.Random(29)
    for _ in range(300):
        # Repeated stamps too (two records in one clock tick).
        stamps = sorted(rng.choice(range(20)) / 2 for _ in range(rng.randint(1, 12)))
        recs = [_rec(t, cpu=i, memory_usage=rng.randint(0, 1000), network_in=i)
                for i, t in enumerate(stamps)]
        # Bounds on a stamp too, where bisecting left or right makes the difference.
        start = rng.choice((rng.uniform(-1, 11), rng.choice(stamps)))
        end = rng.choice((start + rng.uniform(0, 4), max(start, rng.choice(stamps))))
        t0, t1, peak = _linear_window(recs, start, end)
        u = usage_over(recs, start, end)
        summary = window_over(recs, start, end)
        assert summary is not None
        assert attrs.evolve(summary[0], **summary[1]) == u
        assert u.memory_peak == peak
        # The base: the last record at or before the start (else the first); the close: the
        # first at or after the end (else the last).
        base_i = max((i for i, r in enumerate(recs) if r[0] <= start), default=0)
        fin_i = min((i for i, r in enumerate(recs) if r[0] >= end), default=len(recs) - 1)
        assert (recs[base_i][0], recs[fin_i][0]) == (t0, t1)
        assert u.cpu_time == timedelta(seconds=max(fin_i - base_i, 0))
        assert u.network_in == max(fin_i - base_i, 0)
        assert u.uptime == timedelta(seconds=max(end - start, 0.0))
    assert window_over([], 1.0, 2.0) is None
