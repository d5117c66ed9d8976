"""Resource limits proven by their effect inside a real container (runc, cgroup v1)."""

from __future__ import annotations

import logging
import time

import aiodocker
import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    ResourceLimitExceeded,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    SandboxNotRunning,
    SandboxStatus,
    SecurityPolicy,
)
from tests.integration._scripts import EAGAIN, FORK_UNTIL_REFUSED

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

MiB = 1 << 20


def sandbox(image: str = IMAGE_BUSYBOX, runtime: str = "", **limits: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=image, runtime=runtime,
                                 resources=ResourceLimits(**limits)))  # type: ignore[arg-type]


async def wait_for_status(sb: Sandbox, status: SandboxStatus, within: float) -> None:
    with anyio.fail_after(within):
        while True:
            if sb.status is status:
                return
            await anyio.sleep(0.05)


async def run(sb: Sandbox, script: str, **kw: object) -> str:
    """Run a shell script that must succeed; return its stdout."""
    result = await sb.execute_command(Command.shell(script, **kw))  # type: ignore[arg-type]
    assert result.success, result
    return result.stdout


async def test_memory_limit_oom_kills_the_command_and_the_sandbox_stays_usable() -> None:
    async with sandbox(IMAGE_PYTHON, memory_limit=64 * MiB, memory_request=32 * MiB) as sb:
        cgroup = await run(sb, "cd /sys/fs/cgroup/memory && cat memory.limit_in_bytes "
                               "memory.memsw.limit_in_bytes memory.soft_limit_in_bytes")
        assert cgroup.split() == [str(64 * MiB), str(64 * MiB), str(32 * MiB)]
        # bytearray(n) zero-fills, so every page is touched: 200 MiB cannot fit in 64.
        result = await sb.execute_command(
            ["python3", "-c", "b = bytearray(200 * 2**20); print('survived')"])
        assert result.oom_killed and result.exit_code == 137 and result.signal == "SIGKILL"
        assert "survived" not in result.stdout and not result.timed_out
        assert "out-of-memory" in result.error
        # Under the limit works, and the sandbox itself is untouched.
        result = await sb.execute_command(
            ["python3", "-c", "b = bytearray(16 * 2**20); print('ok')"])
        assert result.stdout == "ok\n" and not result.oom_killed
        assert sb.status is SandboxStatus.RUNNING
        assert (await sb.get_info()).oom_killed is False


async def test_cpu_limit_sets_the_cfs_quota_and_throttles() -> None:
    async with sandbox(IMAGE_PYTHON, cpu_limit=0.25, cpu_request=0.25) as sb:
        cgroup = await run(sb, "cd /sys/fs/cgroup/cpu && cat cpu.cfs_quota_us cpu.cfs_period_us "
                               "cpu.shares")
        assert cgroup.split() == ["25000", "100000", "256"]
        # Half a CPU second at a quarter of a CPU takes two seconds of wall time (or more,
        # on a busy host).
        burn = "import time\nt = time.time()\nwhile time.process_time() < 0.5: pass\n" \
               "print(time.time() - t)"
        assert float(await run(sb, f"python3 -c '{burn}'")) > 1.7


async def test_process_limit_contains_a_fork_bomb() -> None:
    async with sandbox(IMAGE_PYTHON, process_limit=64) as sb:
        assert (await run(sb, "cat /sys/fs/cgroup/pids/pids.max")).strip() == "64"
        count, err = (await run(sb, f"python3 -c '{FORK_UNTIL_REFUSED}'")).split()
        assert int(err) == EAGAIN and 20 < int(count) < 64
        start = time.monotonic()
        # The leader stays, so the timeout, not the leader's exit, ends the command.
        bomb = await sb.execute_command(Command.shell("b() { b | b & }; b; sleep 60", timeout=3))
        assert time.monotonic() - start < 40
        assert bomb.timed_out and bomb.signal == "SIGKILL"
        # The sweep got every bomb process; the sandbox answers and can fork again.
        with anyio.fail_after(20):
            while True:
                ps = await sb.execute_command("ps -e -o stat=,args=")
                if ps.success and "b() {" not in ps.stdout:
                    break
                await anyio.sleep(0.5)
        assert (await run(sb, "echo alive")) == "alive\n"
        assert sb.status is SandboxStatus.RUNNING


async def test_file_limit_sets_nofile() -> None:
    async with sandbox(IMAGE_PYTHON, file_limit=100) as sb:
        assert (await run(sb, "ulimit -n; ulimit -Hn")).split() == ["100", "100"]
        out = await run(sb, "python3 -c \"\nfiles = []\ntry:\n"
                            "    while True: files.append(open('/dev/null'))\n"
                            "except OSError as e: print(len(files), e.errno)\"")
        count, err = map(int, out.split())
        assert err == 24 and 90 <= count < 100  # EMFILE, after stdin/out/err and python's own


async def test_cpu_time_limit_kills_a_busy_loop() -> None:
    async with sandbox(cpu_time_limit=1) as sb:
        assert (await run(sb, "ulimit -St; ulimit -Ht")).split() == ["1", "2"]
        result = await sb.execute_command(Command.shell("while :; do :; done", timeout=30))
        assert result.signal == "SIGXCPU" and result.exit_code == 128 + 24
        assert not result.timed_out and "cpu_time_limit of 1 s" in result.error
        # Ignoring SIGXCPU buys one more second, then the hard limit's SIGKILL.
        result = await sb.execute_command(
            Command.shell("trap '' XCPU; while :; do :; done", timeout=60))
        assert result.signal == "SIGKILL" and not result.timed_out


async def test_wall_time_limit_stops_the_sandbox() -> None:
    async with sandbox(wall_time_limit=2) as sb:
        start = time.monotonic()
        # A command still running when the wall clock strikes ends with the container.
        result = await sb.execute_command(Command.shell("sleep 30", timeout=60))
        elapsed = time.monotonic() - start
        assert 1.5 < elapsed < 20 and not result.success
        await wait_for_status(sb, SandboxStatus.FAILED, 5)
        info = await sb.get_info()
        assert "TimeoutExceeded" in info.status_reason
        assert "wall_time_limit" in info.status_reason
        with pytest.raises(SandboxNotRunning, match="wall_time_limit"):
            await sb.execute_command("echo too late")


async def test_under_gvisor_going_over_memory_fails_the_sandbox_without_hanging() -> None:
    """gVisor OOM-kills the whole sandbox, and its exec stream stays open: no hang."""
    async with sandbox(IMAGE_PYTHON, runtime="runsc", memory_limit=64 * MiB) as sb:
        ok = await sb.execute_command(["python3", "-c", "b = bytearray(16 << 20); print('ok')"])
        assert ok.stdout == "ok\n"
        # The engine does not always report OOMKilled for a gVisor sandbox (it did in most
        # runs): then the sandbox is just not running, with the exit code as the reason.
        gone = (ResourceLimitExceeded, SandboxNotRunning)
        with anyio.fail_after(30), pytest.raises(gone, match=r"out-of-memory|code 137") as ei:
            r = await sb.execute_command(["python3", "-c", "b = bytearray(200 << 20)"])
            pytest.fail(f"a result instead of an error: {r}")
        assert sb.status is SandboxStatus.FAILED
        assert (await sb.get_info()).oom_killed is isinstance(ei.value, ResourceLimitExceeded)
        with pytest.raises(type(ei.value)):
            await sb.execute_command("true")


async def test_pausing_does_not_escape_the_wall_time_limit() -> None:
    async with sandbox(wall_time_limit=2) as sb:
        docker = aiodocker.Docker()
        try:
            container = await docker.containers.get(sb.backend.container_id or "")
            await container.pause()
            await wait_for_status(sb, SandboxStatus.PAUSED, 3)
            await wait_for_status(sb, SandboxStatus.FAILED, 6)
            with anyio.fail_after(5):
                while True:
                    if not (await container.show())["State"]["Running"]:
                        break
                    await anyio.sleep(0.1)
        finally:
            await docker.close()
        assert "wall_time_limit" in (await sb.get_info()).status_reason


async def test_oom_of_the_main_process_fails_the_sandbox(caplog: pytest.LogCaptureFixture) -> None:
    """The kernel's OOM killer picks the main process when it is the best victim.

    The memory goes to a tmpfs file (charged to the sandbox, in no process's RSS), and the
    main processes get oom_score_adj 1000 (raising it needs no privilege), so the kernel
    kills the keep-alive rather than the command that filled the memory.
    """
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    config = SandboxConfig(image=IMAGE_PYTHON, resources=ResourceLimits(memory_limit=48 * MiB),
                           security=SecurityPolicy(log_security_events=True), stats_interval=0)
    async with Sandbox(config) as sb:
        await run(sb, 'for f in /proc/[0-9]*/oom_score_adj; do [ "$f" = /proc/$$/oom_score_adj ]'
                      ' || echo 1000 > "$f" 2>/dev/null; done; cat /proc/1/oom_score_adj')
        await sb.execute_command("head -c 60M /dev/zero > /dev/shm/fill")
        await wait_for_status(sb, SandboxStatus.FAILED, 10)
        info = await sb.get_info()
        assert info.oom_killed and "OOMKilled" in info.status_reason
        with pytest.raises(ResourceLimitExceeded, match="out-of-memory"):
            await sb.execute_command("echo too late")
    hits = [r.audit for r in caplog.records if r.name == "sandbox.audit"]
    assert any(h["limit"] == "memory" and "OOMKilled" in h["detail"] for h in hits)
