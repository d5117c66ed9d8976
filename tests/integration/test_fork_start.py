"""How a fork starts its sandboxes on the real engine: each child its own copy, and nothing
left when one of them fails to start or the caller gives up half-way."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SandboxInitFailed
from sandbox._checkpoint import fork
from sandbox.docker import DockerBackend
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

CONFIG = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)


def left_from(name: str) -> list[str]:
    """Containers (running or not) made from the fork's checkpoint ``name`` (they carry its
    labels), and the image itself if it is still there."""
    containers = docker_cli("ps", "-aq", "--filter",
                            f"label=io.sandbox.checkpoint={name}").split()
    return containers + docker_cli("image", "ls", "-q", f"sandbox-checkpoint:{name}").split()


async def test_each_child_is_its_own_copy_and_the_image_goes_with_them(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        await sb.write_file("/workspace/state", "parent")
        children = await sb.fork(4, name=f"{prefix}-copies")
        try:
            for n, child in enumerate(children):
                assert await child.read_file("/workspace/state") == b"parent"
                await child.write_file("/workspace/state", f"child {n}")
            for n, child in enumerate(children):
                assert await child.read_file("/workspace/state") == f"child {n}".encode()
                who = await child.execute_command("id -u; touch /workspace/w && echo ok")
                assert who.stdout == "1000\nok\n", who
            assert await sb.read_file("/workspace/state") == b"parent"
        finally:
            for child in children:
                await child.cleanup()
    assert left_from(f"{prefix}-copies") == []


async def test_a_child_that_fails_to_start_takes_the_others_and_the_image_with_it(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[DockerBackend] = []
    create = DockerBackend.create

    async def third_fails(self: DockerBackend, *args: Any, **kw: Any) -> None:
        await create(self, *args, **kw)  # its container runs: the failure is after start
        started.append(self)
        if len(started) == 3:
            raise SandboxInitFailed("injected: the third child fails after its start")

    async with Sandbox(CONFIG) as sb:
        monkeypatch.setattr(DockerBackend, "create", third_fails)
        with pytest.raises(SandboxInitFailed, match="injected"):
            await sb.fork(5, name=f"{prefix}-half")
        monkeypatch.undo()
        assert len(started) >= 3
        assert left_from(f"{prefix}-half") == []
        assert (await sb.execute_command("echo still")).stdout == "still\n"


async def test_a_fork_cancelled_half_way_leaves_nothing(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    started = anyio.Event()
    create = DockerBackend.create
    count = 0

    async def slow_after_two(self: DockerBackend, *args: Any, **kw: Any) -> None:
        nonlocal count
        await create(self, *args, **kw)
        count += 1
        if count >= 2:
            started.set()
            await anyio.sleep(30)  # the caller gives up meanwhile

    async with Sandbox(CONFIG) as sb:
        monkeypatch.setattr(DockerBackend, "create", slow_after_two)
        async with anyio.create_task_group() as tg:
            async def forking() -> None:
                await fork(sb, 4, Sandbox, name=f"{prefix}-cancel")

            tg.start_soon(forking)
            await started.wait()
            tg.cancel_scope.cancel()
        monkeypatch.undo()
        assert left_from(f"{prefix}-cancel") == []
