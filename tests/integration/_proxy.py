"""A unix-socket proxy in front of the engine that a test can cut, to play a dying engine.

It runs its own event loop in a thread, so a test that blocks its loop (a ``docker`` CLI call)
cannot stall the proxy, and a frozen proxy cannot stall the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

ENGINE_SOCKET = "/var/run/docker.sock"
T = TypeVar("T")


class EngineProxy:
    """Forward every connection to the engine's socket until told otherwise.

    ``cut_connections()`` aborts every open connection but keeps listening (an engine that
    dropped its clients); ``kill()`` also stops listening and removes the socket (an engine
    that died; ``start()`` brings it back); ``freeze()`` keeps connections open but forwards
    nothing more (a hung engine).
    """

    def __init__(self, path: Path, upstream: str = ENGINE_SOCKET) -> None:
        self.path = path
        self.upstream = upstream
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="engine-proxy")
        self._server: asyncio.AbstractServer | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._frozen = False
        self.connections = 0

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    # -- controls, called from the test's thread ---------------------------------------------

    def start(self) -> None:
        if not self._thread.is_alive():
            self._thread.start()
        self._run(self._start())

    def cut_connections(self) -> None:
        self._run(self._cut())

    def freeze(self) -> None:
        self._frozen = True

    def kill(self) -> None:
        self._run(self._kill())

    def close(self) -> None:
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    # -- inside the proxy's loop --------------------------------------------------------------

    async def _start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, path=str(self.path))

    async def _cut(self) -> None:
        for transport in list(self._transports):
            transport.abort()

    async def _kill(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        await self._cut()

    async def _close(self) -> None:
        await self._kill()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._transports.add(c_writer.transport)
        writers = [c_writer]
        try:
            u_reader, u_writer = await asyncio.open_unix_connection(self.upstream)
            writers.append(u_writer)
            self._transports.add(u_writer.transport)
            await asyncio.gather(self._pipe(c_reader, u_writer), self._pipe(u_reader, c_writer))
        except (OSError, asyncio.CancelledError):
            pass  # cut, killed or closed: the transports are aborted below
        finally:
            for w in writers:
                w.transport.abort()
                self._transports.discard(w.transport)
            self._tasks.discard(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(1 << 16)
            if self._frozen:
                await asyncio.Event().wait()  # swallow everything from now on
            if not data:
                # Pass a half-close on: the SDK ends a command's stdin this way.
                if writer.can_write_eof() and not writer.transport.is_closing():
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()


@contextlib.contextmanager
def engine_proxy(directory: Path) -> Iterator[EngineProxy]:
    proxy = EngineProxy(directory / "engine.sock")
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()
