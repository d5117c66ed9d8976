"""A timeout at the process limit: the kill must not need a free pid in the sandbox.

The attacker fills the pids cgroup with a fork loop that retakes every freed pid, so no exec
(the old marker sweep was one) can start in the container, then keeps working past its
timeout. The command must die at its timeout with everything it started, and the result must
never claim a kill that did not happen.
"""

from __future__ import annotations

import anyio
import pytest

from sandbox import IMAGE_PYTHON, Command, KillFailed, ResourceLimits, Sandbox, SandboxConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: Every process forks again whenever a pid is free, so the pids cgroup stays full; the
#: command's own process announces the limit is reached, then sleeps without forking and
#: writes a file 5 s later (the work it must never get to do).
BOMB = r"""
import os, sys, time
def loop():
    while True:
        try:
            if os.fork() == 0:
                os.setsid()  # its own session: not in the command's process group
                continue
        except OSError:
            time.sleep(0.05)
full = False
while not full:
    try:
        if os.fork() == 0:
            os.setsid()
            loop()
    except OSError:
        full = True
sys.stdout.write("full\n"); sys.stdout.flush()
time.sleep(5)
with open("/tmp/late", "w") as f:
    f.write("the command outlived its timeout\n")
"""


@pytest.mark.parametrize("kind", ["docker", "process"])
async def test_a_timeout_at_the_process_limit_kills_everything_and_says_so(kind: str) -> None:
    cfg = SandboxConfig(type=kind, image=IMAGE_PYTHON,
                        resources=ResourceLimits(process_limit=24))
    async with Sandbox(cfg) as sb:
        result = await sb.execute_command(Command(executable="python3", args=("-c", BOMB),
                                                          timeout=2))
        assert "full" in result.stdout, result
        assert result.timed_out and result.signal == "SIGKILL" and result.exit_code == 137, result
        # Nothing of the command is left: only the container's own processes remain, and
        # the file the command would write 5 s after its start never appears.
        check = await sb.execute_command(Command.shell(
            "sleep 6; ls /tmp/late 2>&1; ps -e -o pid=,args=", timeout=30))
        assert "No such file" in check.stdout, check
        assert "python3" not in check.stdout, check


async def test_where_only_the_sweep_can_kill_a_starved_kill_is_reported_not_claimed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As an SDK that is not root (or a remote engine) sees it: only the sweep exec, which
    # cannot start at the process limit. The result must not claim a SIGKILL.
    import sandbox.docker._exec_kill as exec_kill

    monkeypatch.setattr(exec_kill.os, "geteuid", lambda: 1000)
    cfg = SandboxConfig(image=IMAGE_PYTHON, resources=ResourceLimits(process_limit=24))
    async with Sandbox(cfg) as sb:
        with pytest.raises(KillFailed) as caught:
            await sb.execute_command(Command(executable="python3", args=("-c", BOMB),
                                             timeout=2))
        assert "could not be confirmed" in caught.value.message


async def test_a_kill_from_the_host_never_fails_a_command_starting_meanwhile() -> None:
    # The host kill freezes the container for a moment, and runc refuses to exec into a
    # frozen container: commands started meanwhile must wait for it, not fail.
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        outputs: list[str] = []

        async def hammer(n: int) -> None:
            for i in range(15):
                result = await sb.execute_command(f"echo {n}-{i}")
                assert result.stdout == f"{n}-{i}\n", result
                outputs.append(result.stdout)

        async def timeouts() -> None:
            for _ in range(4):
                result = await sb.execute_command(Command.shell("sleep 60", timeout=0.5))
                assert result.timed_out and result.signal == "SIGKILL", result

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(hammer, n)
            tg.start_soon(timeouts)
        assert len(outputs) == 45


@pytest.mark.parametrize("kind", ["docker", "process"])
async def test_a_session_timeout_at_the_process_limit_kills_the_command_not_the_shell(
        kind: str) -> None:
    cfg = SandboxConfig(type=kind, image=IMAGE_PYTHON,
                        resources=ResourceLimits(process_limit=24))
    async with Sandbox(cfg) as sb:
        await sb.write_file("/tmp/bomb.py", BOMB)
        async with sb.session() as sh:
            await sh.run("cd /tmp && X=kept")
            result = await sh.run("python3 bomb.py", timeout=2)
            assert "full" in result.stdout, result
            assert result.timed_out and result.signal == "SIGKILL" and result.exit_code == 137
            # Killed from outside: the shell itself was never in the way, and lives on.
            assert result.error == "command timed out after 2 s", result
            assert (await sh.run('echo "$PWD $X"')).stdout == "/tmp kept\n"
        check = await sb.execute_command(Command.shell(
            "sleep 6; ls /tmp/late 2>&1; ps -e -o pid=,args=", timeout=30))
        assert "No such file" in check.stdout, check
        assert "python3" not in check.stdout, check
