"""Secure defaults at less cost (issue 29): what a create no longer repeats for an image it
has seen, and that no image can talk it into skipping a check."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
    SecurityViolation,
)
from sandbox.docker import _gateway
from tests.integration.test_pool_attacks import derived_image

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def _build(tmp_path: Path, steps: str) -> Iterator[str]:
    """An image of sandbox-busybox plus ``steps`` (Dockerfile lines); removed after."""
    yield from derived_image(tmp_path, f"sandbox-test-create-fast:{uuid.uuid4().hex[:8]}", steps,
                             base=IMAGE_BUSYBOX)


@pytest.fixture
def root_name_image(tmp_path: Path) -> Iterator[str]:
    """Its ``sandbox`` user is uid 0, and a label says the SDK need not look."""
    yield from _build(tmp_path, (
        "RUN sed -i 's/^sandbox:x:1000:1000:/sandbox:x:0:0:/' /etc/passwd\n"
        "LABEL io.sandbox.image.recipe=2 io.sandbox.image.user=sandbox\n"))


@pytest.fixture
def lying_shell_image(tmp_path: Path) -> Iterator[str]:
    """Its /bin/sh answers the SDK's start-up probe with made-up ids (what a checkpoint of a
    sandbox whose code replaced /bin/sh would do)."""
    fake = ('#!/bin/busybox ash\\n'
            'if [ "$3" = sandbox-init ]; then echo "5 5 1 - -"; exit 0; fi\\n'
            'exec /bin/busybox ash "$@"\\n')
    yield from _build(tmp_path, f"RUN rm /bin/sh && printf '{fake}' > /bin/sh && "
                                "chmod 755 /bin/sh\n")


class Calls:
    """Counts the engine calls a create makes, by what they are for."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.actions: list[str] = []
        # `_exec_json`: an exec's create and inspect on a local engine (`_direct`), which
        # do not pass `query_json`.
        for name in ("request", "query_json", "_exec_json"):
            original = getattr(_gateway.Engine, name)

            async def spy(engine: Any, action: str, *args: Any, _original: Any = original,
                          **kwargs: Any) -> Any:
                self.actions.append(action)
                return await _original(engine, action, *args, **kwargs)

            monkeypatch.setattr(_gateway.Engine, name, spy)


@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON])
async def test_a_second_sandbox_of_an_image_needs_no_probe(
        image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=image)):
        pass  # the first of an image id probes the user once
    calls = Calls(monkeypatch)
    async with Sandbox(SandboxConfig(image=image)) as sb:
        made = list(calls.actions)
        assert "start a command" not in made, made  # no exec before ready
        assert "look at the working directory" not in made, made  # read once per image id
        identity = sb.backend.identity
        assert (identity.uid, identity.gid, identity.user_name) == (1000, 1000, "sandbox")
        done = await sb.execute_command(
            'id -u; stat -c %u /workspace; touch /workspace/f "$HOME/.f" && echo ok')
        assert done.stdout.split() == ["1000", "1000", "ok"], done


async def test_a_name_the_image_maps_to_root_is_refused_every_time(
        root_name_image: str) -> None:
    """What the SDK remembers of an image never covers a name: the image's passwd decides
    what it means, so the probe runs, and refuses, each time (whatever labels say)."""
    for _ in range(3):
        with pytest.raises(SecurityViolation, match="which is root"):
            async with Sandbox(SandboxConfig(
                    image=root_name_image, security=SecurityPolicy(run_as_user="sandbox"))):
                pass
    async with Sandbox(SandboxConfig(image=root_name_image)) as sb:  # the numeric default
        done = await sb.execute_command("id -u; touch /workspace/f && echo ok")
        assert done.stdout.split() == ["1000", "ok"], done


async def test_the_image_shell_does_not_choose_the_sandbox_identity(
        lying_shell_image: str) -> None:
    """The engine runs a numeric user's commands as exactly its ids: the identity the SDK
    keeps (what a pool's reuse checks compare processes with) is those, whatever the image's
    shell printed at start."""
    for _ in range(2):
        async with Sandbox(SandboxConfig(image=lying_shell_image)) as sb:
            identity = sb.backend.identity
            assert (identity.uid, identity.gid) == (1000, 1000), identity
            done = await sb.execute_command(["id", "-u"])
            assert done.stdout.strip() == "1000", done


async def test_one_inspect_finds_the_main_process_for_results_and_sampler(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The result finisher and the host sampler share one inspect for the container's main
    pid (`_main_pid`); command usage still comes from the container's cgroup."""
    calls = Calls(monkeypatch)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        done = await sb.execute_command("i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
        again = await sb.execute_command("true")
        usage = await sb.get_resource_usage()
    assert done.success and again.success, (done, again)
    assert done.resource_usage.cpu_time.total_seconds() > 0, done.resource_usage
    assert usage.memory_usage > 0, usage
    pid_reads = [a for a in calls.actions if a in ("inspect the sandbox", "inspect the container")]
    # The event watcher's check once subscribed, and the main pid: no more.
    assert len(pid_reads) <= 2, calls.actions
