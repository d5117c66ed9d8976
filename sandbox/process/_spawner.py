"""The SDK's side of the fork server (`_forkserver`): one server per SDK process, and a
zygote per sandbox.

`prepare` asks the server for a sandbox's zygote (it loads the sandbox's seccomp filter while
bwrap starts the sandbox), `Zygote.join` sends it in; `start` sends it one command and returns a
`RemoteProcess`: the command's pipes as asyncio streams, its end as a future, signals through
a pidfd (never a pid that could have been reused). The server is started on first use, again
if it died, and ends with this process (it exits when its socket closes); a zygote ends when
its sandbox closes its socket.
"""

from __future__ import annotations

import array
import asyncio
import atexit
import contextlib
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import CommandStartFailed

__all__ = ["RemoteProcess", "SandboxSpawner", "Zygote", "prepare", "start"]

_SERVER = Path(__file__).with_name("_forkserver.py")
_FD_SPACE = socket.CMSG_SPACE(16 * array.array("i").itemsize)


class _Pending:
    """One command's messages from the server, handed to the loop that started it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pidfd: asyncio.Future[tuple[int, int]] = loop.create_future()
        self.started: asyncio.Future[tuple[int, str]] = loop.create_future()
        self.status: asyncio.Future[int] = loop.create_future()

    def deliver(self, message: dict[str, Any], fds: list[int]) -> None:
        if "pid" in message and fds:
            _settle(self.pidfd, (int(message["pid"]), fds[0]), fds[1:], owned=fds[0])
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
            _close(fds)


def _settle(future: asyncio.Future[Any], value: Any, extra: list[int],
            owned: int = -1) -> None:
    _close(extra)
    if future.done():
        _close([owned] if owned >= 0 else [])
        return
    future.set_result(value)


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


class Zygote:
    """The SDK's end of one sandbox's zygote; its replies are read on the event loop that
    made it (a reader thread's start alone cost ~1 ms of a create here)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._lock = threading.Lock()
        self._failure = ""
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(sock.fileno(), self._readable)

    def join(self, namespaces: Sequence[tuple[str, int]], *, cgroup_procs: Sequence[str],
             ids: tuple[int, int] | None) -> None:
        """Send the zygote into the sandbox: its cgroup and namespaces (user namespace fds
        included), then ``ids`` (None: keep ours, which the user namespace maps). A failure
        comes back as the failure of the first command."""
        data = json.dumps({"ns": [name for name, _ in namespaces],
                           "cgroup_procs": list(cgroup_procs),
                           "uid": ids[0] if ids else None,
                           "gid": ids[1] if ids else None}).encode()
        try:
            self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array(
                "i", [fd for _, fd in namespaces]))])
        except OSError as exc:
            raise CommandStartFailed("the process sandbox's spawner is gone",
                                     details=self._failure or str(exc)) from exc

    def submit(self, request: dict[str, Any], fds: Sequence[int]) -> _Pending:
        """Send one request; its replies go to the returned `_Pending` on the running loop."""
        pending = _Pending(asyncio.get_running_loop())
        ident = next(self._ids)
        with self._lock:
            if self._failure:
                raise CommandStartFailed("the process sandbox's spawner is gone",
                                         details=self._failure)
            self._pending[ident] = pending
        data = json.dumps({**request, "id": ident}).encode()
        try:
            self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                         array.array("i", fds))])
        except OSError as exc:
            with self._lock:
                self._pending.pop(ident, None)
            raise CommandStartFailed("the process sandbox's spawner is gone",
                                     details=self._failure or str(exc)) from exc
        return pending

    def _readable(self) -> None:
        while True:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(
                    1 << 16, _FD_SPACE, socket.MSG_CMSG_CLOEXEC | socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            except OSError:
                data, ancillary = b"", []
            fds: list[int] = []
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                    fds.extend(got)
            if not data:
                self._loop.remove_reader(self._sock.fileno())
                self._fail_all("the spawner ended")
                return
            self._dispatch(data, fds)

    def _dispatch(self, data: bytes, fds: list[int]) -> None:
        try:
            message = dict(json.loads(data))
            ident = message.get("id")
        except (ValueError, TypeError):
            _close(fds)
            return
        if ident is None:  # the zygote could not enter the sandbox, or a bad request
            _close(fds)
            self._failure = str(message.get("error", "unknown"))
            return
        with self._lock:
            pending = self._pending.get(int(ident))
            if pending is not None and ("status" in message or "error" in message
                                        or message.get("final")):
                self._pending.pop(int(ident), None)
        if pending is None:
            _close(fds)
        elif pending.loop is self._loop:
            pending.deliver(message, fds)
        else:
            with contextlib.suppress(RuntimeError):  # that loop was closed meanwhile
                pending.loop.call_soon_threadsafe(pending.deliver, message, fds)

    def _fail_all(self, why: str) -> None:
        with self._lock:
            self._failure = self._failure or why
            pending, self._pending = list(self._pending.values()), {}
        for entry in pending:
            with contextlib.suppress(RuntimeError):
                entry.loop.call_soon_threadsafe(entry.deliver, {"error": self._failure}, [])

    @property
    def failed(self) -> bool:
        """True once the zygote is known to be gone or unable to enter its sandbox."""
        return bool(self._failure)

    def close(self) -> None:
        """Close the socket: the zygote exits (its commands are the sandbox's to kill)."""
        if not self._loop.is_closed() and self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()


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
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, close_fds=True,
                start_new_session=True)
        finally:
            theirs.close()
        self._sock = ours
        self.owner = os.getpid()

    def prepare(self, seccomp: bytes) -> Zygote:
        """A zygote that loads ``seccomp`` now and waits for `Zygote.join`.

        Raises:
            OSError: The fork server is gone.
        """
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            data = json.dumps({"filter": seccomp.hex()}).encode()
            self._sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                         array.array("i", [theirs.fileno()]))])
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


def prepare(seccomp: bytes = b"") -> Zygote:
    """A zygote from this process's fork server (started on demand, and again if it died)
    that loads ``seccomp`` (with NoNewPrivs) at once; `Zygote.join` then sends it into its
    sandbox."""
    global _spawner
    with _spawner_lock:
        for attempt in range(2):
            if _spawner is None or _spawner.owner != os.getpid() or \
                    _spawner._server.poll() is not None:
                if _spawner is not None and _spawner.owner == os.getpid():
                    _spawner.close()
                _spawner = Spawner()
            try:
                return _spawner.prepare(seccomp)
            except OSError:
                if attempt:
                    raise
                _spawner.close()
                _spawner = None
    raise AssertionError("unreachable")


@atexit.register
def _close_at_exit() -> None:
    if _spawner is not None and _spawner.owner == os.getpid():
        _spawner.close()


class SandboxSpawner:
    """One sandbox's zygote, replaced when it is found gone (its fork server was killed, say)."""

    def __init__(self, seccomp: bytes) -> None:
        self._seccomp = seccomp
        self._zygote = prepare(seccomp)
        self._target: tuple[int, str, tuple[str, ...], tuple[str, ...],
                            tuple[int, int] | None] | None = None

    def join(self, init_pid: int, pid_ns: str, names: Sequence[str],
             cgroup_procs: Sequence[str], ids: tuple[int, int] | None) -> None:
        """Send the zygote into the sandbox whose first process is ``init_pid``."""
        self._target = (init_pid, pid_ns, tuple(names), tuple(cgroup_procs), ids)
        self._send_join(self._zygote)

    def _send_join(self, zygote: Zygote) -> None:
        assert self._target is not None
        init_pid, pid_ns, names, cgroup_procs, ids = self._target
        fds: list[int] = []
        try:
            for name in names:
                fds.append(os.open(f"/proc/{init_pid}/ns/{name}", os.O_RDONLY | os.O_CLOEXEC))
            if os.readlink(f"/proc/{init_pid}/ns/pid") != pid_ns:
                raise ProcessLookupError(init_pid)
        except OSError as exc:  # that pid is gone, or no longer the sandbox's
            raise CommandStartFailed("the sandbox's first process is gone",
                                     details=str(exc)) from exc
        finally:
            if len(fds) < len(names):
                _close(fds)
        try:
            zygote.join(list(zip(names, fds, strict=True)), cgroup_procs=cgroup_procs, ids=ids)
        finally:
            _close(fds)

    def zygote(self) -> Zygote:
        """The live zygote: a new one, sent in, when the current one is known to be gone."""
        if self._zygote.failed and self._target is not None:
            self._zygote.close()
            self._zygote = prepare(self._seccomp)
            self._send_join(self._zygote)
        return self._zygote

    def close(self) -> None:
        self._zygote.close()


class RemoteProcess:
    """A command the fork server started: the subset of `asyncio.subprocess.Process` the
    process backend uses."""

    def __init__(self, pid: int, pidfd: int, pending: _Pending,
                 stdin: asyncio.StreamWriter | None, stdout: asyncio.StreamReader,
                 stderr: asyncio.StreamReader) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._pending = pending
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.returncode: int | None = None

    async def wait(self) -> int:
        """The exit code, or minus the signal number that ended the command."""
        if self.returncode is None:
            status = await self._pending.status
            self.returncode = os.waitstatus_to_exitcode(status)
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self._pidfd >= 0:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def _reader(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamReader:
    reader = asyncio.StreamReader(limit=1 << 16, loop=loop)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop),
                                 os.fdopen(fd, "rb", buffering=0))
    return reader


async def _writer(loop: asyncio.AbstractEventLoop, fd: int) -> asyncio.StreamWriter:
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(fd, "wb", buffering=0))
    return asyncio.StreamWriter(transport, protocol, None, loop)


async def start(spawner: SandboxSpawner, argv: Sequence[str], *, env: Mapping[str, str],
                attach_stdin: bool, workdir_fd: int, rlimits: Sequence[tuple[int, int, int]]
                ) -> RemoteProcess:
    """Start ``argv`` in the sandbox of ``spawner``.

    Raises:
        OSError: The program could not be executed (``errno`` says why).
        CommandStartFailed: The spawner could not enter the sandbox.
    """
    loop = asyncio.get_running_loop()
    ours: list[int] = []
    theirs: list[int] = []
    try:
        if attach_stdin:
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            ours.append(write_end)
            theirs.append(read_end)
        else:
            theirs.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        for _ in range(2):
            read_end, write_end = os.pipe2(os.O_CLOEXEC)
            ours.append(read_end)
            theirs.append(write_end)
        request = {"argv": list(argv), "env": [f"{k}={v}" for k, v in env.items()],
                   "rlimits": list(rlimits)}
        pending = spawner.zygote().submit(request, [*theirs, workdir_fd])
    except BaseException:
        _close(ours)
        raise
    finally:
        _close(theirs)
    try:
        pid, pidfd = await asyncio.shield(pending.pidfd)
    except BaseException:
        _close(ours)
        _abandon(pending)
        raise
    try:
        failed, step = await asyncio.shield(pending.started)
        if step == "exec":
            raise OSError(failed, os.strerror(failed))
        if step:
            raise CommandStartFailed(f"could not start {argv[0]!r}: entering the sandbox "
                                     f"failed at {step!r}",
                                     details=os.strerror(failed) if failed else "")
        stdin = await _writer(loop, ours.pop(0)) if attach_stdin else None
        stdout = await _reader(loop, ours.pop(0))
        stderr = await _reader(loop, ours.pop(0))
    except BaseException:
        _close(ours)
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
        raise
    return RemoteProcess(pid, pidfd, pending, stdin, stdout, stderr)


def _abandon(pending: _Pending) -> None:
    """A start given up before its pid came: kill the command whenever it does."""
    def kill(future: asyncio.Future[tuple[int, int]]) -> None:
        if not future.cancelled() and future.exception() is None:
            _, pidfd = future.result()
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
    pending.pidfd.add_done_callback(kill)
