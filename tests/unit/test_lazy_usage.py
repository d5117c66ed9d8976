"""A command's usage built on first read (`LazyUsage`): the value, and the result holding it,
must be what the eager build gave, whoever reads it first and however it is compared,
printed, serialised or copied."""

from __future__ import annotations

import copy
import pickle
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from sandbox import from_json, to_json
from sandbox._cgroup_usage import Counters, command_usage, lazy_command_usage
from sandbox._errors import ConfigError
from sandbox._lazy_usage import LazyUsage
from sandbox._models import CommandResult, ResourceUsage
from sandbox._output import OutputCapture
from sandbox._process_base import make_result

BEFORE = Counters(cpu_ns=1_000_000_000, memory=100, read_bytes=10, write_bytes=20,
                  high_water=500)
AFTER = Counters(cpu_ns=1_250_000_000, memory=300, read_bytes=15, write_bytes=60,
                 high_water=900, limit=4096)
WINDOW = ResourceUsage(memory_usage=50, memory_percent=5.0, network_in=7, process_count=3)
PENDING = {"cpu_usage": 12.5, "cpu_time": timedelta(seconds=1), "memory_peak": 80,
           "network_in": 9, "network_out": 4, "uptime": timedelta(seconds=2)}


def _lazy() -> LazyUsage:
    lazy = lazy_command_usage(WINDOW, BEFORE, AFTER, 0.5, dict(PENDING))
    assert isinstance(lazy, LazyUsage) and not lazy.built
    return lazy


def _eager_of(lazy: LazyUsage) -> ResourceUsage:
    """What the eager build gives from the inputs ``lazy`` kept (read before it is built)."""
    assert lazy._args is not None
    return command_usage(*lazy._args)


def _result(usage: ResourceUsage | LazyUsage) -> CommandResult:
    capture = OutputCapture(1 << 20)
    capture.feed("stdout", b"out\n")
    return make_result(capture, exit_code=0, signal="", errors=[], timed_out=False,
                       start_time=datetime.now(UTC), t0=time.monotonic(), process_id=7,
                       metadata={"exec_id": "x"}, resource_usage=usage)


def test_the_value_is_the_eager_build_of_the_same_reading() -> None:
    lazy = _lazy()
    eager = _eager_of(lazy)
    time.sleep(0.01)  # built later: the clock was read when the command ended, not now
    assert lazy.get() == eager and lazy.get().timestamp == eager.timestamp
    assert lazy.built and lazy._args is None  # the inputs are dropped once built
    assert lazy.get() is lazy.get()
    stamped_after = datetime.now(UTC)
    assert lazy.get().timestamp is not None and lazy.get().timestamp < stamped_after


def test_a_result_with_it_equals_hashes_and_prints_as_the_eager_one() -> None:
    lazy = _lazy()
    eager = _eager_of(lazy)
    result = _result(lazy)
    assert not lazy.built  # nothing read it yet: a result is made without building it
    twin = attrs.evolve(result, resource_usage=eager)
    assert type(result.resource_usage) is ResourceUsage
    assert result == twin and twin == result
    assert hash(result) == hash(twin)
    assert repr(result) == repr(twin) and "resource_usage=ResourceUsage(" in repr(result)
    assert result != attrs.evolve(twin, resource_usage=ResourceUsage())
    # Compared either way round, and against another unbuilt one.
    assert lazy == eager and eager == lazy
    other = _lazy()
    assert attrs.evolve(other.get(), timestamp=eager.timestamp) == lazy
    assert lazy != ResourceUsage() and ResourceUsage() != lazy


def test_a_result_with_it_serialises_as_the_eager_one() -> None:
    lazy = _lazy()
    eager = _eager_of(lazy)
    result = _result(lazy)
    twin = attrs.evolve(result, resource_usage=eager)
    assert to_json(result) == to_json(twin)
    back = from_json(to_json(result), CommandResult)
    assert back == result and type(back._resource_usage) is ResourceUsage
    assert '"resource_usage": {' in to_json(result) or '"resource_usage":{' in to_json(result)


@pytest.mark.parametrize("copier", [
    lambda r: pickle.loads(pickle.dumps(r)), copy.copy, copy.deepcopy,
], ids=["pickle", "copy", "deepcopy"])
def test_a_result_with_it_copies_and_pickles_as_the_eager_one(copier: Any) -> None:
    lazy = _lazy()
    result = _result(lazy)
    again = copier(result)
    assert again == result and again.resource_usage == result.resource_usage
    assert type(again.resource_usage) is ResourceUsage
    assert type(pickle.loads(pickle.dumps(_lazy()))) is ResourceUsage


def test_first_reads_at_once_from_threads_build_it_once() -> None:
    calls = []
    started = threading.Barrier(8)

    def build(*args: Any) -> ResourceUsage:
        calls.append(args)
        time.sleep(0.05)  # long enough for every thread to be inside `get` meanwhile
        return command_usage(*args)

    lazy = LazyUsage(build, (WINDOW, BEFORE, AFTER, 0.5, dict(PENDING), datetime.now(UTC)))
    seen: list[ResourceUsage] = []

    def read() -> None:
        started.wait()
        seen.append(lazy.get())

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(seen) == 8 and all(u is seen[0] for u in seen)


def test_out_of_range_counters_are_still_built_and_checked_at_once() -> None:
    """Only the unchecked build is deferred: nothing can fail later, on a read."""
    for refused in ({"cpu_ns": 1 << 70}, {"memory": 1 << 64}, {"memory": True}):
        with pytest.raises(ConfigError):  # refused now, as before, not on a later read
            lazy_command_usage(None, BEFORE, attrs.evolve(AFTER, **refused), 0.5)
    with pytest.raises(ValueError):  # a NaN duration: refused now, as before
        lazy_command_usage(None, BEFORE, AFTER, float("nan"))


def test_a_user_result_keeps_the_usage_given() -> None:
    usage = ResourceUsage(cpu_time=timedelta(seconds=2))
    result = CommandResult(exit_code=0, resource_usage=usage)
    assert result.resource_usage is usage
    assert attrs.evolve(result, error="x").resource_usage is usage
