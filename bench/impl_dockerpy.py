"""docker-py (the blocking ``docker`` package), each call run in a worker thread.

Exec = exec_create, exec_start (reads all output), exec_inspect. Files use the archive API
(put_archive / get_archive), the way docker-py users move files; docker-py has no clean way to
half-close an exec's stdin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import docker
from common import BENCH_LABEL, KEEPALIVE, Box, tar_one, tar_tree, untar_one, untar_tree

T = TypeVar("T")


class DockerPy:
    name = "docker-py"

    def __init__(self, create_kwargs: dict[str, Any], etc_tar: bytes | None = None) -> None:
        self.create_kwargs = create_kwargs
        self.etc_tar = etc_tar  # extracted into /etc before start, as the SDK does
        self.client: docker.DockerClient | None = None
        # A pool as large as the largest concurrent batch, so urllib3 never discards sockets.
        self.limiter = anyio.CapacityLimiter(64)

    async def open(self) -> None:
        self.client = docker.DockerClient(base_url="unix:///var/run/docker.sock",
                                          max_pool_size=64)

    async def close(self) -> None:
        if self.client is not None:
            self.client.close()

    async def _t(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kw),
                                              limiter=self.limiter)

    @property
    def api(self) -> Any:
        assert self.client is not None
        return self.client.api

    async def create(self, image: str) -> Any:
        assert self.client is not None
        labels = {**self.create_kwargs.get("labels", {}), BENCH_LABEL: "docker-py"}
        kwargs = {**self.create_kwargs, "labels": labels}
        container = await self._t(self.client.containers.create, image, KEEPALIVE, **kwargs)
        if self.etc_tar is not None:
            await self._t(container.put_archive, "/etc", self.etc_tar)
        await self._t(container.start)
        return container

    async def remove(self, handle: Any) -> None:
        await self._t(handle.remove, force=True, v=True)

    def _exec(self, cid: str, cmd: list[str]) -> tuple[int, bytes]:
        ex = self.api.exec_create(cid, cmd)
        out = self.api.exec_start(ex["Id"])
        return int(self.api.exec_inspect(ex["Id"])["ExitCode"]), out

    async def exec_true(self, box: Box) -> None:
        code, _ = await self._t(self._exec, box.cid, ["true"])
        assert code == 0

    def _stream(self, cid: str, nbytes: int) -> int:
        ex = self.api.exec_create(cid, ["head", "-c", str(nbytes), "/dev/zero"])
        total = sum(len(chunk) for chunk in self.api.exec_start(ex["Id"], stream=True))
        self.api.exec_inspect(ex["Id"])
        return total

    async def stream(self, box: Box, nbytes: int) -> int:
        return await self._t(self._stream, box.cid, nbytes)

    def _write(self, cid: str, path: str, data: bytes) -> None:
        parent, name = path.rsplit("/", 1)
        assert self.api.put_archive(cid, parent, tar_one(name, data))

    async def write(self, box: Box, path: str, data: bytes) -> None:
        await self._t(self._write, box.cid, path, data)

    def _read(self, cid: str, path: str) -> bytes:
        stream, _ = self.api.get_archive(cid, path)
        return untar_one(b"".join(stream))

    async def read(self, box: Box, path: str) -> bytes:
        return await self._t(self._read, box.cid, path)

    def _put_tree(self, cid: str, src: Path, dest: str) -> None:
        parent, name = dest.rsplit("/", 1)
        assert self.api.put_archive(cid, parent, tar_tree(src, name))

    async def put_tree(self, box: Box, src: Path, dest: str) -> None:
        await self._t(self._put_tree, box.cid, src, dest)

    def _get_tree(self, cid: str, src: str, dest: Path) -> None:
        stream, _ = self.api.get_archive(cid, src)
        untar_tree(b"".join(stream), dest)

    async def get_tree(self, box: Box, src: str, dest: Path) -> None:
        await self._t(self._get_tree, box.cid, src, dest)

    def _usage(self, cid: str) -> None:
        self.api.stats(cid, stream=False, one_shot=True)

    async def usage(self, box: Box) -> None:
        await self._t(self._usage, box.cid)
