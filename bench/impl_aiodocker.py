"""Raw aiodocker: the same engine calls the SDK makes, written the way a careful user would.

Exec = create the exec, start it attached, read all output, inspect the exit code.
Files go through exec too (``cat``, ``tar -x``, ``tar -c``), as the SDK does; stdin is
half-closed with ``write_eof`` on the hijacked transport, the only way aiodocker 0.27 can send
EOF.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiodocker
import anyio
from aiodocker.execs import Exec
from common import BENCH_LABEL, KEEPALIVE, Box, tar_tree, untar_tree


async def _exit_code(ex: Exec) -> int:
    while True:
        info = await ex.inspect()
        if not info["Running"] and info["ExitCode"] is not None:
            return int(info["ExitCode"])
        await asyncio.sleep(0.01)


class RawAiodocker:
    name = "aiodocker"

    def __init__(self, create_body: dict[str, Any], etc_tar: bytes | None = None) -> None:
        self.create_body = create_body
        self.etc_tar = etc_tar  # extracted into /etc before start, as the SDK does
        self.docker: aiodocker.Docker | None = None

    async def open(self) -> None:
        self.docker = aiodocker.Docker()

    async def close(self) -> None:
        if self.docker is not None:
            await self.docker.close()

    def _c(self, box: Box) -> Any:
        assert self.docker is not None
        return self.docker.containers.container(box.cid)

    async def create(self, image: str) -> Any:
        assert self.docker is not None
        body = {**self.create_body, "Image": image, "Cmd": KEEPALIVE}
        body["Labels"] = {**body.get("Labels", {}), BENCH_LABEL: "aiodocker"}
        container = await self.docker.containers.create(body)
        if self.etc_tar is not None:
            await container.put_archive("/etc", self.etc_tar)
        await container.start()
        return container

    async def remove(self, handle: Any) -> None:
        await handle.delete(force=True, v=True)

    async def _run(self, box: Box, cmd: list[str], stdin: bytes | None = None,
                   sink: list[bytes] | None = None) -> int:
        """Run to the end; returns the exit code. Output goes to ``sink`` (or is counted)."""
        ex = await self._c(box).exec(cmd, stdin=stdin is not None)
        received = 0
        async with ex.start(detach=False) as stream:
            if stdin is not None:
                async def feed() -> None:
                    for off in range(0, len(stdin), 1 << 20):
                        await stream.write_in(stdin[off : off + (1 << 20)])
                    stream._resp.connection.transport.write_eof()
                task = asyncio.ensure_future(feed())
            while (msg := await stream.read_out()) is not None:
                if sink is not None and msg.stream == 1:
                    sink.append(msg.data)
                received += len(msg.data)
            if stdin is not None:
                await task
        return await _exit_code(ex)

    async def exec_true(self, box: Box) -> None:
        assert await self._run(box, ["true"]) == 0

    async def stream(self, box: Box, nbytes: int) -> int:
        ex = await self._c(box).exec(["head", "-c", str(nbytes), "/dev/zero"])
        total = 0
        async with ex.start(detach=False) as stream:
            while (msg := await stream.read_out()) is not None:
                total += len(msg.data)
        await _exit_code(ex)
        return total

    async def write(self, box: Box, path: str, data: bytes) -> None:
        code = await self._run(box, ["/bin/sh", "-c", 'cat > "$1"', "w", path], stdin=data)
        assert code == 0

    async def read(self, box: Box, path: str) -> bytes:
        parts: list[bytes] = []
        assert await self._run(box, ["cat", path], sink=parts) == 0
        return b"".join(parts)

    async def put_tree(self, box: Box, src: Path, dest: str) -> None:
        parent, name = dest.rsplit("/", 1)
        archive = await anyio.to_thread.run_sync(tar_tree, src, name)
        code = await self._run(box, ["/bin/sh", "-c", 'mkdir -p "$1" && tar -x -f - -C "$1"',
                                     "t", parent], stdin=archive)
        assert code == 0

    async def get_tree(self, box: Box, src: str, dest: Path) -> None:
        parent, name = src.rsplit("/", 1)
        parts: list[bytes] = []
        assert await self._run(box, ["tar", "-c", "-f", "-", "-C", parent, "--", name],
                               sink=parts) == 0
        await anyio.to_thread.run_sync(untar_tree, b"".join(parts), dest)

    async def usage(self, box: Box) -> None:
        # aiodocker 0.27's stats(stream=False) waits two engine ticks (1-2 s); one-shot is what a
        # careful user would call instead (through the private _query_json: no public option).
        assert self.docker is not None
        await self.docker._query_json(f"containers/{box.cid}/stats",
                                      params={"stream": "0", "one-shot": "1"})
