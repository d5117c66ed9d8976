"""Finding and reading a container's cgroup from fake /proc and /sys/fs/cgroup trees."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs
import pytest

from sandbox._cgroup_usage import Counters, HostCgroup, command_usage
from sandbox._errors import ConfigError
from sandbox._models import ResourceUsage, derived_usage

CID = "ab" * 32


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def v1_tree(tmp: Path, cid: str = CID) -> tuple[Path, Path]:
    proc, root = tmp / "proc", tmp / "cgroup"
    controllers = ["cpu,cpuacct", "memory", "blkio", "pids", "name=systemd"]
    lines = [f"{i}:{c}:/docker/{cid}\n" for i, c in enumerate(controllers)]
    write(proc / "42" / "cgroup", "".join(lines) + f"0::/docker/{cid}\n")
    write(root / "cpu,cpuacct" / "docker" / cid / "cpuacct.usage", "1500000000\n")
    mem = root / "memory" / "docker" / cid
    write(mem / "memory.usage_in_bytes", "10000\n")
    write(mem / "memory.max_usage_in_bytes", "90000\n")
    write(mem / "memory.stat", "cache 4000\ntotal_inactive_file 3000\n")
    write(root / "blkio" / "docker" / cid / "blkio.throttle.io_service_bytes_recursive",
          "254:0 Read 100\n254:0 Write 200\n254:0 Sync 300\n254:0 Total 300\n"
          "8:0 Write 5\nTotal 305\n")
    return proc, root


def test_v1_found_and_read(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path)
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None and not cg.v2
    assert cg.read() == Counters(cpu_ns=1_500_000_000, memory=7000, read_bytes=100,
                                 write_bytes=205, high_water=90000)


def test_v2_found_and_read(tmp_path: Path) -> None:
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    write(proc / "7" / "cgroup", f"0::/system.slice/docker-{CID}.scope\n")
    write(root / "cgroup.controllers", "cpu io memory pids\n")
    d = root / "system.slice" / f"docker-{CID}.scope"
    write(d / "cpu.stat", "usage_usec 2500\nuser_usec 2000\n")
    write(d / "memory.current", "8000\n")
    write(d / "memory.stat", "anon 5000\ninactive_file 1000\n")
    write(d / "io.stat", "254:0 rbytes=10 wbytes=20 rios=1 wios=2\n8:0 rbytes=1 wbytes=2\n")
    cg = HostCgroup.find(7, CID, proc=proc, root=root)
    assert cg is not None and cg.v2
    # No memory.peak (Linux < 5.19): no high-water mark.
    assert cg.read() == Counters(cpu_ns=2_500_000, memory=7000, read_bytes=11, write_bytes=22)


def test_not_found_for_another_container_a_gone_pid_or_a_missing_tree(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path)
    assert HostCgroup.find(42, "cd" * 32, proc=proc, root=root) is None
    assert HostCgroup.find(43, CID, proc=proc, root=root) is None
    assert HostCgroup.find(0, CID, proc=proc, root=root) is None
    assert HostCgroup.find(42, CID, proc=proc, root=tmp_path / "elsewhere") is None


def test_read_after_the_cgroup_is_gone_is_none(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path)
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None
    (cg.cpu / "cpuacct.usage").unlink()
    assert cg.read() is None


def test_command_usage_takes_deltas_and_a_risen_high_water_mark() -> None:
    before = Counters(cpu_ns=1_000_000_000, memory=100, read_bytes=10, write_bytes=20,
                      high_water=500)
    after = Counters(cpu_ns=1_250_000_000, memory=300, read_bytes=15, write_bytes=60,
                     high_water=900)
    window = ResourceUsage(memory_peak=400, network_in=7, process_count=3)
    u = command_usage(window, before, after, 0.5)
    assert u.cpu_time == timedelta(milliseconds=250)
    assert u.cpu_usage == 50.0
    assert (u.memory_usage, u.memory_peak) == (300, 900)
    assert (u.disk_reads, u.disk_writes) == (5, 40)
    assert (u.network_in, u.process_count) == (7, 3)  # from the window
    assert u.uptime == timedelta(seconds=0.5) and u.timestamp is not None
    # A mark that did not rise says nothing about this command: the readings decide.
    flat = command_usage(None, before, attrs.evolve(after, high_water=500), 0.5)
    assert flat.memory_peak == 300


def test_memory_limit_read_from_the_cgroup(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path)
    mem = root / "memory" / "docker" / CID
    write(mem / "memory.limit_in_bytes", "70000\n")
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None
    reading = cg.read()
    assert reading is not None and reading.limit == 70000
    write(mem / "memory.limit_in_bytes", f"{2**63 - 4096}\n")  # v1's "no limit"
    reading = cg.read()
    assert reading is not None and reading.limit == 0
    proc2, root2 = tmp_path / "p2", tmp_path / "c2"
    write(proc2 / "7" / "cgroup", f"0::/docker/{CID}\n")
    write(root2 / "cgroup.controllers", "cpu io memory\n")
    d = root2 / "docker" / CID
    for name, text in (("cpu.stat", "usage_usec 1\n"), ("memory.current", "10\n"),
                       ("memory.stat", ""), ("io.stat", ""), ("memory.max", "max\n")):
        write(d / name, text)
    v2 = HostCgroup.find(7, CID, proc=proc2, root=root2)
    assert v2 is not None
    reading = v2.read()
    assert reading is not None and reading.limit == 0
    write(d / "memory.max", "4096\n")
    reading = v2.read()
    assert reading is not None and reading.limit == 4096


def test_command_memory_percent_is_of_the_same_reading_as_memory_usage() -> None:
    before = Counters(cpu_ns=0, memory=100, read_bytes=0, write_bytes=0, limit=1000)
    after = Counters(cpu_ns=0, memory=300, read_bytes=0, write_bytes=0, limit=1000)
    # The window's sample (taken while the command ran) saw other memory: not reported.
    window = ResourceUsage(memory_usage=900, memory_percent=90.0)
    u = command_usage(window, before, after, 0.5)
    assert (u.memory_usage, u.memory_percent) == (300, 30.0)
    # No cgroup limit: the sampler's denominator (900 / 90 % = 1000, host memory) is used.
    unlimited = attrs.evolve(after, limit=0)
    assert command_usage(window, before, unlimited, 0.5).memory_percent == 30.0
    assert command_usage(None, before, unlimited, 0.5).memory_percent == 0.0


def test_a_stat_value_is_read_from_its_own_line_only() -> None:
    """memory.stat v1 has both inactive_file and total_inactive_file: each is its own."""
    from sandbox._cgroup_usage import _stat_value

    text = b"cache 5\ninactive_file 7\ntotal_inactive_file 9\nlast 1"
    assert _stat_value(text, b"inactive_file") == 7
    assert _stat_value(text, b"total_inactive_file") == 9
    assert _stat_value(text, b"cache") == 5
    assert _stat_value(text, b"last") == 1
    assert _stat_value(text, b"file") == 0
    assert _stat_value(b"total_inactive_file 3\n", b"inactive_file") == 0


def test_kept_files_read_in_place_and_follow_changes(tmp_path: Path) -> None:
    from sandbox import _cgroup_usage

    proc, root = v1_tree(tmp_path)
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None
    counted = _cgroup_usage._fds_kept
    assert cg.keep_open()
    assert _cgroup_usage._fds_kept == counted + 6
    usage = root / "cpu,cpuacct" / "docker" / CID / "cpuacct.usage"
    assert (first := cg.read()) is not None and first.cpu_ns == 1_500_000_000
    # Rewritten in place (a cgroup file answers afresh at offset 0): the new value, not the
    # first one kept.
    with usage.open("r+") as f:
        f.write("2500000000\n")
    counters = cg.read()
    assert counters is not None and counters.cpu_ns == 2_500_000_000
    # No limit file (absent: kept as -1): no limit, as when read by path.
    assert counters.limit == 0
    cg.close()
    cg.close()
    assert _cgroup_usage._fds_kept == counted


def test_kept_files_respect_the_budget(tmp_path: Path, monkeypatch: Any) -> None:
    from sandbox import _cgroup_usage

    proc, root = v1_tree(tmp_path)
    monkeypatch.setattr(_cgroup_usage, "_FD_BUDGET", _cgroup_usage._fds_kept + 6)
    first = HostCgroup.find(42, CID, proc=proc, root=root)
    second = HostCgroup.find(42, CID, proc=proc, root=root)
    assert first is not None and second is not None
    assert first.keep_open()
    assert not second.keep_open()  # over the budget: reads open the files, and still work
    assert second.read() == first.read() is not None
    first.close()
    assert second.keep_open()
    second.close()


def test_kept_files_of_a_removed_cgroup_fall_back_to_the_paths(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path)
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None and cg.keep_open()
    kept = cg._kept
    assert kept is not None
    for fd in kept.fds:  # as the files of a removed cgroup answer ENODEV
        if fd >= 0:
            os.close(fd)
    kept.fds = [os.open(os.devnull, os.O_WRONLY) for _ in range(6)]
    counters = cg.read()
    assert counters is not None and counters.cpu_ns == 1_500_000_000
    assert cg._kept is None


def test_command_usage_makes_pending_window_changes_in_the_same_build() -> None:
    window = ResourceUsage(memory_usage=300, memory_percent=3.0, memory_peak=50,
                           network_in=70, process_count=4)
    pending = {"memory_peak": 900, "network_in": 7, "cpu_usage": 99.0,
               "cpu_time": timedelta(seconds=9)}
    before = Counters(cpu_ns=1_000_000, memory=100, read_bytes=0, write_bytes=0)
    after = Counters(cpu_ns=3_000_000, memory=200, read_bytes=5, write_bytes=6)
    once = command_usage(window, before, after, 0.5, pending=pending)
    twice = command_usage(attrs.evolve(window, **pending), before, after, 0.5)
    assert attrs.evolve(once, timestamp=twice.timestamp) == twice
    # The window's peak (pending) counts; the counters' CPU time wins over the window's.
    assert once.memory_peak == 900 and once.network_in == 7
    assert once.cpu_time == timedelta(microseconds=2000)


def _checked(u: ResourceUsage) -> ResourceUsage:
    """``u`` built again through ResourceUsage's converters and validators."""
    return ResourceUsage(**attrs.asdict(u, recurse=False))


def test_command_usage_built_unchecked_is_what_the_checked_build_gives() -> None:
    before = Counters(cpu_ns=1_000_000_000, memory=100, read_bytes=10, write_bytes=20,
                      high_water=500)
    after = Counters(cpu_ns=1_250_000_000, memory=300, read_bytes=15, write_bytes=60,
                     high_water=900, limit=2**63 - 1)
    window = ResourceUsage(memory_usage=50, memory_percent=5.0, network_in=7, process_count=3)
    pending = {"cpu_usage": 12.5, "cpu_time": timedelta(seconds=1), "memory_peak": 80,
               "network_in": 9, "network_out": 4, "uptime": timedelta(seconds=2)}
    for u in (command_usage(window, before, after, 0.5, pending=pending),
              command_usage(None, before, after, 0.0),
              command_usage(window, before, attrs.evolve(after, limit=0), 1e-9)):
        assert u == _checked(u)
        assert type(u.cpu_usage) is float and type(u.memory_percent) is float
    u = command_usage(window, before, after, 0.5, pending=pending)
    assert (u.network_in, u.network_out, u.process_count) == (9, 4, 3)


@pytest.mark.parametrize("bad", [
    {"memory": -1}, {"high_water": 2**64}, {"cpu_ns": -(2**70)}, {"memory": 2**80},
])
def test_command_usage_out_of_range_counters_are_checked(bad: dict[str, int]) -> None:
    """Counters outside a kernel counter's range take the checked build: an impossible
    value is refused there, never put into a result unchecked."""
    before = Counters(cpu_ns=0, memory=0, read_bytes=0, write_bytes=0)
    after = attrs.evolve(before, **bad)
    try:
        u = command_usage(None, before, after, 0.5)
    except (ConfigError, OverflowError):
        return
    assert u == _checked(u)


def test_derived_usage_refuses_unknown_fields() -> None:
    with pytest.raises(TypeError, match="cpu_percent"):
        derived_usage(ResourceUsage(), {"cpu_percent": 1.0})


def v2_tree(tmp: Path, *, peak: bool, limit: str | None) -> tuple[Path, Path, Path]:
    proc, root = tmp / "proc", tmp / "cgroup"
    write(proc / "7" / "cgroup", f"0::/system.slice/docker-{CID}.scope\n")
    write(root / "cgroup.controllers", "cpu io memory pids\n")
    d = root / "system.slice" / f"docker-{CID}.scope"
    write(d / "cpu.stat", "usage_usec 2500\nuser_usec 2000\n")
    write(d / "memory.current", "8000\n")
    write(d / "memory.stat", "anon 5000\ninactive_file 1000\n")
    write(d / "io.stat", "254:0 rbytes=10 wbytes=20 rios=1 wios=2\n8:0 rbytes=1 wbytes=2\n")
    if peak:
        write(d / "memory.peak", "12000\n")
    if limit is not None:
        write(d / "memory.max", limit)
    return proc, root, d


@pytest.mark.parametrize(("peak", "limit", "expected_limit"), [
    (True, "65536\n", 65536), (False, "max\n", 0), (True, None, 0)])
def test_kept_v2_files_read_in_one_pass_as_by_path(tmp_path: Path, peak: bool,
                                                   limit: str | None,
                                                   expected_limit: int) -> None:
    proc, root, _ = v2_tree(tmp_path, peak=peak, limit=limit)
    by_path = HostCgroup.find(7, CID, proc=proc, root=root)
    kept = HostCgroup.find(7, CID, proc=proc, root=root)
    assert by_path is not None and kept is not None and kept.keep_open()
    try:
        expected = Counters(cpu_ns=2_500_000, memory=7000, read_bytes=11, write_bytes=22,
                            high_water=12000 if peak else 0, limit=expected_limit)
        assert kept.read() == by_path.read() == expected
        assert kept.read(limit=False) == by_path.read(limit=False) == attrs.evolve(
            expected, limit=0)
    finally:
        kept.close()


def test_kept_v1_files_read_in_one_pass_as_by_path(tmp_path: Path) -> None:
    proc, root = v1_tree(tmp_path)
    write(root / "memory" / "docker" / CID / "memory.limit_in_bytes", "9223372036854771712\n")
    by_path = HostCgroup.find(42, CID, proc=proc, root=root)
    kept = HostCgroup.find(42, CID, proc=proc, root=root)
    assert by_path is not None and kept is not None and kept.keep_open()
    try:
        expected = Counters(cpu_ns=1_500_000_000, memory=7000, read_bytes=100,
                            write_bytes=205, high_water=90000)  # the v1 "no limit" value
        assert kept.read() == by_path.read() == expected
        limit = root / "memory" / "docker" / CID / "memory.limit_in_bytes"
        with limit.open("r+") as f:  # changed in place: the kept file reads it afresh
            f.write("4096\n" + " " * 30)
        assert kept.read() == attrs.evolve(expected, limit=4096)
    finally:
        kept.close()


def test_a_kept_file_longer_than_its_one_read_is_read_to_its_end(tmp_path: Path) -> None:
    """A memory.stat past the one-pass read's 8 KiB (a kernel with many more counters):
    the line after the first read's end still counts."""
    proc, root = v1_tree(tmp_path)
    padding = "".join(f"counter_{i} {i}\n" for i in range(900))
    assert len(padding) > 8192
    write(root / "memory" / "docker" / CID / "memory.stat",
          padding + "total_inactive_file 3000\n")
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None and cg.keep_open()
    try:
        counters = cg.read()
        assert counters is not None and counters.memory == 7000
    finally:
        cg.close()


def _v2_tree(tmp: Path) -> tuple[Path, Path]:
    proc, root = tmp / "proc", tmp / "cgroup"
    write(proc / "7" / "cgroup", f"0::/system.slice/docker-{CID}.scope\n")
    write(root / "cgroup.controllers", "cpu io memory pids\n")
    d = root / "system.slice" / f"docker-{CID}.scope"
    write(d / "cpu.stat", "usage_usec 2500\nuser_usec 2000\n")
    write(d / "memory.current", "8000\n")
    write(d / "memory.stat", "anon 100\ninactive_file 1000\n")
    write(d / "io.stat", "8:0 rbytes=10 wbytes=20 rios=1 wios=2\n")
    write(d / "memory.max", "1048576\n")
    return proc, root


@pytest.mark.parametrize("tree", [v1_tree, _v2_tree])
def test_raw_reads_parse_to_what_read_gives(tmp_path: Path, tree: Any) -> None:
    # A command's counters are read unparsed (`read_raw`) and parsed when its usage is
    # first read: the same numbers, limit or not, as `read` gives at the same moment.
    proc, root = tree(tmp_path)
    cg = HostCgroup.find(42 if tree is v1_tree else 7, CID, proc=proc, root=root)
    assert cg is not None
    assert cg.read_raw() is None  # nothing kept: the caller reads the paths (`read`)
    assert cg.keep_open()
    for limit in (False, True):
        raw = cg.read_raw(limit=limit)
        assert raw is not None and raw.parse() == cg.read(limit=limit) is not None
    cg.close()


def test_raw_usage_is_the_eager_usage_and_falls_back_as_the_eager_path(
        tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from sandbox._cgroup_usage import RawCounters, raw_command_usage

    proc, root = v1_tree(tmp_path)
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None and cg.keep_open()
    before = cg.read_raw(limit=False)
    write(root / "cpu,cpuacct" / "docker" / CID / "cpuacct.usage", "2500000000\n")
    after = cg.read_raw()
    assert before is not None and after is not None
    window = ResourceUsage(memory_usage=300, memory_percent=3.0, network_in=70)
    pending = {"network_in": 7, "memory_peak": 900}
    stamp = datetime.now(UTC)
    counted_before, counted_after = before.parse(), after.parse()
    assert counted_before is not None and counted_after is not None
    assert raw_command_usage(window, before, after, 0.5, pending, stamp) == command_usage(
        window, counted_before, counted_after, 0.5, pending, stamp)
    assert raw_command_usage(None, before, after, 0.5, None, stamp) == command_usage(
        None, counted_before, counted_after, 0.5, None, stamp)
    # Counters that do not parse: what the eager path gives without counters.
    broken = RawCounters((b"x\n", b"", b"Total 0\n", b"1\n", b"1\n", None), False)
    assert broken.parse() is None
    assert raw_command_usage(window, broken, after, 0.5, pending, stamp) == attrs.evolve(
        window, **pending)
    assert raw_command_usage(None, before, broken, 0.5, None, stamp) == ResourceUsage()
    cg.close()


class _Sampler:
    """What `ResultFinisher._usage` reads of a sampler, over plain records."""

    def __init__(self, records: list[tuple[float, ResourceUsage]]) -> None:
        self._records = records

    def window(self, start: float, end: float) -> Any:
        from sandbox.docker._usage import window_over

        return window_over(self._records, start, end)


@pytest.mark.parametrize("sample_since_start", [False, True])
def test_a_commands_usage_read_raw_is_the_eager_one(tmp_path: Path, monkeypatch: Any,
                                                      sample_since_start: bool) -> None:
    # The finisher reads a command's counters unparsed and builds its usage on first read
    # (no sample since its start: the usual case); the value is what parsing them at once
    # and building with the sampler's window gives.
    import types
    from datetime import UTC, datetime

    from sandbox._lazy_usage import LazyUsage
    from sandbox._models import ResourceLimits
    from sandbox.docker import _finish

    proc, root = v1_tree(tmp_path)
    cg = HostCgroup.find(42, CID, proc=proc, root=root)
    assert cg is not None and cg.keep_open()
    sample = ResourceUsage(memory_usage=300, memory_percent=3.0, network_in=70,
                           cpu_time=timedelta(seconds=2), timestamp=datetime.now(UTC))
    records = [(5.0, sample)] + ([(12.0, attrs.evolve(sample, network_in=90))]
                                 if sample_since_start else [])
    finisher = _finish.ResultFinisher(
        Any, CID, life=Any, resources=ResourceLimits(), gvisor=False,  # type: ignore[arg-type]
        sampler=lambda: _Sampler(records),  # type: ignore[arg-type,return-value]
        on_stop=lambda *_: None)
    before = cg.read_raw(limit=False)
    assert before is not None
    counted_before = before.parse()
    write(root / "cpu,cpuacct" / "docker" / CID / "cpuacct.usage", "2500000000\n")
    write(root / "memory" / "docker" / CID / "memory.usage_in_bytes", "50000\n")
    monkeypatch.setattr(_finish, "time", types.SimpleNamespace(monotonic=lambda: 13.5))
    usage = finisher._usage(cg, before, 10.0)
    assert isinstance(usage, LazyUsage) and not usage.built
    after = cg.read()
    window = _Sampler(records).window(10.0, 13.5)
    assert counted_before is not None and after is not None and window is not None
    value = usage.get()
    eager = command_usage(window[0], counted_before, after, 3.5, window[1], value.timestamp)
    assert value == eager
    assert value.cpu_time == timedelta(seconds=1) and value.memory_usage == 47000
    cg.close()
