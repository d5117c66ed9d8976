"""A pool with max_uses > 1, attacked by its first user: nothing user A leaves behind (a
process of any uid, a planted module, a widened directory, an xattr, a default ACL) may reach
user B. Each attack ran against the reset of the time before these tests (issue 25, item 2)
and reached B; now the sandbox is either reset to what a fresh one is, or replaced."""

from __future__ import annotations

import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import IMAGE_PYTHON, Command, Sandbox, SandboxConfig, SandboxPool
from sandbox.docker import _checkpoint
from tests.conftest import derived_image, docker_cli, ours

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

PYTHON = SandboxConfig(image=IMAGE_PYTHON, stats_interval=0)


def uids_running(sb: Sandbox) -> list[str]:
    """The uid of every process in ``sb``'s container, as the host sees it (docker top)."""
    out = docker_cli("top", sb.backend.container_id, "-eo", "pid,uid,args")
    return [line.split()[1] for line in out.splitlines()[1:] if line.strip()]


def daemon(body: str) -> list[str]:
    """argv of a python3 that detaches (double fork, new session, no stdio) and runs
    ``body``: it outlives the command, and writes nothing until ``body`` does."""
    code = ("import os, sys, time\n"
            "if os.fork(): sys.exit(0)\n"
            "os.setsid()\n"
            "if os.fork(): os._exit(0)\n"
            "fd = os.open(os.devnull, os.O_RDWR)\n"
            "for i in (0, 1, 2): os.dup2(fd, i)\n" + textwrap.dedent(body))
    return ["python3", "-c", code]


#: Waits, as quiet as can be, for the next user's secret.
THIEF = """
while True:
    try:
        stolen = open("/workspace/secret").read()
    except OSError:
        time.sleep(0.2)
"""


async def test_a_dormant_process_of_nobody_never_meets_the_next_user() -> None:
    """User A leaves a detached process running as nobody (a Command user, and
    allow_write=False), which waits for user B's secret."""
    async with SandboxPool(PYTHON, min_ready=1, max_size=1, max_uses=5) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            for command in (Command.argv(daemon(THIEF), user="nobody"),
                            Command.argv(daemon(THIEF), allow_write=False)):
                assert (await sb.execute_command(command)).exit_code == 0
            assert uids_running(sb).count("65534") == 2  # the attack is in place
        async with pool.acquire() as sb:
            assert "65534" not in uids_running(sb)
            assert sb.id != first  # not reset: replaced, since another uid ran in it
    assert ours("container") == []


async def test_a_background_process_of_the_sandbox_user_is_killed() -> None:
    """setsid, nohup, a double fork and a non-dumpable process (whose /proc entry reads as
    root's): each detaches from the command that started it."""
    hide = ("import ctypes, os, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "
            "open('/tmp/hidden', 'w').close(); time.sleep(1004)")
    script = ("setsid sleep 1001 </dev/null >/dev/null 2>&1 & "
              "nohup sleep 1002 </dev/null >/dev/null 2>&1 & "
              "( sleep 1003 </dev/null >/dev/null 2>&1 & ) ; "
              f"setsid python3 -c \"{hide}\" </dev/null >/dev/null 2>&1 & "
              "while [ ! -e /tmp/hidden ]; do sleep 0.02; done")
    async with SandboxPool(PYTHON, min_ready=1, max_size=1, max_uses=3) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            assert (await sb.execute_command(script)).exit_code == 0
            top = docker_cli("top", sb.backend.container_id, "-eo", "pid,args")
            assert all(f"10{n}" in top for n in ("01", "02", "03", "04")), top
        async with pool.acquire() as sb:
            assert sb.id == first  # the same uid only: reset, and reused
            top = docker_cli("top", sb.backend.container_id, "-eo", "pid,args")
            assert not any(f"10{n}" in top for n in ("01", "02", "03", "04")), top
    assert ours("container") == []


#: Waits for the next user's secret, then plants a json module where it will be imported.
PLANTER = """
while not os.path.exists("/workspace/secret"):
    time.sleep(0.05)
with open("/workspace/json.py", "w") as f:
    f.write("print('PWNED', open('/workspace/secret').read())")
"""


async def test_a_module_planted_for_the_next_user_is_never_imported() -> None:
    """User A opens the working directory (first on sys.path for ``python3 -c``) to
    everyone, and leaves a process as nobody that plants json.py there once B writes."""
    async with SandboxPool(PYTHON, min_ready=1, max_size=1, max_uses=5) as pool:
        async with pool.acquire() as sb:
            assert (await sb.execute_command("chmod 777 /workspace")).exit_code == 0
            assert (await sb.execute_command(Command.argv(daemon(PLANTER), allow_write=False))
                    ).exit_code == 0
        async with pool.acquire() as sb:
            # B works a while in its sandbox, then uses the standard library.
            result = await sb.execute_command(
                "echo s3cret > secret && sleep 1 && "
                "python3 -c 'import json; print(json.__file__)'")
            assert "PWNED" not in result.stdout, result.stdout
            assert result.stdout.strip().startswith("/usr/lib/python3"), result.stdout
    assert ours("container") == []


#: Each leaves the sandbox user's own directories other than a fresh sandbox has them.
ACL_DEFAULT_RWX = (b"\x02\x00\x00\x00" + b"".join(
    tag.to_bytes(2, "little") + (7).to_bytes(2, "little") + (0xFFFFFFFF).to_bytes(4, "little")
    for tag in (0x01, 0x04, 0x20)))  # user::rwx, group::rwx, other::rwx
ATTACKS = {
    "chmod 777": "import os; os.chmod('/workspace', 0o777); os.chmod('/home/sandbox', 0o777)",
    "user xattr": "import os; os.setxattr('/workspace', 'user.x', b'planted'); "
                  "os.setxattr('/home/sandbox', 'user.x', b'planted')",
    "default ACL": f"import os; os.setxattr('/workspace', 'system.posix_acl_default', "
                   f"{ACL_DEFAULT_RWX!r})",
}
PROBE = """
import os
for d in ("/workspace", "/home/sandbox"):
    print(d, oct(os.stat(d).st_mode & 0o7777), sorted(os.listxattr(d)))
open("/workspace/new", "w").close()
print("new", oct(os.stat("/workspace/new").st_mode & 0o777))
"""


@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_baseline_directories_come_back_as_a_fresh_sandbox_has_them(attack: str) -> None:
    async with Sandbox(PYTHON) as fresh:
        expected = (await fresh.execute_command(["python3", "-c", PROBE])).stdout
    assert "0o755 []" in expected and "new 0o644" in expected, expected
    async with SandboxPool(PYTHON, min_ready=1, max_size=1, max_uses=5) as pool:
        async with pool.acquire() as sb:
            assert (await sb.execute_command(["python3", "-c", ATTACKS[attack]])).success
            assert (await sb.execute_command(["python3", "-c", PROBE])).stdout != expected
        async with pool.acquire() as sb:
            assert (await sb.execute_command(["python3", "-c", PROBE])).stdout == expected
    assert ours("container") == []


VOLUME_IMAGE = "sandbox-test-pool-volume:latest"


@pytest.fixture
def volume_image(tmp_path: Path) -> Iterator[str]:
    """An image like sandbox-python with a ``VOLUME /data`` everyone may write (1777)."""
    yield from derived_image(tmp_path, VOLUME_IMAGE,
                              "RUN mkdir -p /data && chmod 1777 /data\nVOLUME /data\n")


async def test_an_image_volume_is_never_handed_to_the_next_user(volume_image: str) -> None:
    """User A plants json.py in the image's VOLUME: the engine's change list omits mounts
    and the host-side walk stays on the root's device, so a reset cannot see it."""
    config = SandboxConfig(image=volume_image, stats_interval=0)
    async with SandboxPool(config, min_ready=1, max_size=1, max_uses=2) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            plant = "echo \"print('PWNED')\" > /data/json.py && ls /data"
            assert "json.py" in (await sb.execute_command(plant)).stdout
        async with pool.acquire() as sb:
            assert sb.id != first  # not reused: a volume is not the reset's to verify
            assert "json.py" not in (await sb.execute_command("ls /data")).stdout
    assert ours("container") == []


async def test_a_huge_change_list_is_not_read_whole(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """User A makes many files with long paths: the reset reads the engine's change list
    only up to a cap (the whole list cost the SDK hundreds of MiB), and over it the
    sandbox is replaced."""
    caplog.set_level(logging.INFO, logger="sandbox")
    async with SandboxPool(PYTHON, min_ready=1, max_size=1, max_uses=3) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            monkeypatch.setattr(_checkpoint, "MAX_CHANGES_BYTES", 64 << 10)
            many = ("import os\nfor i in range(2000):\n"
                    "    open('/tmp/' + 'x' * 200 + str(i), 'w').close()")
            assert (await sb.execute_command(["python3", "-c", many])).success
        async with pool.acquire() as sb:
            assert sb.id != first
            assert "x" * 200 not in (await sb.execute_command("ls /tmp")).stdout
    assert "too many changes" in caplog.text
    assert ours("container") == []


OPEN_TOOLS_IMAGE = "sandbox-test-pool-open-tools:latest"


@pytest.fixture
def open_tools_image(tmp_path: Path) -> Iterator[str]:
    """An image like sandbox-python whose /usr/local/bin everyone may write (some do)."""
    yield from derived_image(tmp_path, OPEN_TOOLS_IMAGE, "RUN chmod 777 /usr/local/bin\n")


#: A chmod that, run by the reset's wipe, leaves a mark (then does chmod's work).
FAKE_CHMOD = "#!/bin/sh\ntouch /home/sandbox/planted-chmod-ran\nexec /bin/chmod \"$@\"\n"


async def test_a_planted_tool_is_never_run_by_the_reset(
        open_tools_image: str, caplog: pytest.LogCaptureFixture) -> None:
    """User A puts a chmod first on the reset's old PATH (/usr/local/bin): the wipe ran it.
    Now the wipe's PATH holds only root's directories, and the plant is simply wiped."""
    caplog.set_level(logging.INFO, logger="sandbox")
    config = SandboxConfig(image=open_tools_image, stats_interval=0)
    async with SandboxPool(config, min_ready=1, max_size=1, max_uses=3) as pool:
        async with pool.acquire() as sb:
            first = sb.id
            await sb.write_file("/usr/local/bin/chmod", FAKE_CHMOD)
            assert (await sb.execute_command("chmod +x /usr/local/bin/chmod")).success
        async with pool.acquire() as sb:
            assert "planted-chmod-ran" not in caplog.text, caplog.text
            assert sb.id == first  # wiped, and reused: the plant never ran
            ls = (await sb.execute_command("ls /usr/local/bin /home/sandbox")).stdout
            assert "chmod" not in ls and "planted" not in ls, ls
    assert ours("container") == []


async def test_a_sandbox_whose_tool_directories_are_open_is_not_reused(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An image whose /usr/sbin (on the reset's PATH, before /usr/bin) everyone may write:
    A could plant a chmod there that the wipe would run, so no sandbox of it is reused."""
    (tmp_path / "Dockerfile").write_text(f"FROM {IMAGE_PYTHON}\nRUN chmod 1777 /usr/sbin\n")
    docker_cli("build", "-q", "-t", OPEN_TOOLS_IMAGE, str(tmp_path))
    try:
        config = SandboxConfig(image=OPEN_TOOLS_IMAGE, stats_interval=0)
        async with SandboxPool(config, min_ready=1, max_size=1, max_uses=3) as pool:
            async with pool.acquire() as sb:
                first = sb.id
            async with pool.acquire() as sb:
                assert sb.id != first
        assert "/usr/sbin, where the reset finds its tools" in caplog.text, caplog.text
    finally:
        docker_cli("rmi", "-f", OPEN_TOOLS_IMAGE, check=False)
    assert ours("container") == []
