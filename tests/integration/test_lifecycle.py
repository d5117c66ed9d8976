"""Lifecycle of a real sandbox: create, info, cleanup, failures, cancellation, parallelism."""

from __future__ import annotations

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Sandbox,
    SandboxAlreadyInitialized,
    SandboxConfig,
    SandboxInitFailed,
    SandboxNotRunning,
    SandboxStatus,
    SecurityPolicy,
)
from tests.conftest import container_exists, docker_cli, sandbox_containers

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


async def test_status_labels_and_cleanup() -> None:
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, labels={"team": "qa"},
                               annotations={"task": "t1"}))
    assert sb.status is SandboxStatus.CREATING
    await sb.initialize()
    assert sb.status is SandboxStatus.RUNNING
    cid = sb.backend.container_id
    assert cid and container_exists(cid)
    labels = docker_cli("inspect", "--format", "{{json .Config.Labels}}", cid)
    for key in ("io.sandbox.managed-by", "io.sandbox.id", "io.sandbox.owner.host",
                "io.sandbox.owner.pid", "team"):
        assert key in labels
    info = await sb.get_info()
    assert info.status is SandboxStatus.RUNNING and info.id == sb.id
    assert info.image == IMAGE_BUSYBOX and info.runtime == "runc"
    assert info.created_at is not None and info.started_at is not None
    assert info.hostname and info.labels["team"] == "qa"
    assert info.annotations == {"task": "t1"}
    assert info.allocated_resources.process_limit > 0
    with pytest.raises(SandboxAlreadyInitialized):
        await sb.initialize()
    await sb.cleanup()
    assert sb.status is SandboxStatus.DESTROYED
    assert not container_exists(cid)
    await sb.cleanup()  # idempotent
    with pytest.raises(SandboxNotRunning):
        await sb.execute_command("true")


async def test_cleanup_of_never_initialized_sandbox_is_a_no_op() -> None:
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
    await sb.cleanup()
    assert sb.status is SandboxStatus.CREATING and sb.backend.container_id is None


async def test_unknown_type_names_available_ones() -> None:
    with pytest.raises(SandboxInitFailed, match="docker"):
        Sandbox(SandboxConfig(type="firecracker"))


@pytest.mark.parametrize("ref", ["UPPER/case", "", "busybox@sha256:abc"])
async def test_bad_image_reference_rejected_before_engine(ref: str) -> None:
    sb = Sandbox(SandboxConfig(image=ref))
    with pytest.raises(SandboxInitFailed, match="image"):
        await sb.initialize()
    assert sb.status is SandboxStatus.FAILED
    assert sb.backend.container_id is None
    assert sandbox_containers(sb.id) == []


async def test_missing_image_with_pull_policy_never() -> None:
    sb = Sandbox(SandboxConfig(image="sandbox-not-built:1", pull_policy="never"))
    with pytest.raises(SandboxInitFailed, match="never"):
        await sb.initialize()


async def test_failed_start_leaves_no_container() -> None:
    # The engine accepts this tmpfs option at create and refuses it at start.
    cfg = SandboxConfig(image=IMAGE_BUSYBOX,
                        security=SecurityPolicy(tmpfs_paths=("/scratch:notmpcopyup",)))
    sb = Sandbox(cfg)
    with pytest.raises(SandboxInitFailed, match="start"):
        await sb.initialize()
    assert sb.status is SandboxStatus.FAILED
    assert sb.backend.container_id is not None
    assert sandbox_containers(sb.id) == []


async def test_working_dir_that_is_a_file_is_refused() -> None:
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, working_dir="/etc/passwd"))
    with pytest.raises(SandboxInitFailed, match="not a directory"):
        await sb.initialize()
    assert sandbox_containers(sb.id) == []


async def test_cancellation_during_command_removes_container() -> None:
    ids: list[str] = []

    async def run() -> None:
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
            ids.append(sb.backend.container_id or "")
            await sb.execute_command("sleep 1000")

    with anyio.move_on_after(2):
        await run()
    assert ids and not container_exists(ids[0])


async def test_exception_in_block_removes_container() -> None:
    ids: list[str] = []
    with pytest.raises(RuntimeError):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
            ids.append(sb.backend.container_id or "")
            raise RuntimeError("boom")
    assert not container_exists(ids[0])


@pytest.mark.slow
async def test_twenty_sandboxes_in_parallel_ten_commands_each() -> None:
    errors: list[str] = []
    ids: list[str] = []

    async def worker(n: int) -> None:
        image = IMAGE_BUSYBOX if n % 2 else IMAGE_PYTHON
        async with Sandbox(SandboxConfig(image=image)) as sb:
            ids.append(sb.backend.container_id or "")
            for i in range(10):
                r = await sb.execute_command(f"echo {n}-{i}")
                if r.stdout != f"{n}-{i}\n" or not r.success:
                    errors.append(f"{n}-{i}: {r!r}")

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(worker, n)
    assert errors == []
    assert len(ids) == 20
    assert not any(container_exists(cid) for cid in ids)
