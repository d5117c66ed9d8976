"""A process sandbox's commands start with every signal at its default, as on Docker, even
when the SDK's own process ignores some (run under nohup, say): ignoring a signal survives
fork and exec, and the fork server is the SDK's child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("engine")

REPO = str(Path(__file__).resolve().parents[2])

# Ignores SIGHUP and SIGUSR1 before the SDK starts its fork server, then reports the set of
# ignored signals of a command run plainly (posix_spawn) and of one on a terminal (a fork),
# and how a command that sends itself SIGHUP ends.
_OWNER = textwrap.dedent("""
    import asyncio, json, signal
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

    def ignored(text):
        line = next(l for l in text.splitlines() if l.startswith("SigIgn:"))
        return int(line.split()[1], 16)

    async def main():
        async with Sandbox(SandboxConfig(type="process", image=IMAGE_BUSYBOX)) as sb:
            plain = await sb.execute_command(["grep", "SigIgn", "/proc/self/status"])
            async with sb.stream_command("grep SigIgn /proc/self/status", tty=True) as proc:
                tty = await proc.wait()
            hup = await sb.execute_command(["sh", "-c", "kill -HUP $$; echo alive"])
        print(json.dumps({"plain": ignored(plain.stdout), "tty": ignored(tty.stdout),
                          "hup": [hup.signal, hup.stdout]}))

    asyncio.run(main())
""")


def test_no_signal_the_sdk_ignores_is_ignored_in_a_command() -> None:
    assert sys.platform == "linux"
    done = subprocess.run([sys.executable, "-c", _OWNER], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": REPO}, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    leaked = (1 << (1 - 1)) | (1 << (10 - 1))  # SIGHUP (1) and SIGUSR1 (10): bits 0 and 9
    assert got["plain"] & leaked == 0, hex(got["plain"])
    assert got["tty"] & leaked == 0, hex(got["tty"])
    assert got["hup"] == ["SIGHUP", ""]  # as on Docker: it ends by the signal it sent
