"""A socket to a zygote or to the fork server, and the replies that come back on it.

Each request gets an id; the replies for it (``pid`` with a pidfd, ``exec``, ``status``, or
``error``; the first three may come in one message) resolve the futures of its `Pending`,
read on the event loop that made the channel (see `_forkserver` for who sends what).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
import threading
import weakref
from collections.abc import Sequence
from typing import Any, TypeVar

from .._errors import CommandStartFailed
from ._forkserver import parse_message, receive_message, send_message

__all__ = ["Pending", "Zygote", "close_fds"]

T = TypeVar("T")
_DONTWAIT = int(socket.MSG_DONTWAIT)



class Pending:
    """One command's messages from the server, handed to the loop that started it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pidfd: asyncio.Future[tuple[int, int]] = loop.create_future()
        self.started: asyncio.Future[tuple[int, str]] = loop.create_future()
        self.status: asyncio.Future[int] = loop.create_future()
        self._wakers: list[asyncio.Future[None]] = []

    async def settled(self, future: asyncio.Future[T]) -> T:
        """The value (or the error) of ``future``, one of this request's, once it is set.

        Like ``asyncio.shield``: a cancelled caller leaves ``future`` as it is (it is shared
        by every waiter, and a start given up still needs the pid to kill it), but the caller
        is woken from `deliver` directly, not through one more callback: a loop iteration
        less for each of a command's awaits (pid, end).
        """
        while not future.done():
            waker = self.loop.create_future()
            self._wakers.append(waker)
            try:
                await waker
            finally:
                if waker in self._wakers:  # not woken (cancelled): `deliver` took the rest
                    self._wakers.remove(waker)
        return future.result()

    def deliver(self, message: dict[str, Any], fds: list[int]) -> None:
        try:
            self._deliver(message, fds)
        finally:
            wakers, self._wakers = self._wakers, []
            for waker in wakers:
                if not waker.done():
                    waker.set_result(None)

    def _deliver(self, message: dict[str, Any], fds: list[int]) -> None:
        if "pid" in message and fds:
            _settle(self.pidfd, (int(message["pid"]), fds[0]), fds[1:], owned=fds[0])
            if "exec" in message:  # posix_spawn's: started too, in the same message
                _settle(self.started, (int(message["exec"]), ""), [])
            if "status" in message:  # and ended already: the zygote saw it at once
                _settle(self.status, int(message["status"]), [])
        elif "exec" in message:
            failed = (int(message["exec"]), str(message.get("step", "")))
            if message.get("final") and not self.pidfd.done():  # it never ran
                self.pidfd.set_exception(OSError(failed[0], os.strerror(failed[0])))
            _settle(self.started, failed, fds)
        elif "status" in message:
            _settle(self.status, int(message["status"]), fds)
        else:
            error = CommandStartFailed("the process backend's spawner could not start the "
                                       "command", details=str(message.get("error")))
            for future in (self.pidfd, self.started, self.status):
                if not future.done():
                    future.set_exception(error)
                    future.exception()  # retrieved: a caller may wait on another one only
            close_fds(fds)


def _settle(future: asyncio.Future[Any], value: Any, extra: list[int],
            owned: int = -1) -> None:
    close_fds(extra)
    if future.done():
        close_fds([owned] if owned >= 0 else [])
        return
    future.set_result(value)


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        try:  # noqa: SIM105 - contextlib.suppress costs three calls per descriptor
            os.close(fd)
        except OSError:
            pass


#: Every open channel, so a fork of this process can close its copies (`_forget_in_child`).
_open: weakref.WeakSet[Zygote] = weakref.WeakSet()


def _forget_in_child() -> None:
    for channel in list(_open):
        with contextlib.suppress(OSError):
            channel._sock.close()
    _open.clear()


os.register_at_fork(after_in_child=_forget_in_child)


class Zygote:
    """The SDK's end of one sandbox's zygote; its replies are read on the event loop that
    made it (a reader thread's start alone cost ~1 ms of a create here)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._ids = itertools.count(1)
        self._pending: dict[int, Pending] = {}
        self._lock = threading.Lock()
        self._failure = ""
        self._loop = asyncio.get_running_loop()
        #: Resolved once the zygote is in its sandbox (see `Zygote.join`).
        self.joined: asyncio.Future[None] = self._loop.create_future()
        self._loop.add_reader(sock.fileno(), self._readable)
        _open.add(self)

    def join(self, namespaces: Sequence[tuple[str, int]], *, cgroup_procs: Sequence[str],
             ids: tuple[int, int] | None, rlimits: Sequence[tuple[int, int, int]] = ()
             ) -> None:
        """Send the zygote into the sandbox: its cgroup and namespaces (user namespace fds
        included), then ``ids`` (None: keep ours, which the user namespace maps), then
        ``rlimits`` (every command inherits them). A failure comes back as the failure of
        the first command."""
        message = {"ns": [name for name, _ in namespaces], "cgroup_procs": list(cgroup_procs),
                   "uid": ids[0] if ids else None, "gid": ids[1] if ids else None,
                   "rlimits": [list(r) for r in rlimits]}
        try:
            send_message(self._sock, message, [fd for _, fd in namespaces])
        except OSError as exc:
            raise CommandStartFailed("the process sandbox's spawner is gone",
                                     details=self._failure or str(exc)) from exc

    def expect(self, ident: int) -> Pending:
        """The replies to a request the zygote made itself (0: the holder)."""
        pending = self._pending[ident] = Pending(self._loop)
        return pending

    def submit(self, request: dict[str, Any], fds: Sequence[int]) -> Pending:
        """Send one request; its replies go to the returned `Pending` on the running loop."""
        pending = Pending(asyncio.get_running_loop())
        ident = next(self._ids)
        with self._lock:
            if self._failure:
                raise CommandStartFailed("the process sandbox's spawner is gone",
                                         details=self._failure)
            self._pending[ident] = pending
        try:
            send_message(self._sock, {**request, "id": ident}, fds)
        except OSError as exc:
            with self._lock:
                self._pending.pop(ident, None)
            raise CommandStartFailed("the process sandbox's spawner is gone",
                                     details=self._failure or str(exc)) from exc
        return pending

    def _readable(self) -> None:
        while True:
            fds: list[int] = []
            try:
                data, fds = receive_message(self._sock, 1 << 16, _DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._loop.remove_reader(self._sock.fileno())
                self._fail_all("the spawner ended")
                return
            self._dispatch(data, fds)

    def _dispatch(self, data: bytes, fds: list[int]) -> None:
        try:
            message = dict(parse_message(data, fds))
            ident = message.get("id")
        except (OSError, ValueError, TypeError):
            close_fds(fds)
            return
        if message.get("joined") and ident is None:
            close_fds(fds)
            if not self.joined.done():
                self.joined.set_result(None)
            return
        if ident is None:  # the zygote could not enter the sandbox, or a bad request
            close_fds(fds)
            self._failure = str(message.get("error", "unknown"))
            self._not_joined()
            return
        with self._lock:
            pending = self._pending.get(int(ident))
            if pending is not None and ("status" in message or "error" in message
                                        or message.get("final")):
                self._pending.pop(int(ident), None)
        if pending is None:
            close_fds(fds)
        elif pending.loop is self._loop:
            pending.deliver(message, fds)
        else:
            with contextlib.suppress(RuntimeError):  # that loop was closed meanwhile
                pending.loop.call_soon_threadsafe(pending.deliver, message, fds)

    def _not_joined(self) -> None:
        if not self.joined.done():
            self.joined.set_exception(CommandStartFailed(
                "the process sandbox's spawner could not enter it", details=self._failure))
            self.joined.exception()  # retrieved: only a spare's making waits for it

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._failure = self._failure or why
            pending, self._pending = list(self._pending.values()), {}
        with contextlib.suppress(RuntimeError):  # that loop was closed meanwhile
            self._loop.call_soon_threadsafe(self._not_joined)
        for entry in pending:
            with contextlib.suppress(RuntimeError):
                entry.loop.call_soon_threadsafe(entry.deliver, {"error": self._failure}, [])

    @property
    def failed(self) -> bool:
        """True once the zygote is known to be gone or unable to enter its sandbox."""
        return bool(self._failure)

    def close(self) -> None:
        """Close the socket: the zygote exits (its commands are the sandbox's to kill); whoever
        still waits on a reply is told (a process's end is then seen on its pidfd)."""
        if self._pending:
            self._fail_all("the spawner was closed")
        _open.discard(self)
        if not self._loop.is_closed() and self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()

