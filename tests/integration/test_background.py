"""The sandbox's own background work: a failure there is logged, visible, and raised."""

from __future__ import annotations

import logging
from datetime import timedelta

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SandboxNotRunning, SandboxStatus
from sandbox.docker import _background as docker_background
from sandbox.docker import _stats
from tests.conftest import container_exists

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
