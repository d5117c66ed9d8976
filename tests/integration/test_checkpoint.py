"""Checkpoints and forks on the real engine: contents, labels, config, refusals, the CLI
listing and gc by age."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    Checkpoint,
    CheckpointFailed,
    ConfigError,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    checkpoints,
    gc,
    remove_checkpoint,
)
from sandbox._checkpoint import LABEL_CHECKPOINT, checkpoint_labels
from sandbox._constants import LABEL_CREATED, LABEL_MANAGED_BY, LABEL_OWNER_PID
from sandbox.docker._checkpoint import commit_checkpoint
from sandbox.docker._gateway import Engine, new_client
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0,
                       resources=ResourceLimits(memory_limit=256 << 20, process_limit=200),
                       environment={"MODE": "test"})


def image_labels(image: str) -> dict[str, str]:
    return dict(json.loads(docker_cli("image", "inspect", image))[0]["Config"]["Labels"])


async def test_checkpoint_keeps_the_filesystem_and_a_new_sandbox_starts_from_it(
        prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        await sb.execute_command(
            "echo kept > /workspace/a; mkdir -p /workspace/d; printf x > /workspace/d/b; "
            "chmod 0640 /workspace/a; echo tmp > /tmp/t")
        point = await sb.checkpoint(f"{prefix}-one")
        # The source runs on at once after its thaw.
        assert (await sb.execute_command("echo after > /workspace/later; cat /workspace/a"
                                         )).stdout == "kept\n"
    assert isinstance(point, Checkpoint) and point.image == f"sandbox-checkpoint:{prefix}-one"
    assert point.memory is False and point.source_id == sb.id
    labels = image_labels(point.image)
    assert labels[LABEL_MANAGED_BY] == "sandbox-sdk" and labels[LABEL_CHECKPOINT] == point.name
    assert labels[LABEL_OWNER_PID] == ""  # no owner: gc never takes it for a dead one's leak
    assert point.config.image == point.image and point.config.resources == CONFIG.resources
    async with Sandbox(point.config) as again:
        out = await again.execute_command(
            "cat /workspace/a /workspace/d/b /tmp/t; stat -c '%a %u' /workspace/a; "
            "ls /workspace; id -u; echo $MODE")
        assert out.stdout == "kept\nxtmp\n640 1000\na\nd\n1000\ntest\n", out.stdout
    # Listed, then removed by name.
    assert point.name in {p.name for p in await checkpoints()}
    await remove_checkpoint(point.name)
    assert point.name not in {p.name for p in await checkpoints()}
    with pytest.raises(CheckpointFailed, match="no checkpoint"):
        await remove_checkpoint(point.name)


async def test_fork_gives_n_sandboxes_with_the_same_files_and_config(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        await sb.write_file("/workspace/state", "step 7")
        children = await sb.fork(3, name=f"{prefix}-fork")
        try:
            assert len({c.id for c in children} | {sb.id}) == 4
            for n, child in enumerate(children):
                assert child.config.resources == CONFIG.resources
                assert child.config.environment == CONFIG.environment
                assert await child.read_file("/workspace/state") == b"step 7"
                await child.write_file("/workspace/mine", str(n))
            # Each is its own copy: writes in one are seen by no other, nor by the source.
            for n, child in enumerate(children):
                assert await child.read_file("/workspace/mine") == str(n).encode()
            assert (await sb.execute_command("ls /workspace")).stdout == "state\n"
        finally:
            for child in children:
                await child.cleanup()
        for bad in (0, -1, True, 1.5):
            with pytest.raises(ConfigError, match="positive integer"):
                await sb.fork(bad)  # type: ignore[arg-type]


async def test_refusals_are_clear_and_leave_nothing(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        with pytest.raises(CheckpointFailed, match="memory checkpoints are not supported"):
            await sb.checkpoint(f"{prefix}-mem", memory=True)
        for bad in ("", "-x", "a/b", "x" * 129, "a:b"):
            with pytest.raises(ConfigError, match="checkpoint name"):
                await sb.checkpoint(bad)
        await sb.checkpoint(f"{prefix}-dup")
        with pytest.raises(CheckpointFailed, match="already exists"):
            await sb.checkpoint(f"{prefix}-dup")
    names = {p.name for p in await checkpoints()}
    assert f"{prefix}-mem" not in names and f"{prefix}-dup" in names


async def test_cli_lists_checkpoints(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        await sb.checkpoint(f"{prefix}-cli")
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-m", "sandbox", "checkpoints"],
                                       cwd=ROOT, check=False, stderr=subprocess.PIPE)
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.decode().splitlines() if ln.startswith(prefix))
    assert f"sandbox-checkpoint:{prefix}-cli" in line and sb.id in line


async def test_gc_removes_checkpoints_by_age_only_when_asked(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        fresh = await sb.checkpoint(f"{prefix}-fresh")
        # An old one: the same commit, with its creation label two days back.
        labels = checkpoint_labels(sb, f"{prefix}-old", memory=False, fork=False)
        labels[LABEL_CREATED] = (datetime.now(UTC) - timedelta(days=2)).isoformat()
        client = new_client()
        try:
            await commit_checkpoint(Engine(client), sb.backend.container_id,
                                    f"sandbox-checkpoint:{prefix}-old", labels, user="1000:1000")
            await commit_checkpoint(Engine(client), sb.backend.container_id,
                                    f"sandbox-checkpoint:{prefix}-used", {
                                        **labels, LABEL_CHECKPOINT: f"{prefix}-used"},
                                    user="1000:1000")
        finally:
            await client.close()
    names = {p.name for p in await checkpoints()}
    assert {f"{prefix}-old", f"{prefix}-used", fresh.name} <= names
    # Without checkpoints_older_than no checkpoint is looked at (but a fork's whose maker is
    # gone). (Containers: a dry run, and below only year-old ones, so as not to collect what
    # other test processes still check.)
    report = await gc(dry_run=True)
    assert not report.kept_checkpoints
    assert all(i.reason.startswith("a fork's") for i in report.removed_checkpoints)
    old = next(p for p in await checkpoints() if p.name == f"{prefix}-used")
    async with Sandbox(old.config) as user:  # a container uses it: kept
        report = await gc(older_than=timedelta(days=365),
                          checkpoints_older_than=timedelta(days=1))
        removed = {i.name: i.reason for i in report.removed_checkpoints}
        kept = {i.name: i.reason for i in report.kept_checkpoints}
        assert "2d old" in removed[f"{prefix}-old"]
        assert "a container uses it" in kept[f"{prefix}-used"]
        assert "younger than 1d" in kept[fresh.name]
        assert (await user.execute_command("true")).exit_code == 0
    names = {p.name for p in await checkpoints()}
    assert f"{prefix}-old" not in names and {fresh.name, f"{prefix}-used"} <= names


async def test_remove_checkpoint_never_touches_an_image_it_did_not_make(prefix: str) -> None:
    docker_cli("tag", IMAGE_BUSYBOX, f"sandbox-checkpoint:{prefix}-foreign")
    try:
        with pytest.raises(CheckpointFailed, match="no checkpoint"):
            await remove_checkpoint(f"{prefix}-foreign")
        docker_cli("image", "inspect", f"sandbox-checkpoint:{prefix}-foreign")
    finally:
        docker_cli("rmi", f"sandbox-checkpoint:{prefix}-foreign", check=False)


async def test_a_checkpoint_with_a_big_working_dir_starts(prefix: str) -> None:
    """The pre-start look at the working dir reads a few bytes of its archive; with 32 MiB
    there, the engine used to block writing the rest while it held the new container, and
    the start waited out its 60 s deadline."""
    async with Sandbox(CONFIG) as sb:
        done = await sb.execute_command("head -c 33554432 /dev/urandom > /workspace/big")
        assert done.exit_code == 0, done
        point = await sb.checkpoint(f"{prefix}-big")
    with anyio.fail_after(45):
        async with Sandbox(point.config) as again:
            out = await again.execute_command("wc -c < /workspace/big")
    assert out.stdout.strip() == "33554432"
