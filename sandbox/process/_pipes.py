"""A command's output pipes (stdout and stderr, or a terminal's master side), read on the
event loop with ``os.read`` from non-blocking fds: one object and one consumer for both.

Why not ``loop.connect_read_pipe``: a transport and a `StreamReader` per pipe cost two
transports, two protocol objects and two pump tasks per command, a measurable share of a
short command's round trip (``["true"]`` ~1.7 ms). Here each pipe has a reader callback that
reads what is there into one queue; the consumer takes chunks in arrival order.

Output is hostile input: what is queued and not yet taken is bounded by `LIMIT` per pipe
(its reader callback is removed until the consumer takes some, so a flood waits in the pipe,
i.e. in the writer), and each read takes at most `CHUNK` bytes.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections import deque

from .._output import StreamName

__all__ = ["CHUNK", "LIMIT", "OutputPipes"]

#: Bytes one ``os.read`` takes.
CHUNK = 64 << 10
#: Bytes a pipe may have queued before its reading pauses until the consumer takes some.
LIMIT = 64 << 10


class OutputPipes:
    """Owns ``fds`` (stream name to a pipe's read end, or a terminal's master side) from
    here on: each is closed at its end of file (or EIO, a terminal whose other side is gone),
    at an error, or by `close`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fds: dict[StreamName, int], *,
                 watch: bool = True) -> None:
        """With ``watch=False`` the pipes are not read until `watch` or `take_ended`."""
        self._loop = loop
        self._fds = dict(fds)  # still open
        # Not read (yet): `_paused`, with its reader callback removed or never added.
        self._paused: set[StreamName] = set() if watch else set(fds)
        self._queued: dict[StreamName, int] = dict.fromkeys(fds, 0)
        self._chunks: deque[tuple[StreamName, bytes]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: OSError | None = None
        try:
            for name, fd in fds.items():
                os.set_blocking(fd, False)
                if watch:
                    loop.add_reader(fd, self._readable, name)
        except BaseException:
            self.close()
            raise

    def watch(self) -> None:
        """Start reading the pipes as they become readable (after ``watch=False``)."""
        for name in [n for n in self._paused if self._queued[n] < LIMIT]:
            self._paused.discard(name)
            self._loop.add_reader(self._fds[name], self._readable, name)

    def take_ended(self) -> None:
        """The command has ended (after ``watch=False``): take what its pipes hold now
        without the event loop; a pipe found at its end is closed with no reader ever
        added (two ``epoll_ctl`` and a loop callback less each), and only one still held
        open (by something left in the background) or over `LIMIT` is watched."""
        for name in list(self._fds):
            while name in self._fds and self._queued[name] < LIMIT:
                if not self._read(name):
                    break
        self.watch()

    def _readable(self, name: StreamName) -> None:
        if name in self._fds:
            self._read(name)

    def _read(self, name: StreamName) -> bool:
        """One read of the pipe ``name``: False when it had nothing (it would block)."""
        fd = self._fds[name]
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return False
        except OSError as exc:
            if exc.errno != errno.EIO:  # EIO: a terminal whose other side is gone
                self._error = self._error or exc
            data = b""
        if data:
            self._chunks.append((name, data))
            self._queued[name] += len(data)
            if self._queued[name] >= LIMIT and name not in self._paused:
                self._paused.add(name)
                self._loop.remove_reader(fd)
        else:
            self._close_one(name)
            if self._fds and self._error is None:
                return True  # the other pipe is still open: `read` would only wait again
        self._wake()
        return True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _close_one(self, name: StreamName) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            if name not in self._paused:
                self._loop.remove_reader(fd)
            self._paused.discard(name)
            try:  # noqa: SIM105 - contextlib.suppress costs three calls per pipe
                os.close(fd)
            except OSError:
                pass

    async def read(self) -> tuple[StreamName, bytes] | None:
        """The next chunk of either pipe, in the order they came; None once every pipe
        ended (or `close` ran).

        Raises:
            OSError: Reading a pipe failed (other than a terminal's EIO); once, after the
                chunks read before it.
        """
        while True:
            if self._chunks:
                name, data = self._chunks.popleft()
                self._queued[name] -= len(data)
                if name in self._paused and self._queued[name] < LIMIT:
                    self._paused.discard(name)
                    fd = self._fds.get(name)
                    if fd is not None:
                        self._loop.add_reader(fd, self._readable, name)
                return name, data
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if not self._fds:
                return None
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def close(self) -> None:
        """Stop reading: close every pipe; `read` returns what was queued, then None.
        Idempotent."""
        for name in list(self._fds):
            self._close_one(name)
        self._wake()
