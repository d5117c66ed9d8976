"""Faults injected from outside: each ends in a clear error or result, and a clean state."""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiodocker
import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    Command,
    FileOperationFailed,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxStatus,
    SecurityPolicy,
)
from sandbox.docker import DockerBackend
from sandbox.docker._gateway import new_client
from tests.conftest import container_exists, docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


async def wait_until(condition: Callable[[], bool], within: float) -> None:
    with anyio.fail_after(within):
        for _ in itertools.count():
            if condition():
                return
            await anyio.sleep(0.05)


def busybox(**kw: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, **kw))  # type: ignore[arg-type]


async def test_container_killed_mid_command() -> None:
    async with busybox() as sb:
        cid = sb.backend.container_id or ""

        async def kill() -> None:
            await anyio.sleep(0.5)
            docker_cli("kill", cid)

        t0 = time.monotonic()
        outcome: object
        async with anyio.create_task_group() as tg:
            tg.start_soon(kill)
            try:
                outcome = await sb.execute_command("sleep 100")
            except SandboxError as exc:
                outcome = exc
        assert time.monotonic() - t0 < 5, outcome
        if not isinstance(outcome, SandboxError):
            assert not outcome.success and outcome.exit_code != 0, outcome  # type: ignore[attr-defined]
        await wait_until(lambda: sb.status is SandboxStatus.FAILED, 3)
        with pytest.raises(SandboxNotRunning, match=r"SIGKILL|killed|exited") as ei:
            await sb.execute_command("true")
        assert "failed" in str(ei.value)
        info = await sb.get_info()
        assert info.status is SandboxStatus.FAILED and info.status_reason
    assert not container_exists(cid)


async def test_container_removed_from_outside_raises_sandbox_not_found() -> None:
    async with busybox() as sb:
        cid = sb.backend.container_id or ""
        docker_cli("rm", "-f", cid)
        await wait_until(lambda: sb.status is SandboxStatus.FAILED, 5)
        # Also a SandboxNotRunning, and a LookupError for callers that catch builtins.
        with pytest.raises(SandboxNotFound, match=r"gone.*removed from outside"):
            await sb.execute_command("true")
        with pytest.raises(LookupError):
            await sb.read_file("/etc/hostname")
    assert not container_exists(cid)


async def test_pause_fails_commands_clearly_and_unpause_recovers() -> None:
    # Freezing a container while runc is still setting up an exec in it deadlocks runc on this
    # engine (cgroup v1): unpause, rm and stats of that container hang, and dockerd's stats for
    # every container stall with it. So: no sampler (its periodic exec), and pause only once the
    # command is seen running.
    async with busybox(stats_interval=0) as sb:
        cid = sb.backend.container_id or ""
        started = anyio.Event()

        async def pause() -> None:
            await started.wait()
            await anyio.to_thread.run_sync(docker_cli, "pause", cid)

        # A command running when the container freezes ends at its timeout, not never.
        async with anyio.create_task_group() as tg:
            tg.start_soon(pause)
            t0 = time.monotonic()
            r = await sb.execute_command(Command.shell("echo started; sleep 100", timeout=3),
                                         on_stdout=lambda _: started.set())
            assert time.monotonic() - t0 < 15
            assert r.timed_out and not r.success and "timed out" in r.error, r
        # New work fails at once, saying why.
        await wait_until(lambda: sb.status is SandboxStatus.PAUSED, 3)
        t0 = time.monotonic()
        with pytest.raises(SandboxNotRunning, match="paused"):
            await sb.execute_command("true")
        with pytest.raises(SandboxNotRunning, match="paused"):
            await sb.read_file("/etc/hostname")
        assert time.monotonic() - t0 < 3
        await anyio.to_thread.run_sync(docker_cli, "unpause", cid)
        await wait_until(lambda: sb.status is SandboxStatus.RUNNING, 3)
        assert (await sb.execute_command("echo back")).stdout == "back\n"
        # Removing a paused container would hang (cgroup v1); cleanup thaws it first.
        await anyio.to_thread.run_sync(docker_cli, "pause", cid)
        await wait_until(lambda: sb.status is SandboxStatus.PAUSED, 3)
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 10
    assert not container_exists(cid)


async def test_full_tmpfs_shows_enospc() -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX,
                        security=SecurityPolicy(tmpfs_paths=("/scratch:size=1m",)))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command("dd if=/dev/zero of=/scratch/fill bs=1k count=2000")
        assert not r.success and "No space left on device" in r.stderr
        with pytest.raises(FileOperationFailed, match="No space left") as ei:
            await sb.write_file("/scratch/more", b"x" * 2_000_000)
        assert ei.value.path == "/scratch/more"
        await sb.execute_command("rm /scratch/fill")
        await sb.write_file("/scratch/small", "ok")
        assert await sb.read_file("/scratch/small") == b"ok"


class BreakableStats:
    """Wraps the client's ``_query``: stats streams can be cut, and later ones refused."""

    def __init__(self, original: Any) -> None:
        self.original = original
        self.responses: list[Any] = []
        self.refused = 0
        self.refuse = False

    @contextlib.asynccontextmanager
    async def __call__(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        if not str(args[0]).endswith("/stats") or kwargs.get("params", {}).get("stream") != "1":
            async with self.original(*args, **kwargs) as resp:
                yield resp
            return
        if self.refuse:
            self.refused += 1
            raise aiodocker.DockerError(500, {"message": "stats refused by the test"})
        async with self.original(*args, **kwargs) as resp:
            self.responses.append(resp)
            yield resp

    def cut(self) -> None:
        for resp in self.responses:
            if resp.connection is not None:
                resp.connection.transport.abort()


async def test_stats_stream_breaking_keeps_the_sandbox_usable(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    # The stream is how a remote engine's stats come (a local container's cgroup is read on
    # the host instead): look remote.
    monkeypatch.setattr("sandbox.docker._stats.HostCgroup.find", lambda *a, **k: None)
    client = new_client()
    streams = BreakableStats(client._query)
    monkeypatch.setattr(client, "_query", streams)
    try:
        await _stats_break(client, streams, caplog)
    finally:
        await client.close()


async def _stats_break(client: aiodocker.Docker, streams: BreakableStats,
                       caplog: pytest.LogCaptureFixture) -> None:
    backend = DockerBackend(SandboxConfig(image=IMAGE_BUSYBOX), docker=client)
    async with Sandbox(backend=backend) as sb:
        with caplog.at_level(logging.WARNING, logger="sandbox"):
            await wait_until(lambda: bool(streams.responses), 10)
            await sb.get_resource_usage()
            streams.refuse = True
            streams.cut()
            await wait_until(lambda: bool(streams.refused), 10)
            for _ in range(3):
                assert (await sb.execute_command("echo ok")).stdout == "ok\n"
            await sb.write_file("f", "x")
            assert await sb.read_file("f") == b"x"
            assert sb.status is SandboxStatus.RUNNING
            usage = await sb.get_resource_usage()
            assert usage.timestamp is not None and usage.process_count >= 1, usage
        assert "stats" in caplog.text and "reconnecting" in caplog.text
    assert sb.status is SandboxStatus.DESTROYED


async def test_closing_the_client_under_a_running_command() -> None:
    client = aiodocker.Docker()
    sb = Sandbox(backend=DockerBackend(SandboxConfig(image=IMAGE_BUSYBOX), docker=client))
    await sb.initialize()
    cid = sb.backend.container_id or ""
    try:
        async def close_client() -> None:
            await anyio.sleep(0.5)
            await client.close()

        t0 = time.monotonic()
        async with anyio.create_task_group() as tg:
            tg.start_soon(close_client)
            with pytest.raises(SandboxError, match="client") as ei:
                await sb.execute_command("sleep 100")
        assert time.monotonic() - t0 < 10, ei.value
        # Cleanup still removes the container, through a temporary client of its own.
        await sb.cleanup()
        assert sb.status is SandboxStatus.DESTROYED
        assert not container_exists(cid)
    finally:
        await client.close()
        if container_exists(cid):
            docker_cli("rm", "-f", cid)
