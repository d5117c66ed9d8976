"""A checkpoint never races an exec, and a freeze that wedges is thawed and reported.

An exec caught half-started by a commit's freeze wedged the engine for that container
(issue 26, item 9). The SDK now holds its execs while a checkpoint freezes the container
and waits for those already asked for; a commit that does not come back is ended, the
container thawed, and the checkpoint reported failed.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    CheckpointFailed,
    Command,
    Sandbox,
    SandboxConfig,
    SandboxStatus,
)
from sandbox.docker import _checkpoint
from sandbox.docker._gateway import Engine
from sandbox.docker._host import find_container_cgroup
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

CONFIG = SandboxConfig(image=IMAGE_BUSYBOX)


async def test_execs_in_a_loop_while_forking_all_finish(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        done: list[str] = []
        stop = anyio.Event()

        async def hammer(n: int) -> None:
            i = 0
            while not stop.is_set():
                result = await sb.execute_command(f"echo {n}-{i}")
                assert result.stdout == f"{n}-{i}\n", result
                done.append(result.stdout)
                i += 1

        with anyio.fail_after(240):  # a wedge would hang here; never a pass
            async with anyio.create_task_group() as tg:
                for n in range(4):
                    tg.start_soon(hammer, n)
                for k in range(3):
                    children = await sb.fork(1, name=f"{prefix}-{k}")
                    for child in children:
                        assert (await child.execute_command("echo child")).stdout == "child\n"
                        await child.cleanup()
                    await sb.checkpoint(f"{prefix}-c{k}")
                stop.set()
        assert len(done) > 12
        assert sb.status is SandboxStatus.RUNNING
        assert (await sb.execute_command("echo usable")).stdout == "usable\n"
        state = docker_cli("inspect", "-f", "{{.State.Status}}", sb.backend.container_id or "")
        assert state.strip() == "running"


async def test_a_wedged_commit_is_thawed_and_reported(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(CONFIG) as sb:
        container_id = sb.backend.container_id or ""
        main_pid = int(docker_cli("inspect", "-f", "{{.State.Pid}}", container_id))
        cgroup = find_container_cgroup(main_pid, container_id)
        assert cgroup is not None and cgroup.state() == "THAWED"
        real = Engine.query_json

        async def wedged(self: Engine, action: str, path: str, *args: Any,
                         **kwargs: Any) -> Any:
            if path == "commit":
                # As the engine does when a half-started exec wedges it: the container is
                # frozen and the commit never comes back.
                assert cgroup.set_frozen(True)
                await anyio.sleep_forever()
            return await real(self, action, path, *args, **kwargs)

        monkeypatch.setattr(Engine, "query_json", wedged)
        monkeypatch.setattr(_checkpoint, "COMMIT_TIMEOUT", 3.0)
        late: list[str] = []

        async def meanwhile() -> None:
            await anyio.sleep(0.5)  # asked for while the checkpoint holds the container
            late.append((await sb.execute_command(Command.shell("echo late"))).stdout)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                tg.start_soon(meanwhile)
                with pytest.raises(CheckpointFailed, match="did not finish the checkpoint"):
                    await sb.checkpoint(f"{prefix}-wedged")
        assert cgroup.state() == "THAWED"
        assert late == ["late\n"]
        assert sb.status is SandboxStatus.RUNNING
        assert (await sb.execute_command("echo usable")).stdout == "usable\n"


async def test_a_cancelled_checkpoint_leaves_no_freeze_and_no_exec_in_one(prefix: str) -> None:
    async with Sandbox(CONFIG) as sb:
        container_id = sb.backend.container_id or ""
        main_pid = int(docker_cli("inspect", "-f", "{{.State.Pid}}", container_id))
        cgroup = find_container_cgroup(main_pid, container_id)
        assert cgroup is not None
        await sb.execute_command("head -c 30000000 /dev/urandom > /workspace/big")
        for n, delay in enumerate((0.01, 0.05, 0.2, 0.5)):
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    # A command asked for meanwhile waits for the engine's thaw, then runs.
                    tg.start_soon(sb.execute_command, "true")
                    with anyio.move_on_after(delay):
                        await sb.checkpoint(f"{prefix}-cancelled{n}")
            assert cgroup.state() == "THAWED"
            assert (await sb.execute_command("echo ok")).stdout == "ok\n"
        assert sb.status is SandboxStatus.RUNNING
