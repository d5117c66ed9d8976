"""A command line of over 1 MiB (many arguments) reaches the sandbox whole, warns nothing, and
leaves the sandbox usable (the engine's event for such an exec is a line of over 1 MiB)."""

from __future__ import annotations

import anyio
import pytest

from sandbox import Sandbox, SandboxConfig

pytestmark = pytest.mark.usefixtures("engine")


@pytest.mark.asyncio
async def test_a_command_line_over_one_mib_runs() -> None:
    # Warnings are errors in this suite: before the fix, aiohttp's ResourceWarning about a
    # large raw body failed the call.
    chunk = "x" * (64 * 1024)
    async with Sandbox(SandboxConfig()) as sb:
        result = await sb.execute_command(["printf", "%s", *([chunk] * 17)])
        assert result.success, result.stderr
        assert result.stdout == chunk * 17
        # Before the fix the container-event watcher broke on that exec's event and the
        # sandbox was marked failed: the next command raised SandboxNotRunning.
        await anyio.sleep(1)
        assert (await sb.execute_command(["true"])).success
