"""A fork's children start without looking at their working dir (`_workdir.settle_by_commit`):
the source's create dealt with it, so each child gets the source's directory as the commit
froze it. Observed in real containers: no look and no hand-over for the children, a look for
a sandbox of another user from the same checkpoint, and, playing the attacker, a source
whose code changed its working dir before the checkpoint (its user chmodding and emptying its
own; a root without capabilities, as a hostile checkpoint's init would be, putting a symlink
to /etc there, removing it, or putting a root-owned one there): the children get that
directory as it was left, and no privileged step more (no hand-over that would give it, or
what a symlink names, to the user; /etc/hosts still a regular file of the SDK's)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import attrs
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SecurityPolicy
from tests.conftest import derived_image, docker_cli
from tests.integration.test_create_fast import Calls
from tests.integration.test_netless import HAND_OVER, HOSTS, never_seen, sh

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

LOOK = "look at the working directory"
CONFIG = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)
SHOW = ("id -u; stat -c '%u:%g %a %F' /workspace; "
        "stat -L -c '%u:%g %a' /workspace /etc; cat /etc/hosts; "
        "[ -L /etc/hosts ] && echo hosts-link; "
        "touch /workspace/w 2>/dev/null && echo wrote || echo refused")


async def children_see(source: Sandbox, name: str, calls: Calls) -> list[str]:
    """What each of two children of ``source`` shows (`SHOW`); ``calls`` cleared first."""
    calls.actions.clear()
    children = await source.fork(2, name=name)
    try:
        made = list(calls.actions)
        assert LOOK not in made and HAND_OVER not in made, made
        return [await sh(child, SHOW) for child in children]
    finally:
        async with anyio.create_task_group() as tg:
            for child in children:
                tg.start_soon(child.cleanup)


def as_root(source: Sandbox, script: str) -> None:
    """Run ``script`` as root in the source, with the container's privileges (no
    capabilities): what a hostile init or a root command there could do."""
    cid = source.backend.container_id  # type: ignore[attr-defined]
    docker_cli("exec", "-u", "0", "-w", "/", cid, "sh", "-c", script)


async def test_the_children_neither_look_nor_hand_over_and_another_user_still_does(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    never_seen(monkeypatch)
    calls = Calls(monkeypatch)
    async with Sandbox(CONFIG) as source:
        await source.write_file("/workspace/state", "parent")
        for text in await children_see(source, f"{prefix}-plain", calls):
            assert text.splitlines()[:2] == ["1000", "1000:0 775 directory"], text
            assert text.endswith("wrote\n") and HOSTS.decode() in text, text
        point = await source.checkpoint(f"{prefix}-other")
    # Another uid from the same checkpoint: not what the source's create dealt with, so the
    # directory is looked at (it holds the source's file: not handed over, as before).
    other = SecurityPolicy(run_as_user="2000", run_as_group="2000")
    calls.actions.clear()
    async with Sandbox(attrs.evolve(point.config, security=other)) as sb:
        assert calls.actions.count(LOOK) == 1, calls.actions
        assert HAND_OVER not in calls.actions, calls.actions
        assert (await sh(sb, "id -u; cat /workspace/state")) == "2000\nparent"


async def test_a_user_that_empties_and_chmods_its_working_dir_forks_it_so(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A look would find an empty directory the user cannot write, and hand it over again.
    never_seen(monkeypatch)
    calls = Calls(monkeypatch)
    async with Sandbox(CONFIG) as source:
        await sh(source, "rm -rf /workspace/* && chmod 500 /workspace")
        for text in await children_see(source, f"{prefix}-chmod", calls):
            lines = text.splitlines()
            assert lines[:2] == ["1000", "1000:0 500 directory"], text
            assert text.endswith("refused\n"), text
        # Its own directory: the user gives itself back what it took away.
        assert (await sh(source, "chmod 755 /workspace && touch /workspace/w && echo ok")) \
            == "ok\n"


@pytest.mark.parametrize("script", [
    "mv /workspace /moved && ln -s /etc /workspace",
    "rm -rf /workspace",
    "mv /workspace /moved && mkdir /workspace",
], ids=["symlink-to-etc", "removed", "root-owned"])
async def test_a_root_that_replaces_the_working_dir_gets_nothing_from_the_children(
        script: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    never_seen(monkeypatch)
    calls = Calls(monkeypatch)
    async with Sandbox(CONFIG) as source:
        as_root(source, script)
        for text in await children_see(source, f"{prefix}-root", calls):
            lines = text.splitlines()
            assert lines[0] == "1000", text
            # Whatever is there stays root's (the engine makes a missing one root's 0755):
            # never given to the user, nor what a symlink names; /etc is root's.
            assert lines[2].startswith("0:0 ") and lines[3] == "0:0 755", text
            assert lines[1].endswith("symbolic link" if "ln -s" in script else "directory")
            assert HOSTS.decode() in text and "hosts-link" not in text, text
            assert text.endswith("refused\n"), text


@pytest.fixture
def image_with_a_volume(tmp_path: Path) -> Iterator[str]:
    """The SDK's busybox image declaring a volume (elsewhere than the working dir)."""
    yield from derived_image(tmp_path, f"sandbox-test-forkwd:{uuid.uuid4().hex[:8]}",
                             "VOLUME /data\n", base=IMAGE_BUSYBOX)


async def test_a_checkpoint_whose_image_declares_a_volume_is_still_looked_at(
        image_with_a_volume: str, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A volume's contents are not in the commit: what the source's create handed over
    # there is not in the checkpoint, so its children look, once, as before.
    never_seen(monkeypatch)
    calls = Calls(monkeypatch)
    async with Sandbox(attrs.evolve(CONFIG, image=image_with_a_volume)) as source:
        calls.actions.clear()
        children = await source.fork(2, name=f"{prefix}-volume")
        try:
            assert calls.actions.count(LOOK) == 1, calls.actions
            for child in children:
                assert (await sh(child, "id -u; touch /workspace/w && echo ok")) == "1000\nok\n"
        finally:
            for child in children:
                await child.cleanup()
