"""SIGTERM and SIGHUP (GNU timeout, systemd, CI cancellation) clean up like Ctrl-C: the CLI and
a library program using cleanup_on_signals() remove their sandbox, then exit 128+signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX
from sandbox._constants import LABEL_OWNER_PID
from tests.conftest import LABEL, docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

ROOT = Path(__file__).resolve().parents[2]

LIBRARY_CHILD = textwrap.dedent(f"""
    import asyncio
    import sandbox

    async def main() -> None:
        async with sandbox.cleanup_on_signals(), sandbox.Sandbox(
                sandbox.SandboxConfig(image={IMAGE_BUSYBOX!r})) as sb:
            await sb.execute_command("sleep 300")

    asyncio.run(main())
""")


def containers_of(pid: int) -> list[str]:
    """Containers the SDK made for process ``pid``, running or not."""
    return docker_cli("ps", "-aq", "--filter", f"label={LABEL}",
                      "--filter", f"label={LABEL_OWNER_PID}={pid}").split()


def running_sleep(pid: int) -> bool:
    """True once a container of ``pid`` runs the `sleep 300` command."""
    for cid in containers_of(pid):
        top = docker_cli("top", cid, check=False)
        if "sleep 300" in top:
            return True
    return False


async def signal_when_running(argv: list[str], sig: int) -> tuple[int, str]:
    proc = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    try:
        with anyio.fail_after(60):
            while not running_sleep(proc.pid):
                assert proc.poll() is None, proc.communicate()
                await anyio.sleep(0.2)
        proc.send_signal(sig)
        _, err = await anyio.to_thread.run_sync(lambda: proc.communicate(timeout=60))
        return proc.returncode, err.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = containers_of(proc.pid)
        if left:  # what the old behaviour leaves: remove it, the test fails below
            docker_cli("rm", "-f", *left)
            pytest.fail(f"signal {sig} left containers running: {left}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_cli_run_cleans_up_on_sigterm_and_sighup(sig: int) -> None:
    started = time.monotonic()
    code, err = await signal_when_running(
        [sys.executable, "-m", "sandbox", "run", "--image", IMAGE_BUSYBOX, "--",
         "sleep", "300"], sig)
    assert code == 128 + sig, err
    assert f"{signal.Signals(sig).name} received; the sandbox was removed" in err
    assert "Traceback" not in err
    assert time.monotonic() - started < 200  # cleaned up, not waited for sleep 300


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_library_cleanup_on_signals(sig: int) -> None:
    code, err = await signal_when_running([sys.executable, "-c", LIBRARY_CHILD], sig)
    assert code == 128 + sig, err
    assert "Traceback" not in err
