"""The fork server (`_forkserver`): one per SDK process, started on demand and again if it
died; it ends when this process does (it exits when its socket closes). It forks a zygote per
sandbox (`prepare`) and the sandbox's holder (`start_holder`)."""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._channel import Zygote
from ._forkserver import send_message

__all__ = ["prepare", "start_holder"]

_SERVER = Path(__file__).with_name("_forkserver.py")


def _interpreter() -> str:
    """A Python this process may execute (the server needs only the standard library): ours,
    else the one our virtualenv was made from, else the system's."""
    candidates = [sys.executable, getattr(sys, "_base_executable", ""),
                  shutil.which("python3") or "", "/usr/bin/python3"]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), sys.executable)


class Spawner:
    """The fork server: one per SDK process, forking a zygote per sandbox."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._server = subprocess.Popen(
                [_interpreter(), "-I", "-S", str(_SERVER), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, close_fds=True, start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        self.owner = os.getpid()

    def prepare(self, seccomp: bytes, cgroup_procs: Sequence[str] = ()) -> Zygote:
        """A zygote that joins the cgroup whose ``cgroup_procs`` files are given and loads
        ``seccomp`` now, then waits for `Zygote.join`."""
        return self._request({"filter": seccomp.hex(), "cgroup_procs": list(cgroup_procs)},
                             ())

    def holder(self, spec: Mapping[str, Any], fds: Sequence[int]) -> Zygote:
        """Start a sandbox's holder (see `_forkserver._holder`) with ``fds`` as its stdio, 3,
        4, ...; its pid (id 0) and end come back on the returned channel."""
        return self._request({"holder": spec}, fds)

    def _request(self, request: Mapping[str, Any], fds: Sequence[int]) -> Zygote:
        """Send ``request`` with a new socket (and ``fds``); the socket's other end.

        Raises:
            OSError: The fork server is gone.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            send_message(self._sock, request, [theirs.fileno(), *fds])
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return Zygote(ours)

    def close(self) -> None:
        """Close the socket (the server then exits) and reap the server."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        try:
            self._server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()


_spawner: Spawner | None = None
_spawner_lock = threading.Lock()


def _server() -> Spawner:
    """This process's fork server, started on demand (and again if it died); with the lock."""
    global _spawner
    if _spawner is None or _spawner.owner != os.getpid() or _spawner._server.poll() is not None:
        if _spawner is not None and _spawner.owner == os.getpid():
            _spawner.close()
        _spawner = Spawner()
    return _spawner


def _ask(call: Callable[[Spawner], Zygote]) -> Zygote:
    global _spawner
    with _spawner_lock:
        try:
            return call(_server())
        except OSError as exc:  # it died since: once more, on a new one; else say why
            if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN):
                raise
            assert _spawner is not None
            _spawner.close()
            _spawner = None
            return call(_server())


def prepare(seccomp: bytes = b"", cgroup_procs: Sequence[str] = ()) -> Zygote:
    """A zygote from this process's fork server that joins the cgroup of ``cgroup_procs``
    and loads ``seccomp`` (with NoNewPrivs) at once, while bwrap starts (a cgroup v1 move
    took ~2.5 ms per hierarchy here); `Zygote.join` then sends it into its sandbox."""
    return _ask(lambda server: server.prepare(seccomp, cgroup_procs))


def start_holder(spec: Mapping[str, Any], fds: Sequence[int]) -> Zygote:
    """Start a sandbox's holder from the fork server (see `Spawner.holder`)."""
    return _ask(lambda server: server.holder(spec, fds))


def _forget_in_child() -> None:
    """In a fork of this process: drop (close) our copy of the server's socket, so the
    server and its sandboxes still end with the process that started them."""
    global _spawner
    if _spawner is not None:
        with contextlib.suppress(OSError):
            _spawner._sock.close()
        _spawner = None


os.register_at_fork(after_in_child=_forget_in_child)


@atexit.register
def _close_at_exit() -> None:
    if _spawner is not None and _spawner.owner == os.getpid():
        _spawner.close()

