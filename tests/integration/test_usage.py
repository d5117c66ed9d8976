"""Resource usage through the Sandbox: the sampler's latest sample and per-command usage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import attrs
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

MiB = 1 << 20
GZIP_50M = "head -c 50M /dev/zero | gzip > /tmp/x"


async def test_latest_sample_is_fresh_and_answers_without_the_engine() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        first = await sb.get_resource_usage()
        assert first.timestamp is not None
        await anyio.sleep(2.5)
        latest = await sb.get_resource_usage()
        assert latest.timestamp is not None and latest.timestamp > first.timestamp
        age = (datetime.now(UTC) - latest.timestamp).total_seconds()
        assert -1 < age < 2.5, age
        assert latest.process_count >= 1 and latest.uptime.total_seconds() > 1
        assert sb.usage_history()[-1] == latest


async def test_per_command_usage_of_a_short_cpu_burst() -> None:
    """The issue's example, shorter than one sampling interval: CPU time is still exact."""
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        r = await sb.execute_command(GZIP_50M)
        assert r.success, r
        u = r.resource_usage
        assert u.cpu_time.total_seconds() > 0.05, u
        assert u.cpu_time.total_seconds() <= r.duration.total_seconds() * 2 + 0.05, u
        assert u.uptime.total_seconds() == pytest.approx(r.duration.total_seconds(), abs=0.1)
        assert u.memory_peak > 0 and u.memory_usage > 0 and u.timestamp is not None
        # An idle command next to it uses next to nothing.
        idle = (await sb.execute_command("sleep 0.3")).resource_usage
        assert idle.cpu_time.total_seconds() < u.cpu_time.total_seconds() / 4, (idle, u)


async def test_per_command_memory_percent_is_of_memory_usage() -> None:
    """Both describe the end reading: a sample taken while 48 MiB were held must not leak in."""
    limit = 128 * MiB
    cfg = SandboxConfig(image=IMAGE_PYTHON, resources=ResourceLimits(memory_limit=limit),
                        stats_interval=0.2)
    hold = "import time; b = bytearray(48 << 20); time.sleep(1.5)"
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command(["python3", "-c", hold])
        assert r.success, r
        u = r.resource_usage
        assert u.memory_peak > 48 * MiB, u  # the window saw the allocation
        assert u.memory_usage < 40 * MiB, u  # ... which was freed at the end
        assert u.memory_percent == pytest.approx(u.memory_usage / limit * 100), u


async def test_per_command_usage_without_a_sampler_and_for_streams() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, stats_interval=0)) as sb:
        r = await sb.execute_command(GZIP_50M)
        assert r.resource_usage.cpu_time.total_seconds() > 0.05, r.resource_usage
        async with sb.stream_command(GZIP_50M) as proc:
            streamed = await proc.wait()
        assert streamed.resource_usage.cpu_time.total_seconds() > 0.05, streamed.resource_usage


async def test_stream_command_reports_an_oom_kill() -> None:
    cfg = SandboxConfig(image=IMAGE_PYTHON, resources=ResourceLimits(memory_limit=64 * MiB))
    async with Sandbox(cfg) as sb:
        hog = Command(executable="python3", args=["-c", "b = bytearray(200 * 2**20)"])
        async with sb.stream_command(hog) as proc:
            r = await proc.wait()
        assert r.oom_killed and r.exit_code == 137 and "out-of-memory" in r.error, r
        assert r.resource_usage.memory_peak > 32 * MiB, r.resource_usage


async def test_a_local_container_is_sampled_without_an_engine_stats_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's stats stream cost dockerd and containerd ~0.2 % of a core per idle
    container; a local one is read from its cgroup on the host instead."""
    from sandbox.docker import DockerBackend
    from sandbox.docker._gateway import new_client

    client = new_client()
    streamed: list[str] = []
    original = client._query

    def query(*args: object, **kwargs: Any) -> Any:
        if str(args[0]).endswith("/stats") and kwargs.get("params", {}).get("stream") == "1":
            streamed.append(str(args[0]))
        return original(*args, **kwargs)

    monkeypatch.setattr(client, "_query", query)
    try:
        cfg = SandboxConfig(image=IMAGE_BUSYBOX)
        async with Sandbox(backend=DockerBackend(cfg, docker=client)) as sb:
            await sb.execute_command("head -c 3M /dev/zero > /tmp/x")
            await anyio.sleep(2.5)
            history = sb.usage_history()
            assert len(history) >= 2 and history[-1].memory_usage > 0, history
            assert history[-1].cpu_time.total_seconds() > 0, history
    finally:
        await client.close()
    assert streamed == []


async def test_per_command_usage_built_on_first_read_is_the_eager_one() -> None:
    """The usage is built when first read (`LazyUsage`) from the counters read when the
    command ran: the value is what building it at once gave, read however late."""
    from sandbox._cgroup_usage import command_usage
    from sandbox._lazy_usage import LazyUsage

    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        r = await sb.execute_command(GZIP_50M)
        lazy = r._resource_usage
        assert isinstance(lazy, LazyUsage) and not lazy.built
        assert lazy._args is not None
        eager = command_usage(*lazy._args)
        await sb.execute_command("head -c 20M /dev/zero | gzip > /tmp/y")  # the counters move on
        await anyio.sleep(0.3)
        u = r.resource_usage
        assert u == eager and r == attrs.evolve(r, resource_usage=eager)
        assert u.cpu_time.total_seconds() > 0.05, u
        assert u.timestamp is not None and r.end_time is not None
        assert u.timestamp <= r.end_time < u.timestamp + timedelta(seconds=0.5), (u, r.end_time)
