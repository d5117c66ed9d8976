"""The lifecycle state machine that Sandbox owns and backends report to."""

from __future__ import annotations

import pytest

from sandbox import (
    ResourceLimitExceeded,
    SandboxAlreadyInitialized,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxStatus,
)
from sandbox._lifecycle import Lifecycle


def running() -> Lifecycle:
    life = Lifecycle()
    life.begin()
    life.advance(SandboxStatus.RUNNING)
    return life


def test_never_initialized_says_so() -> None:
    life = Lifecycle()
    with pytest.raises(SandboxNotRunning, match="never initialized"):
        life.require_running()


def test_begin_happens_once() -> None:
    life = Lifecycle()
    life.begin()
    with pytest.raises(SandboxAlreadyInitialized):
        life.begin()


def test_the_first_failure_is_the_news() -> None:
    life = running()
    assert life.fail("killed from outside", exit_code=137)
    assert not life.fail("the event watcher failed")
    assert (life.status, life.reason, life.exit_code) == (
        SandboxStatus.FAILED, "killed from outside", 137)
    with pytest.raises(SandboxNotRunning, match=r"failed \(killed from outside\)"):
        life.require_running()


def test_a_failure_during_cleanup_changes_nothing() -> None:
    life = running()
    life.advance(SandboxStatus.STOPPING)
    assert not life.fail("the container stopped")
    assert life.status is SandboxStatus.STOPPING and life.reason == ""


def test_gone_oom_and_lost_track_each_have_their_error() -> None:
    gone = running()
    gone.fail("the container was removed from outside", gone=True)
    assert isinstance(gone.not_running(), SandboxNotFound)
    oom = running()
    oom.fail("OOMKilled", oom_killed=True)
    assert isinstance(oom.not_running(), ResourceLimitExceeded)
    lost = running()
    cause = RuntimeError("watcher broke")
    lost.fail("the event watcher failed", error=cause)
    error = lost.not_running()
    assert error.cause is cause and "lost track" in (error.details or "")


def test_pause_from_outside_and_back() -> None:
    life = running()
    life.set_paused(True, "paused from outside")
    assert life.status is SandboxStatus.PAUSED and life.alive
    with pytest.raises(SandboxNotRunning, match="paused"):
        life.require_running()
    life.set_paused(False)
    assert life.status is SandboxStatus.RUNNING and life.reason == ""
    life.fail("stopped")
    life.set_paused(False)
    assert life.status is SandboxStatus.FAILED
