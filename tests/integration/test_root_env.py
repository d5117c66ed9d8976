"""The image's loader variables never reach a root process; commands still see them.

The attacker: the sandbox user, in an image whose ``ENV`` points ``LD_LIBRARY_PATH`` or
``LD_PRELOAD`` at a directory it owns (a conda prefix, its home). It plants a library there
(a copy of one of the image's, so the loader takes it) and waits for a root process to start:
the keepalive's next ``sleep`` (killed here to skip the hour) or one of the SDK's root execs.
A root process that loaded it would map a file under that directory.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import Command, Sandbox, SandboxConfig, remove_checkpoint
from sandbox._backend import ProcessSpec
from sandbox._constants import ROOT_PATH
from tests.conftest import derived_image, docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

LIBS = "/lib/x86_64-linux-gnu"
OWNED = "/opt/userlib"  # the sandbox user's (1000) directory
#: The image's variable, and what the user plants for it (a copy of the image's library).
CASES = {
    "LD_LIBRARY_PATH": (OWNED, f"cp {LIBS}/libc.so.6 {OWNED}/libc.so.6"),
    "LD_PRELOAD": (f"{OWNED}/pre.so", f"cp {LIBS}/libdl.so.2 {OWNED}/pre.so"),
}
#: Every process of uid 0 that maps a file under OWNED, as "pid: cmdline".
ROOT_MAPPERS = (
    f"for d in /proc/[0-9]*; do [ \"$(stat -c %u $d 2>/dev/null)\" = 0 ] && "
    f"grep -q {OWNED} $d/maps 2>/dev/null && echo \"${{d#/proc/}}: $(tr '\\0' ' ' < "
    "$d/cmdline)\"; done; true")
EACH_KEEPALIVE_SLEEP = ("for d in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $d/cmdline "
                        "2>/dev/null)\" = 'sleep 3600 ' ] && {}; done; true")


@pytest.fixture(params=sorted(CASES))
def loader_image(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The python image with a directory the sandbox user owns, named by an ``ENV``
    loader variable; yields the image and the variable's name."""
    name = str(request.param)
    yield from ((tag, name) for tag in derived_image(
        tmp_path, f"sandbox-test-loader-env:{uuid.uuid4().hex[:8]}",
        f"RUN mkdir -p {OWNED} && chown 1000:1000 {OWNED}\nENV {name}={CASES[name][0]}\n"))


def as_root_observer(cid: str, script: str) -> str:
    # The observer itself is told to load nothing (on the old code the container's own
    # environment named the library).
    return docker_cli("exec", "-u", "0", "-e", "LD_LIBRARY_PATH=", "-e", "LD_PRELOAD=", cid,
                      "sh", "-c", script)


async def plant(sb: Sandbox, name: str) -> None:
    """As the sandbox user: plant the library, and see a command of its own load it."""
    value, planting = CASES[name]
    seen = await sb.execute_command(Command.shell(
        f"{planting} && id -u && echo \"${name}\" && grep -c {OWNED} /proc/self/maps"))
    assert seen.stdout.splitlines()[:2] == ["1000", value], seen
    assert int(seen.stdout.splitlines()[2]) > 0, seen  # the loader takes the planted copy


async def test_the_root_keepalive_never_loads_a_library_the_images_env_names(
        loader_image: tuple[str, str]) -> None:
    image, name = loader_image
    async with Sandbox(SandboxConfig(image=image, stats_interval=0)) as sb:
        cid = sb.backend.container_id  # type: ignore[attr-defined]
        await plant(sb, name)
        as_root_observer(cid, EACH_KEEPALIVE_SLEEP.format("kill ${d#/proc/}"))
        await sb.execute_command("sleep 0.3")
        mappers = as_root_observer(cid, ROOT_MAPPERS)
        again = as_root_observer(cid, EACH_KEEPALIVE_SLEEP.format("echo slept"))
    assert mappers == "", mappers  # the old code: "<pid>: sleep 3600"
    assert again.split() == ["slept"]  # the loop sleeps again


async def test_the_sdks_root_execs_never_load_it_and_look_up_only_system_dirs(
        loader_image: tuple[str, str]) -> None:
    image, name = loader_image
    show = (f"cat /proc/$$/maps /proc/self/maps | grep -c {OWNED}; echo \"{name}=${name}\"; "
            "echo \"PATH=$PATH\"; id -u")
    async with Sandbox(SandboxConfig(image=image, stats_interval=0)) as sb:
        await plant(sb, name)
        backend = sb.backend
        # As a helper (the /etc/hosts write, the working dir, a copy as root) and as the
        # session's root-owned shell copy is made (`run_process` with user 0:0).
        by_helper = await backend._helpers.run(  # type: ignore[attr-defined]
            ["/bin/sh", "-c", show], user="0:0")
        by_spec = await backend.run_process(ProcessSpec(
            argv=("/bin/sh", "-c", show), user="0:0", workdir="/"))
        async with sb.session() as session:  # its shell copy was made by root
            in_session = await session.run(f"echo \"${name}\"")
    for shown in (by_helper, by_spec):
        # Neither the root shell nor its child mapped the library; old code: a count, the
        # image's value and PATH.
        assert shown.stdout.splitlines() == ["0", f"{name}=", f"PATH={ROOT_PATH}", "0"], shown
    # The session's commands (the sandbox user's) see the image's value.
    assert in_session.stdout == f"{CASES[name][0]}\n", in_session


async def test_a_checkpoint_keeps_the_images_values_for_commands_and_hides_them_again(
        loader_image: tuple[str, str], prefix: str) -> None:
    image, name = loader_image
    value = CASES[name][0]
    async with Sandbox(SandboxConfig(image=image, stats_interval=0)) as sb:
        point = await sb.checkpoint(f"{prefix}-env")
    try:
        committed = docker_cli("image", "inspect", "-f", "{{json .Config.Env}}", point.image)
        assert f'"{name}={value}"' in committed, committed
        async with Sandbox(point.config) as again:
            cid = again.backend.container_id  # type: ignore[attr-defined]
            await plant(again, name)
            as_root_observer(cid, EACH_KEEPALIVE_SLEEP.format("kill ${d#/proc/}"))
            await again.execute_command("sleep 0.3")
            mappers = as_root_observer(cid, ROOT_MAPPERS)
        assert mappers == "", mappers
    finally:
        await remove_checkpoint(point.name)


def host_mappers(cid: str) -> list[str]:
    """The host pids of the container's processes that map a file under OWNED."""
    pids = docker_cli("top", cid, "-eo", "pid").split()[1:]
    return [pid for pid in pids if OWNED in Path(f"/proc/{pid}/maps").read_text("latin-1")]


async def test_a_guarded_session_shell_never_loads_it_and_its_commands_see_the_value(
        loader_image: tuple[str, str]) -> None:
    # The same attacker against a guarded session: a library its shell loaded would run
    # inside the guard and read every later command's nonces and token. The shell starts
    # without the image's LD_* (`loader_restored`); its commands get them back. Seen from the
    # host (the shell is non-dumpable: no process in the sandbox may read its maps).
    if os.geteuid() != 0:
        pytest.skip("reads the sandbox's processes' maps from the host, as root")
    image, name = loader_image
    async with Sandbox(SandboxConfig(image=image, stats_interval=0)) as sb:
        cid = sb.backend.container_id  # type: ignore[attr-defined]
        await plant(sb, name)
        async with sb.session() as session:
            assert session.guarded
            shown = await session.run(f"echo \"${name}\"; env | grep -c SANDBOX_RESTORE")
            child = await session.run(f"sh -c 'grep -c {OWNED} /proc/self/maps'")
            mappers = host_mappers(cid)
    assert shown.stdout.splitlines() == [CASES[name][0], "0"], shown
    assert int(child.stdout) > 0, child  # a command's own process takes the image's value
    assert mappers == [], mappers  # old code: the session shell's pid
