"""Leaving a stream_command block early, with output nobody read and the command still
running, kills it promptly: the unread output no longer stalls the kill (it took ~35 s)."""

from __future__ import annotations

import time

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Command, Sandbox, SandboxConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


async def test_break_out_of_a_chatty_command_returns_promptly() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        command = Command.argv(["sh", "-c", "head -c 20000000 /dev/zero; sleep 600"],
                               max_output_bytes=65536)
        with anyio.fail_after(120):
            async with sb.stream_command(command) as proc:
                seen = 0
                async for chunk in proc:
                    seen += len(chunk.data)
                    if seen > 4_000_000:
                        break
                t0 = time.monotonic()
            closed_in = time.monotonic() - t0
        assert closed_in < 10, f"closing took {closed_in:.1f} s"
        assert not proc.running
        # The container's own keeper sleeps 3600; the command's sleep 600 is gone.
        ps = await sb.execute_command("ps -o args")
        assert "sleep 600" not in ps.stdout and "head -c" not in ps.stdout, ps.stdout
