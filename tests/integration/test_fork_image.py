"""A fork's checkpoint image as an attacker (anyone who can list images) sees it: no
environment value in its labels, gone with the last fork, and collected by gc when the
process that forked was killed."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import uuid
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, checkpoints, gc
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]
REPO = str(Path(__file__).resolve().parents[2])


def config(secret: str) -> SandboxConfig:
    return SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0,
                         environment={"SECRET": secret, "MODE": "test"})


def image_exists(ref: str) -> bool:
    return bool(docker_cli("image", "ls", "-q", ref).strip())


def inspect(kind: str, ref: str) -> dict[str, object]:
    config = json.loads(docker_cli(kind, "inspect", ref))[0]["Config"]
    return {"Labels": config.get("Labels") or {}, "Env": config.get("Env") or []}


async def test_no_environment_value_reaches_the_image_or_its_containers(prefix: str) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    async with Sandbox(config(secret)) as sb:
        children = await sb.fork(2, name=f"{prefix}-env")
        try:
            image = f"sandbox-checkpoint:{prefix}-env"
            seen = json.dumps([inspect("image", image)] +
                              [inspect("container", c.backend.container_id) for c in children])
            assert secret not in seen  # labels were readable by anyone who can list images
            assert "SECRET" in seen  # named as withheld: only its value is kept out
            # The forks still get it: from this process's memory, not from the image.
            for child in children:
                out = await child.execute_command("echo $SECRET $MODE")
                assert out.stdout == f"{secret} test\n"
            listed = next(p for p in await checkpoints() if p.name == f"{prefix}-env")
            assert listed.withheld == ("environment.MODE", "environment.SECRET")
            assert listed.source_config is not None and listed.source_config.environment == {}
        finally:
            for child in children:
                await child.cleanup()


async def test_the_image_goes_with_the_last_fork_unless_kept(prefix: str) -> None:
    async with Sandbox(config("x")) as sb:
        image = f"sandbox-checkpoint:{prefix}-last"
        one, two = await sb.fork(2, name=f"{prefix}-last")
        await one.cleanup()
        assert image_exists(image)  # the other fork still runs from it
        await two.cleanup()
        assert not image_exists(image)
        kept = f"sandbox-checkpoint:{prefix}-kept"
        (child,) = await sb.fork(1, name=f"{prefix}-kept", keep=True)
        await child.cleanup()
        assert image_exists(kept)
        # A fork of a fork: the kept one's labels must not make it a temporary one.
        (again,) = await sb.fork(1, name=f"{prefix}-parent")
        (grand,) = await again.fork(1, name=f"{prefix}-grand", keep=True)
        await again.cleanup()
        await grand.cleanup()
        assert not image_exists(f"sandbox-checkpoint:{prefix}-parent")
        grand_image = f"sandbox-checkpoint:{prefix}-grand"
        assert image_exists(grand_image)
        labels = inspect("image", grand_image)["Labels"]
        assert isinstance(labels, dict) and labels["io.sandbox.checkpoint.owner.pid"] == ""


_FORKER = textwrap.dedent("""
    import asyncio, sys
    from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

    async def main():
        sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0))
        await sb.initialize()
        children = await sb.fork(2, name=sys.argv[1])
        print(" ".join(c.backend.container_id for c in children), flush=True)
        await asyncio.sleep(300)

    asyncio.run(main())
""")


async def test_gc_removes_the_image_a_killed_forker_left(prefix: str) -> None:
    name = f"{prefix}-crash"
    owner = await anyio.open_process([sys.executable, "-c", _FORKER, name],
                                     env={**os.environ, "PYTHONPATH": REPO})
    try:
        assert owner.stdout is not None
        line = ""
        with anyio.fail_after(120):
            async for chunk in TextReceiveStream(owner.stdout):
                line += chunk
                if "\n" in line:
                    break
    finally:
        owner.kill()  # SIGKILL: no cleanup runs
        await owner.wait()
    assert image_exists(f"sandbox-checkpoint:{name}")
    report = await gc()
    assert {c[:12] for c in line.split()} <= {i.id[:12] for i in report.removed_containers}
    removed = {i.name: i.reason for i in report.removed_checkpoints}
    assert removed[name].startswith("a fork's checkpoint: its owner (pid")
    assert not image_exists(f"sandbox-checkpoint:{name}")
