"""SandboxPool on the real engine: reuse rules, isolation between users, refill, the health
check, cancellation, closing and crash safety (gc)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    PoolStats,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SandboxPool,
    gc,
)
from sandbox._constants import LABEL_MANAGED_BY, LABEL_OWNER_PID
from sandbox.docker._gateway import Engine, new_client
from sandbox.docker._gc import Managed, remove
from tests.conftest import docker_cli, ours, sandbox_containers

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

ROOT = Path(__file__).resolve().parents[2]
#: No stats sampler: a pool's idle sandboxes need none, and the shared host is small.
BUSYBOX = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)


async def wait_for(predicate: Callable[[], bool], what: str, patience: float = 60) -> None:
    """Poll ``predicate()`` until true; fail (instead of hanging) after ``patience`` seconds.

    Polled: pool counts and engine state have no event to wait on.
    """
    with anyio.move_on_after(patience):
        while not predicate():  # noqa: ASYNC110
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"not within {patience} s: {what}")


def ready(pool: SandboxPool, n: int) -> Callable[[], bool]:
    return lambda: pool.stats().ready >= n


async def test_default_gives_every_user_a_fresh_sandbox_and_removes_the_used_one() -> None:
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=2) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            await sb.write_file("/workspace/secret", "s3cret")
            assert sandbox_containers(first)
        async with pool.acquire() as sb:
            assert sb.id != first
            assert (await sb.execute_command("ls -A /workspace")).stdout == ""
        await wait_for(lambda: not sandbox_containers(first), "the used sandbox removed")
        stats = pool.stats()
        assert stats.reused == 0 and stats.acquired == 2 and stats.discarded >= 1
    assert ours("container") == []


async def test_reused_sandbox_keeps_nothing_of_the_last_user(
        caplog: pytest.LogCaptureFixture) -> None:
    """max_uses > 1: the same container comes back (the id proves it), wiped."""
    caplog.set_level(logging.INFO, logger="sandbox.pool")

    def not_reused() -> str:  # why the pool gave a new one instead (its reset's verdict)
        return "\n".join(r.getMessage() for r in caplog.records if "not reused" in r.getMessage())

    config = SandboxConfig(image=IMAGE_PYTHON, stats_interval=0)
    async with SandboxPool(config, min_ready=1, max_size=1, max_uses=3) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            script = (
                "echo s3cret > /workspace/secret; mkdir -p /workspace/d/e; "
                "echo s3cret > /workspace/d/e/f; chmod 000 /workspace/d; "
                "echo s3cret > /tmp/secret; echo s3cret > /dev/shm/secret; "
                "echo s3cret > \"$HOME/.secret\"; "
                "python3 -c 'import sysv_ipc' 2>/dev/null; "
                "nohup sleep 1000 >/dev/null 2>&1 &"
            )
            assert (await sb.execute_command(script)).exit_code == 0
            sb.set_environment({"TOKEN": "s3cret"})
            await sb.set_working_directory("/tmp")
        async with pool.acquire() as sb:
            assert sb.id == first, not_reused()  # reused...
            probe = await sb.execute_command(
                "ls -A /workspace /tmp /dev/shm \"$HOME\"; pwd; env | grep -c s3cret")
            # ...and nothing of the first user is there: no file, variable, cwd...
            assert "secret" not in probe.stdout, probe.stdout
            assert probe.stdout.endswith("\n/workspace\n0\n"), probe.stdout
            assert sb.get_environment().get("TOKEN") is None
            # ...nor process.
            ps = await sb.execute_command(["ps", "-eo", "args"])
            assert "sleep 1000" not in ps.stdout.splitlines(), ps.stdout
        async with pool.acquire() as sb:
            assert sb.id == first, not_reused()
        # Used max_uses times: the next user gets a new one, and the old one is removed.
        async with pool.acquire() as sb:
            assert sb.id != first
        await wait_for(lambda: not sandbox_containers(first), "the used-up sandbox removed")
        assert pool.stats().reused == 2
    assert ours("container") == []


async def test_refill_keeps_min_ready_and_never_exceeds_max_size() -> None:
    async with SandboxPool(BUSYBOX, min_ready=2, max_size=3) as pool:
        await wait_for(ready(pool, 2), "two sandboxes ready")
        async with pool.acquire() as a:
            # Refilled in the background, with no acquire waiting: 2 ready again.
            await wait_for(ready(pool, 2), "refilled to two ready")
            assert len(ours("container")) == 3
            async with pool.acquire() as b:
                assert a.id != b.id
                async with pool.acquire():
                    # All three in use: a fourth must wait, not grow the pool.
                    got = False
                    with anyio.move_on_after(1.5):
                        async with pool.acquire():
                            got = True
                    assert not got
                    assert len(ours("container")) <= 3
                    assert pool.stats().in_use == 3
        stats = pool.stats()
        assert stats.created == 3 and stats.acquired == 3
    assert ours("container") == []


async def test_a_sandbox_killed_while_idle_is_never_handed_out() -> None:
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=2) as pool:
        await wait_for(ready(pool, 1), "one sandbox ready")
        [idle] = ours("container")
        docker_cli("kill", idle)
        async with pool.acquire() as sb:
            assert not sb.backend.container_id.startswith(idle)
            assert (await sb.execute_command("echo alive")).stdout == "alive\n"
        assert pool.stats().unhealthy == 1
        await wait_for(lambda: idle not in " ".join(ours("container")),
                       "the killed sandbox removed")
        # A paused one is not handed out either (the engine is asked, not a cached status).
        await wait_for(lambda: pool.stats().ready == 1 and len(ours("container")) == 1,
                       "one sandbox ready again, and the used ones removed")
        [idle] = ours("container")
        docker_cli("pause", idle)
        async with pool.acquire() as sb:
            assert not sb.backend.container_id.startswith(idle)
        assert pool.stats().unhealthy == 2
    assert ours("container") == []


async def test_a_failing_create_is_raised_by_the_waiting_acquire() -> None:
    config = SandboxConfig(image="sandbox-nonexistent:latest", pull_policy="never")
    async with SandboxPool(config, min_ready=0, max_size=1) as pool:
        with anyio.fail_after(60), pytest.raises(SandboxInitFailed) as info:
            async with pool.acquire():
                pass
        assert "sandbox-nonexistent" in str(info.value.cause)
        stats = pool.stats()
        assert stats.failed >= 1 and "sandbox-nonexistent" in stats.last_error
    assert ours("container") == []


async def test_cancelled_acquire_and_close_mid_refill_leave_nothing() -> None:
    async with SandboxPool(BUSYBOX, min_ready=0, max_size=1) as pool:
        # Cancelled while its sandbox is being created for it.
        with anyio.move_on_after(0.1) as scope:
            async with pool.acquire():
                pass
        assert scope.cancelled_caught
        # Cancelled while holding one: the release still happens.
        async with anyio.create_task_group() as tg:
            started = anyio.Event()

            async def hold() -> None:
                async with pool.acquire() as sb:
                    started.set()
                    await sb.execute_command("sleep 1000")

            tg.start_soon(hold)
            with anyio.fail_after(60):
                await started.wait()
            tg.cancel_scope.cancel()
    assert ours("container") == []
    # Closed while three creates are in flight.
    async with SandboxPool(BUSYBOX, min_ready=3, max_size=3, create_concurrency=3) as pool:
        await wait_for(lambda: pool.stats().creating == 3, "three creates in flight")
        await anyio.sleep(0.15)
    assert ours("container") == []
    assert pool.stats().creating == 0 and pool.stats().removing == 0


async def test_closing_removes_sandboxes_in_use_in_another_task() -> None:
    holder_error: list[BaseException] = []
    got = anyio.Event()

    async def hold(pool: SandboxPool) -> None:
        try:
            async with pool.acquire() as sb:
                got.set()
                await anyio.sleep(0.5)
                await sb.execute_command("true")
        except Exception as exc:
            holder_error.append(exc)

    async with anyio.create_task_group() as tg:
        async with SandboxPool(BUSYBOX, min_ready=1, max_size=1) as pool:
            tg.start_soon(hold, pool)
            with anyio.fail_after(60):
                await got.wait()
        assert ours("container") == []
    assert holder_error  # it was told: its sandbox is gone


CHILD = textwrap.dedent("""
    import asyncio, sys
    from sandbox import IMAGE_BUSYBOX, SandboxConfig, SandboxPool

    async def main():
        config = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)
        async with SandboxPool(config, min_ready=2, max_size=3) as pool:
            while pool.stats().ready < 2:
                await asyncio.sleep(0.05)
            async with pool.acquire():
                print("ready", flush=True)
                await asyncio.sleep(1000)

    asyncio.run(main())
""")


async def test_gc_removes_the_pool_of_a_killed_process() -> None:
    proc = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
        [sys.executable, "-c", CHILD], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True))
    label = f"label={LABEL_OWNER_PID}={proc.pid}"
    try:
        assert proc.stdout is not None
        with anyio.fail_after(120):
            line = await anyio.to_thread.run_sync(proc.stdout.readline)
        assert line.strip() == "ready", proc.stderr.read() if proc.stderr else ""
        await anyio.sleep(0.5)  # the refill of the one in use is under way
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # no cleanup can run
        await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=30))
    # Let creates the engine was still doing finish, then collect.
    await anyio.sleep(1)
    left = docker_cli("ps", "-aq", "--filter", f"label={LABEL_MANAGED_BY}=sandbox-sdk",
                      "--filter", label).split()
    assert len(left) >= 2
    # A dry run, so as not to collect what other test processes on this engine are about to
    # check themselves: gc proves every one of the pool's containers' owner dead...
    report = await gc(dry_run=True)
    verdicts = {item.id[:12]: item.reason for item in report.removed_containers}
    for container in left:
        assert f"pid {proc.pid}) has exited" in verdicts[container[:12]]
    # ...and removes them (only those, here).
    for item in report.removed_containers:
        if item.id[:12] in {c[:12] for c in left}:
            await remove(Engine(client := new_client()), Managed(
                kind="container", id=item.id, name=item.name, labels={}, created=None))
            await client.close()
    assert docker_cli("ps", "-aq", "--filter", label).split() == []


async def test_stats_shape_and_latency() -> None:
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=1) as pool:
        await wait_for(ready(pool, 1), "one sandbox ready")
        async with pool.acquire():
            pass
        stats = pool.stats()
    assert isinstance(stats, PoolStats)
    assert stats.acquired == 1 and stats.created >= 1
    assert 0 < stats.acquire_p50 <= stats.acquire_p95


async def test_a_sandbox_from_the_pool_is_a_normal_sandbox() -> None:
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=1) as pool, \
            pool.acquire() as sb:
        assert isinstance(sb, Sandbox)
        assert sb.config == BUSYBOX
        assert (await sb.execute_command("id -u")).stdout == "1000\n"
