"""The ``docker`` CLI, one process per operation (its start-up cost is part of what it costs).

Exec = ``docker exec``. Files: ``docker exec -i ... cat >`` to write and ``docker exec ... cat``
to read (the same engine calls as the SDK), ``docker cp`` for the tree, in and out (archive API).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import anyio
from common import BENCH_LABEL, KEEPALIVE, Box


async def _docker(*args: str, stdin: bytes | None = None, keep: bool = True) -> bytes:
    result = await anyio.run_process(
        ["docker", *args], input=stdin,
        stdout=subprocess.PIPE if keep else subprocess.DEVNULL, check=True,
    )
    return result.stdout or b""


class DockerCLI:
    name = "docker CLI"

    def __init__(self, run_flags: list[str]) -> None:
        self.run_flags = run_flags

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def create(self, image: str) -> Any:
        out = await _docker("run", "-d", "--label", f"{BENCH_LABEL}=cli", *self.run_flags,
                            image, *KEEPALIVE)
        return out.decode().strip()

    async def remove(self, handle: Any) -> None:
        await _docker("rm", "-f", "-v", handle, keep=False)

    async def exec_true(self, box: Box) -> None:
        await _docker("exec", box.cid, "true", keep=False)

    async def stream(self, box: Box, nbytes: int) -> int:
        # Output to /dev/null: the CLI's best case (no reader on our side).
        await _docker("exec", box.cid, "head", "-c", str(nbytes), "/dev/zero", keep=False)
        return nbytes

    async def write(self, box: Box, path: str, data: bytes) -> None:
        await _docker("exec", "-i", box.cid, "/bin/sh", "-c", 'cat > "$1"', "w", path,
                      stdin=data, keep=False)

    async def read(self, box: Box, path: str) -> bytes:
        return await _docker("exec", box.cid, "cat", path)

    async def put_tree(self, box: Box, src: Path, dest: str) -> None:
        await _docker("cp", str(src), f"{box.cid}:{dest}", keep=False)

    async def get_tree(self, box: Box, src: str, dest: Path) -> None:
        await _docker("cp", f"{box.cid}:{src}", str(dest), keep=False)

    async def usage(self, box: Box) -> None:
        await _docker("stats", "--no-stream", "--format", "{{json .}}", box.cid)
