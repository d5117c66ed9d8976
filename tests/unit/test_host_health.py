"""`docker._host_health`: a container's health read from the host (pidfds and the freezer),
on real host processes and a stand-in cgroup directory."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.docker._host import ContainerCgroup
from sandbox.docker._host_health import ENDED, PAUSED, HostHealth

LAST_PID = Path("/proc/sys/kernel/ns_last_pid")


def _cgroup(tmp_path: Path, *, v2: bool, state: str, events: str = "frozen 0") -> ContainerCgroup:
    freeze = tmp_path / ("cgroup.freeze" if v2 else "freezer.state")
    freeze.write_text(state + "\n")
    (tmp_path / "cgroup.events").write_text(f"populated 1\n{events}\n")
    return ContainerCgroup(procs=tmp_path / "cgroup.procs", freeze=freeze, v2=v2)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "1000"])
    yield proc
    proc.kill()
    proc.wait()


def _watch(proc: subprocess.Popen[bytes], cgroup: ContainerCgroup) -> HostHealth:
    return HostHealth("c0ffee", (os.pidfd_open(proc.pid),), cgroup)


@pytest.mark.parametrize(("v2", "state", "events", "expected"), [
    (False, "THAWED", "", ("", False)),
    (False, "FROZEN", "", (PAUSED, True)),
    (False, "FREEZING", "", (PAUSED, True)),  # a pause still settling is a pause
    (True, "0", "frozen 0", ("", False)),
    (True, "1", "frozen 1", (PAUSED, True)),
    (True, "1", "frozen 0", (PAUSED, True)),
])
def test_the_freezer_decides_paused(tmp_path: Path, sleeper: subprocess.Popen[bytes], v2: bool,
                                    state: str, events: str,
                                    expected: tuple[str, bool]) -> None:
    health = _watch(sleeper, _cgroup(tmp_path, v2=v2, state=state, events=events))
    try:
        assert health.check() == expected
    finally:
        health.close()


def test_an_ended_process_is_seen_at_once_even_as_a_zombie(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    health = _watch(sleeper, _cgroup(tmp_path, v2=False, state="THAWED"))
    try:
        assert health.check() == ("", False)
        sleeper.kill()
        os.waitid(os.P_PID, sleeper.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
        assert health.check() == (ENDED, False)
    finally:
        health.close()
    assert health.check() is None  # closed: the backend asks the engine


def test_an_unreadable_freezer_falls_back_to_the_engine(
        tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    cgroup = _cgroup(tmp_path, v2=False, state="THAWED")
    health = _watch(sleeper, cgroup)
    try:
        assert cgroup.freeze is not None
        cgroup.freeze.unlink()  # the cgroup went away, or cannot be read
        assert health.check() is None
    finally:
        health.close()


@pytest.mark.skipif(os.geteuid() != 0 or not LAST_PID.exists(),
                    reason="needs root to choose the next pid")
def test_a_reused_pid_does_not_fool_it(tmp_path: Path) -> None:
    """The container's init dies and another process gets its pid: a check by pid number
    (kill 0, /proc/<pid>) would find it alive; the pidfd names the dead one."""
    first = subprocess.Popen(["sleep", "1000"])
    health = _watch(first, _cgroup(tmp_path, v2=False, state="THAWED"))
    newcomer: subprocess.Popen[bytes] | None = None
    try:
        first.kill()
        first.wait()  # reaped: the pid is free
        for _ in range(200):  # other processes of the host may take it first: try again
            LAST_PID.write_text(str(first.pid - 1))
            newcomer = subprocess.Popen(["sleep", "1000"])
            if newcomer.pid == first.pid:
                break
            newcomer.kill()
            newcomer.wait()
            newcomer = None
        assert newcomer is not None, "could not get the same pid again"
        os.kill(first.pid, 0)  # the pid number is alive again...
        assert health.check() == (ENDED, False)  # ...but not the process watched
    finally:
        health.close()
        if newcomer is not None:
            newcomer.kill()
            newcomer.wait()


def test_open_refuses_what_is_not_a_local_container() -> None:
    assert "no host pid" in str(HostHealth.open("c0ffee", 0))
    # This process: alive, but its cgroup does not name the container.
    assert isinstance(HostHealth.open("c0ffee" * 10, os.getpid()), str)
    # A pid no process has here (a remote engine's).
    assert isinstance(HostHealth.open("c0ffee", 2**22 + 1), str)
