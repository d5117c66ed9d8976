"""The errors a new user met name the fix (issue 30): a missing image, use after the block,
a memory limit in the wrong unit."""

from __future__ import annotations

import anyio
import pytest

from sandbox import (
    ConfigError,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SandboxNotRunning,
)

pytestmark = [pytest.mark.usefixtures("engine")]


@pytest.mark.asyncio
async def test_an_image_no_registry_has_names_the_ways_out() -> None:
    """Before: the engine's raw pull error and nothing else. The registry is a closed port on
    loopback, so the pull fails at once and no traffic leaves the machine."""
    sb = Sandbox(SandboxConfig(image="127.0.0.1:9/nosuch/image:1"))
    with pytest.raises(SandboxInitFailed) as ei:
        await sb.initialize()
    text = str(ei.value)
    assert "could not pull image" in text
    for hint in ("pull_policy='never'", "docker login 127.0.0.1:9", "python -m sandbox images",
                 "check the name and tag"):
        assert hint in text, text


@pytest.mark.asyncio
async def test_use_after_the_block_says_to_make_a_new_sandbox() -> None:
    async with Sandbox(SandboxConfig()) as sb:
        pass
    with pytest.raises(SandboxNotRunning) as ei:
        await sb.execute_command("true")
    text = str(ei.value)
    assert "async with" in text and "new Sandbox" in text, text


def test_a_memory_limit_in_the_wrong_unit_says_bytes() -> None:
    for bad in (-1, "512m", 512.5):  # each names the unit
        with pytest.raises(ConfigError) as ei:
            ResourceLimits(memory_limit=bad)  # type: ignore[arg-type]
        assert "bytes" in str(ei.value), str(ei.value)
    # A value only a unit mistake gives (512 meant as MiB): Docker's minimum, in bytes.
    async def start() -> None:
        async with Sandbox(SandboxConfig(resources=ResourceLimits(memory_limit=512))):
            pass

    with pytest.raises(SandboxInitFailed) as exc:
        anyio.run(start)
    assert "512 bytes" in str(exc.value) and "512 << 20" in str(exc.value), str(exc.value)
