"""Engine JSON to typed values, on inspect answers recorded from Docker 20.10.

Recordings in tests/unit/data:
    inspect_exited   a busybox container whose main process ran ``exit 3``
    inspect_created  a container created and never started (Go's zero time for its times)
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from sandbox._wire_time import engine_time
from sandbox.docker._wire import ContainerState, container_state, host_port, size_rw

DATA = Path(__file__).parent / "data"


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / f"inspect_{name}.json").read_text())
    return data


def test_engine_time_keeps_microseconds_of_nanosecond_text() -> None:
    assert engine_time("2026-11-23T12:52:55.924196548Z") == \
        datetime(2026, 11, 23, 12, 52, 55, 924196, tzinfo=UTC)


def test_engine_time_offsets_and_whole_seconds() -> None:
    east = timezone(timedelta(hours=2))
    assert engine_time("2026-11-23T14:00:00.5+02:00") == \
        datetime(2026, 11, 23, 14, 0, 0, 500000, tzinfo=east)
    assert engine_time("2026-11-23T12:00:00Z") == datetime(2026, 11, 23, 12, tzinfo=UTC)
    # No offset at all: the engine's clock is UTC.
    assert engine_time("2026-11-23T12:00:00") == datetime(2026, 11, 23, 12, tzinfo=UTC)


def test_engine_time_unix_seconds_from_list_answers() -> None:
    assert engine_time(1_795_000_000) == datetime.fromtimestamp(1_795_000_000, UTC)


@pytest.mark.parametrize("value", [
    "0001-01-01T00:00:00Z", None, "", 0, -5, True, "yesterday", "2026-13-45T99:00:00Z", [], {},
])
def test_engine_time_is_none_for_zero_missing_or_garbage(value: Any) -> None:
    assert engine_time(value) is None


def test_state_of_an_exited_container() -> None:
    data = load("exited")
    state = container_state(data)
    assert state.status == "exited" and state.ended and not state.running
    assert state.exit_code == 3 and not state.oom_killed and not state.paused
    assert state.started_at == datetime(2026, 11, 23, 12, 52, 55, 924196, tzinfo=UTC)
    assert engine_time(data["Created"]) == datetime(2026, 11, 23, 12, 52, 55, 56341, tzinfo=UTC)


def test_state_of_a_never_started_container_has_no_times() -> None:
    state = container_state(load("created"))
    assert state.status == "created" and not state.ended
    assert state.started_at is None and state.finished_at is None


def test_state_without_or_with_broken_state_is_empty() -> None:
    assert container_state({}) == ContainerState()
    assert container_state({"State": None}) == ContainerState()
    broken = container_state({"State": {"Status": None, "ExitCode": "3", "Running": "yes"}})
    assert broken == ContainerState()


def test_host_port_reads_the_first_published_binding() -> None:
    data = {"NetworkSettings": {"Ports": {
        "8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "49153"},
                     {"HostIp": "::1", "HostPort": "49154"}],
        "53/udp": [{"HostIp": "127.0.0.1", "HostPort": "49155"}],
        "9000/tcp": None,  # exposed, not published
    }}}
    assert host_port(data, 8080) == 49153
    assert host_port(data, 53, "udp") == 49155
    assert host_port(data, 53) is None
    assert host_port(data, 9000) is None
    assert host_port({}, 8080) is None
    assert host_port({"NetworkSettings": {"Ports": {"1/tcp": [{"HostPort": "x"}]}}}, 1) is None


def test_size_rw() -> None:
    assert size_rw({"SizeRw": 4096}) == 4096
    assert size_rw({}) == 0 and size_rw({"SizeRw": None}) == 0
