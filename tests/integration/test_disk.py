"""disk_limit and disk_request on the real engine (overlay2 on ext4: no layer quota)."""

from __future__ import annotations

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

MiB = 2**20


async def test_disk_limit_gives_enospc_and_the_sandbox_lives_on() -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, working_dir="/work",
                        security=SecurityPolicy(read_only_root=True),
                        resources=ResourceLimits(disk_limit=4 * MiB))
    async with Sandbox(cfg) as sb:
        for place in ("/work", "/tmp"):
            r = await sb.execute_command(f"dd if=/dev/zero of={place}/big bs=65536 count=256")
            assert r.exit_code != 0
            assert "No space left on device" in r.stderr, r.stderr
            size = await sb.execute_command(f"wc -c < {place}/big")
            assert int(size.stdout) <= 4 * MiB
        # Still alive: it can free space and write again.
        r = await sb.execute_command("rm /work/big && echo again > /work/small && cat /work/small")
        assert (r.exit_code, r.stdout) == (0, "again\n"), r.stderr


async def test_disk_limit_with_a_writable_root_is_refused_here() -> None:
    with pytest.raises(SandboxInitFailed, match="cannot limit a container's disk"):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX,
                                         resources=ResourceLimits(disk_limit=4 * MiB))):
            pass


async def test_disk_request_refuses_a_full_engine_and_passes_a_roomy_one() -> None:
    with pytest.raises(SandboxInitFailed, match="bytes free, less than the"):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX,
                                         resources=ResourceLimits(disk_request=2**60))):
            pass
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX,
                                     resources=ResourceLimits(disk_request=MiB))) as sb:
        assert (await sb.execute_command("echo ok")).stdout == "ok\n"
