"""/workspace in the SDK's image layout (1000:0 mode 0775, issue 29): the default user owns
it, so a create hands nothing over (no archive PUT); root without capabilities writes it through
group 0; any other uid still gets the empty directory; a directory with contents another uid
owns is never given away. Observed in real containers, the PUT counted by engine call."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, Sandbox, SandboxConfig, SecurityPolicy
from tests.conftest import derived_image
from tests.integration.test_create_fast import Calls

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: The engine call that hands the working dir over (`_workdir`).
HAND_OVER = "give the working directory to the sandbox user"
#: The SDK images' layout, applied on top of whatever the local images hold now.
SDK_LAYOUT = "RUN chown 1000:0 /workspace && chmod 0775 /workspace\n"


def _tag() -> str:
    return f"sandbox-test-workspace-owner:{uuid.uuid4().hex[:8]}"


@pytest.fixture(params=[IMAGE_BUSYBOX, IMAGE_PYTHON], ids=["busybox", "python"])
def sdk_image(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    yield from derived_image(tmp_path, _tag(), SDK_LAYOUT, base=request.param)


@pytest.fixture
def busybox_sdk_image(tmp_path: Path) -> Iterator[str]:
    yield from derived_image(tmp_path, _tag(), SDK_LAYOUT, base=IMAGE_BUSYBOX)


@pytest.fixture
def foreign_image(tmp_path: Path) -> Iterator[str]:
    """/workspace belongs to uid 3000 and holds that user's file."""
    yield from derived_image(tmp_path, _tag(), (
        "RUN echo mine > /workspace/keep && chown -R 3000:3000 /workspace && "
        "chmod 0755 /workspace && chmod 0644 /workspace/keep\n"), base=IMAGE_BUSYBOX)


SHOW = ('id -u; id -g; stat -c "%u:%g %a" /workspace; '
        'touch /workspace/f && echo wrote || echo denied; '
        'grep CapEff /proc/self/status | tr -d "\\t"')


async def test_the_default_user_owns_it_without_a_hand_over(
        sdk_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2):  # the first create reads the dir's entry; neither hands it over
        calls = Calls(monkeypatch)
        async with Sandbox(SandboxConfig(image=sdk_image)) as sb:
            assert HAND_OVER not in calls.actions, calls.actions
            done = await sb.execute_command(SHOW)
        assert done.stdout.split() == ["1000", "1000", "1000:0", "775", "wrote",
                                       "CapEff:0000000000000000"], done
        monkeypatch.undo()


async def test_root_without_capabilities_writes_it_through_group_0(
        busybox_sdk_image: str) -> None:
    config = SandboxConfig(image=busybox_sdk_image, security=SecurityPolicy(run_as_user="root"))
    async with Sandbox(config) as sb:
        done = await sb.execute_command(SHOW)
    # No CAP_DAC_OVERRIDE: the write goes through the group bits of a 1000:0 0775 dir.
    assert done.stdout.split() == ["0", "0", "1000:0", "775", "wrote",
                                   "CapEff:0000000000000000"], done


async def test_another_uid_is_handed_the_empty_directory(
        busybox_sdk_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2):
        calls = Calls(monkeypatch)
        config = SandboxConfig(image=busybox_sdk_image, security=SecurityPolicy(
            run_as_user="2000", run_as_group="2000"))
        async with Sandbox(config) as sb:
            assert calls.actions.count(HAND_OVER) == 1, calls.actions
            done = await sb.execute_command(SHOW)
        assert done.stdout.split()[:5] == ["2000", "2000", "2000:2000", "755", "wrote"], done
        monkeypatch.undo()


@pytest.mark.parametrize("user", ["", "2000"])
async def test_a_directory_with_someone_elses_files_is_not_given_away(
        foreign_image: str, user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = Calls(monkeypatch)
    security = SecurityPolicy(run_as_user=user, run_as_group=user) if user else SecurityPolicy()
    async with Sandbox(SandboxConfig(image=foreign_image, security=security)) as sb:
        assert HAND_OVER not in calls.actions, calls.actions
        done = await sb.execute_command(
            'stat -c "%u:%g" /workspace /workspace/keep; cat /workspace/keep; '
            'touch /workspace/f 2>/dev/null && echo wrote || echo denied; '
            'echo x > /workspace/keep 2>/dev/null && echo changed || echo kept')
    assert done.stdout.split() == ["3000:3000", "3000:3000", "mine", "denied", "kept"], done


async def test_concurrent_creates_of_a_new_image_look_and_probe_once(
        busybox_sdk_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Like a fork's children: five creates of an image nobody has read yet, at once.
    calls = Calls(monkeypatch)
    config = SandboxConfig(image=busybox_sdk_image, security=SecurityPolicy(
        run_as_user="2000", run_as_group="2000"))
    outs: list[str] = []

    async def one() -> None:
        async with Sandbox(config) as sb:
            outs.append((await sb.execute_command(SHOW)).stdout)

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(one)
    assert calls.actions.count("look at the working directory") == 1, calls.actions
    # One probe for all five (the user's ids are the spec's), and each one's SHOW.
    assert calls.actions.count("start a command") == 1 + 5, calls.actions
    assert calls.actions.count(HAND_OVER) == 5, calls.actions  # each its own container's
    assert [out.split()[:5] for out in outs] == [["2000", "2000", "2000:2000", "755",
                                                  "wrote"]] * 5, outs
