"""The sandbox's own background work: a failure there is logged, visible, and raised."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    NetworkConfig,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxNotRunning,
    SandboxStatus,
    SecurityPolicy,
)
from sandbox._lifecycle import Lifecycle
from sandbox._workspace import Workspace
from sandbox.docker import _background as docker_background
from sandbox.docker import _finish, _stats
from tests.conftest import LABEL, container_exists, docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


async def wait_for_status(sb: Sandbox, status: SandboxStatus) -> None:
    with anyio.fail_after(10):
        for _ in range(1000):
            if sb.status is status:
                return
            await anyio.sleep(0.02)
    raise AssertionError(f"still {sb.status}")


async def test_a_failing_event_watcher_fails_the_sandbox_visibly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken_watcher(*args: object, **kwargs: object) -> None:
        await anyio.sleep(0.2)
        raise RuntimeError("watcher broke")

    monkeypatch.setattr(docker_background, "watch_container", broken_watcher)
    caplog.set_level(logging.ERROR, logger="sandbox.lifecycle")
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
    async with sb:
        cid = sb.backend.container_id or ""
        await wait_for_status(sb, SandboxStatus.FAILED)
        with pytest.raises(SandboxNotRunning, match="the event watcher failed: RuntimeError: "
                                                    "watcher broke") as info:
            await sb.execute_command("true")
        assert isinstance(info.value.cause, RuntimeError)
        assert (await sb.get_info()).status_reason.startswith("the event watcher failed")
    assert any("the event watcher failed" in r.getMessage() and r.exc_info
               for r in caplog.records)
    assert sb.status is SandboxStatus.DESTROYED and not container_exists(cid)


async def test_a_failing_sampler_stops_the_other_background_work(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken_run(self: object) -> None:
        raise ValueError("sampler broke")

    monkeypatch.setattr(_stats.StatsSampler, "run", broken_run)
    caplog.set_level(logging.ERROR, logger="sandbox.lifecycle")
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX,
                                     stats_interval=timedelta(seconds=1))) as sb:
        await wait_for_status(sb, SandboxStatus.FAILED)
        with pytest.raises(SandboxNotRunning, match="the stats sampler failed"):
            await sb.read_file("/etc/hostname")
        background = sb.backend._background.task
        assert background is not None
        with anyio.fail_after(5):  # the watcher was cancelled with the sampler
            await background
    assert any("the stats sampler failed" in r.getMessage() for r in caplog.records)


async def test_cleanup_sends_its_delete_while_the_watcher_ends_and_waits_for_that_end(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """The event watcher is cancelled, not awaited, before the DELETE: the DELETE goes out at
    once. Cleanup still returns only after the watcher has ended, logs what its end raised,
    and does so also when the caller is cancelled meanwhile (the old cleanup awaited the
    watcher's end first: its DELETE came after the watcher's 0.3 s ending)."""
    from sandbox.docker import _sandbox as docker_sandbox

    events: list[str] = []
    sent = asyncio.Event()

    async def slow_to_end_watcher(*args: object, **kwargs: object) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                events.append("watcher cancelled")
                await anyio.sleep(0.3)
            events.append("watcher ended")
            raise RuntimeError("the watcher broke on its way out")

    real_remove = docker_sandbox.remove_container

    async def traced_remove(*args: object, **kwargs: object) -> list[str]:
        events.append("delete sent")
        sent.set()
        try:
            return await real_remove(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            events.append("delete answered")

    monkeypatch.setattr(docker_background, "watch_container", slow_to_end_watcher)
    monkeypatch.setattr(docker_sandbox, "remove_container", traced_remove)
    caplog.set_level(logging.ERROR, logger="sandbox.lifecycle")
    for cancel_the_caller in (False, True):
        events.clear()
        sent.clear()
        sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
        await sb.initialize()
        cid = sb.backend.container_id or ""
        await anyio.sleep(0.05)  # the watcher runs
        watcher = sb.backend._background.task  # type: ignore[attr-defined]
        assert isinstance(watcher, asyncio.Task) and not watcher.done()
        cleanup = asyncio.ensure_future(sb.cleanup())
        if cancel_the_caller:
            with anyio.fail_after(10):
                await sent.wait()
            cleanup.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cleanup
        else:
            await cleanup
        # Returned (or passed the cancellation on) only once everything ended.
        assert watcher.done() and "watcher ended" in events
        assert sb.status is SandboxStatus.DESTROYED and not container_exists(cid)
        assert sb.backend._background.host_health is None  # type: ignore[attr-defined]
        # The DELETE went out before the watcher had ended, not after.
        assert events.index("delete sent") < events.index("watcher ended"), events
        assert any("the event watcher failed" in r.getMessage() and r.exc_info and
                   "on its way out" in str(r.exc_info[1]) for r in caplog.records)
        caplog.clear()


def own_networks(sandbox_id: str) -> list[str]:
    return docker_cli("network", "ls", "-q", "--filter", f"label={LABEL}",
                      "--filter", f"label=io.sandbox.id={sandbox_id}").split()


@pytest.mark.parametrize("removal", ["works", "fails", "raises"])
async def test_a_failing_close_of_the_host_views_stops_no_removal_and_hides_no_error(
    monkeypatch: pytest.MonkeyPatch, removal: str,
) -> None:
    """Closing the container's cgroup files (the close callback the event watcher's end runs)
    fails: the container, its own network and the workspace are removed all the same, and
    the error says both what the removal left or raised (it leads) and what the close
    raised. Cleanup used to raise the close's bare error from the wait for the watcher's
    end, skipping the network and the workspace, and hiding the removal's errors."""
    from sandbox.docker import _sandbox as docker_sandbox

    real_close, real_remove = _finish.ResultFinisher.close, docker_sandbox.remove_container
    real_workspace_remove = Workspace.remove
    closed: list[str] = []
    workspaces: list[str] = []

    def broken_close(self: _finish.ResultFinisher) -> None:
        real_close(self)
        closed.append("closed")
        raise OSError("a fake close failure")

    async def leaky_remove(*args: object, **kwargs: object) -> list[str]:
        errors = await real_remove(*args, **kwargs)  # type: ignore[arg-type]
        if removal == "raises":
            raise RuntimeError("a fake removal bug")
        return [*errors, "a fake removal failure"]

    async def traced_workspace_remove(self: Workspace, *args: object) -> list[str]:
        workspaces.append("removed")
        return await real_workspace_remove(self, *args)  # type: ignore[arg-type]

    cfg = SandboxConfig(image=IMAGE_BUSYBOX, network=NetworkConfig(isolated=False),
                        security=SecurityPolicy(allow_networking=True, isolate_network=False))
    sb = Sandbox(cfg)
    await sb.initialize()
    try:
        cid = sb.backend.container_id or ""
        assert container_exists(cid) and len(own_networks(sb.id)) == 1
        monkeypatch.setattr(_finish.ResultFinisher, "close", broken_close)
        monkeypatch.setattr(Workspace, "remove", traced_workspace_remove)
        if removal != "works":
            monkeypatch.setattr(docker_sandbox, "remove_container", leaky_remove)
        if removal == "raises":  # it leads; what follows it is for the retry to do
            with pytest.raises(RuntimeError, match="a fake removal bug") as raised:
                await sb.cleanup()
            assert closed == ["closed"] and not container_exists(cid)
            assert any("a fake close failure" in note for note in raised.value.__notes__)
            assert isinstance(raised.value.__context__, OSError)
            return
        with pytest.raises(SandboxError) as caught:
            await sb.cleanup()
        err = caught.value
        assert closed == ["closed"] and workspaces == ["removed"]
        assert not container_exists(cid) and own_networks(sb.id) == []
        if removal == "fails":  # the removal's error leads, the close's is attached
            assert err.message == "cleanup could not remove everything"
            assert "a fake removal failure" in err.details and err.retryable
            assert any("a fake close failure" in note for note in err.__notes__)
            assert isinstance(err.__context__, OSError)
        else:
            assert "could not close the host's views" in err.message
            assert "a fake close failure" in err.details
            assert isinstance(err.cause, OSError)
    finally:
        monkeypatch.undo()
        await sb.cleanup()  # again: nothing is left to fail now
        assert sb.status is SandboxStatus.DESTROYED and own_networks(sb.id) == []


async def test_each_close_runs_when_another_fails_and_no_error_is_dropped() -> None:
    """The host view's close and the close callback both run; the first error is kept with
    the second noted on it (the first used to skip the callback: cgroup files left open)."""

    class BrokenHost:
        def close(self) -> None:
            raise OSError("the host view would not close")

    ran: list[str] = []

    def broken_then() -> None:
        ran.append("then")
        raise RuntimeError("the cgroup files would not close")

    background = docker_background.Background(
        "x", life=Lifecycle(), audit=lambda: None,  # type: ignore[arg-type,return-value]
        stop_commands=lambda: None)
    background.host_health = BrokenHost()  # type: ignore[assignment]
    async with background.ending(broken_then) as ended:
        pass
    assert ran == ["then"] and background.host_health is None
    assert isinstance(ended.error, OSError)
    assert any("the cgroup files would not close" in n for n in ended.error.__notes__)
    with pytest.raises(SandboxError) as caught:
        ended.check([])
    assert caught.value.cause is ended.error
