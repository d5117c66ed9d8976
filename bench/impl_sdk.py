"""This SDK, through its public API only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import Box

from sandbox import Command, Sandbox, SandboxConfig


class SDK:
    name = "sandbox SDK"

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def create(self, image: str) -> Any:
        sb = Sandbox(SandboxConfig(image=image))
        await sb.__aenter__()  # create-to-ready: what `async with Sandbox(...)` waits for
        return sb

    async def remove(self, handle: Any) -> None:
        await handle.cleanup()

    async def exec_true(self, box: Box) -> None:
        result = await box.sb.execute_command(["true"])
        assert result.exit_code == 0, result

    async def stream(self, box: Box, nbytes: int) -> int:
        total = 0
        async with box.sb.stream_command(["head", "-c", str(nbytes), "/dev/zero"]) as proc:
            async for chunk in proc:
                total += len(chunk.data)
            await proc.wait()
        return total

    async def stream_uncaptured(self, box: Box, nbytes: int) -> int:
        """stream_command with max_output_bytes=0: chunks only, no CommandResult text."""
        total = 0
        cmd = Command(executable="head", args=["-c", str(nbytes), "/dev/zero"],
                      max_output_bytes=0)
        async with box.sb.stream_command(cmd) as proc:
            async for chunk in proc:
                total += len(chunk.data)
            await proc.wait()
        return total

    async def capture(self, box: Box, nbytes: int) -> int:
        """execute_command keeping every byte: shows output capture is linear in its size."""
        cmd = Command(executable="head", args=["-c", str(nbytes), "/dev/zero"],
                      max_output_bytes=nbytes)
        result = await box.sb.execute_command(cmd)
        assert not result.truncated
        return len(result.stdout_bytes)

    async def write(self, box: Box, path: str, data: bytes) -> None:
        await box.sb.write_file(path, data)

    async def read(self, box: Box, path: str) -> bytes:
        data: bytes = await box.sb.read_file(path)
        return data

    async def put_tree(self, box: Box, src: Path, dest: str) -> None:
        await box.sb.copy_files(str(src), f"sandbox:{dest}")

    async def get_tree(self, box: Box, src: str, dest: Path) -> None:
        await box.sb.copy_files(f"sandbox:{src}", str(dest))

    async def usage(self, box: Box) -> None:
        await box.sb.get_resource_usage()
