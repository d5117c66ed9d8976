"""A session shell's input and output through FIFOs, past the engine's daemons.

Over the engine's attach stream every session byte crosses dockerd and the runtime's shim twice
a round trip; right after an exec those daemons still have work queued, which cost a round
trip ~0.6 ms (docs/session-transport.md). Here the host makes three FIFOs in a directory
that the sandbox has bind-mounted read-only, and the guarded shell, told their names over its
attach stdin, reopens its stdin, stdout and stderr on them (``command exec``). Safety:

1. Names are 128 random bits each, sent only over the guarded shell's attach stdin; the host
   directory is mode 0311 (inside: not listable by its owner nor by a capability-less root);
   the FIFOs are unlinked as soon as the shell holds them, before any command is sent, and
   their mode set to 0: no process without capabilities reopens them through
   ``/proc/<pid>/fd`` (the sandbox user may have the SDK's uid, and so own them).
2. The directory lies under a 0700 directory of the SDK's user (``sandbox-sessions-<uid>``),
   checked to be ours and not a link: no other host user reaches it. The backend mounts it
   only where dockerd resolves the path through the same mount as this process.
3. The host opens only by ``openat`` on its own directory fd with ``O_NOFOLLOW`` and checks
   each fd is a FIFO with the inode it made (the sandbox cannot write the mount anyway).
4. Whoever offers it (the backend) decides where it is safe; the handshake falls back to the
   attach stream in the same shell when the shell cannot open the FIFOs (it says so on its
   attach stdout), and the session replaces the shell when the handshake times out or the
   host cannot link it.
5. One directory per SDK process, named ``<pid>-<start ticks>`` like the owner labels: it is
   removed at exit, and `collect` (``python -m sandbox gc``) removes those of dead owners.

On where the backend offers it; ``SANDBOX_SESSION_FIFO=0`` turns it off (see `enabled`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import os
import secrets
import shutil
import stat
import tempfile
import time
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import anyio
import attrs

from ._owner import Collected, GcItem, Here, HostCollector, pid_start

__all__ = ["ENV", "FifoDir", "FifoLink", "Handshake", "SupportsSessionFifo", "collect",
           "enabled", "process_dir"]

#: The setting: "0" turns the transport off (every session keeps the attach stream).
ENV: Final = "SANDBOX_SESSION_FIFO"
#: How long the shell may take to open the FIFOs before it is given up on.
HANDSHAKE_TIMEOUT: Final = 5.0
_READ: Final = 1 << 16
#: What a stream may still hand on after the shell's end (`FifoLink.end`): a pipe holds at
#: most 1 MiB unprivileged; more is a process it left, writing on.
_DRAIN: Final = 1 << 20
#: Output read and not yet handed on above which the FIFOs are not read (a slow callback).
_QUEUE: Final = 1 << 20
_DIR_MODE: Final = 0o311


def enabled() -> bool:
    """False when the FIFO transport was turned off (``SANDBOX_SESSION_FIFO=0``)."""
    return os.environ.get(ENV, "").strip() != "0"


@runtime_checkable
class SupportsSessionFifo(Protocol):
    """A backend whose sandbox may carry session shells over FIFOs."""

    def session_fifo(self) -> tuple[FifoDir, str] | None:
        """This process's FIFO directory and where the sandbox sees it, or None."""
        ...


def _base() -> Path:
    """The 0700 directory of this user that holds each SDK process's FIFO directory."""
    return Path(tempfile.gettempdir()) / f"sandbox-sessions-{os.geteuid()}"


def _own_private_dir(path: Path) -> bool:
    """Make ``path`` (0700) if missing; True only if it is a directory of ours, not a link,
    that no one else may enter."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
            and stat.S_IMODE(info.st_mode) & 0o077 == 0)


def _my_name() -> str | None:
    alive, start = pid_start(os.getpid())
    return f"{os.getpid()}-{start}" if alive and start else None


@attrs.frozen
class FifoDir:
    """This process's FIFO directory: its host path and the inode it made there (each
    handshake opens it anew, checks it is that one, and works through that fd)."""

    path: str
    dev: int
    ino: int
    pid: int

    def open(self) -> int:
        """An ``O_PATH`` fd of the directory (its 0311 mode refuses ``O_RDONLY`` to an owner
        that is not root), refused unless it is still the one made (OSError)."""
        fd = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino, info.st_uid) != (self.dev, self.ino, os.geteuid()):
            os.close(fd)
            raise OSError(errno.EPERM, "the session FIFO directory was replaced")
        return fd


_dirs: dict[int, FifoDir | None] = {}


def process_dir() -> FifoDir | None:
    """This process's FIFO directory (None where it cannot be made safely): made once, and
    made again if it went (a tmp cleaner; a bind mount of a missing source fails the create)."""
    pid = os.getpid()
    if pid in _dirs:
        known = _dirs[pid]
        if known is None or _still_there(known):
            return known
    found: FifoDir | None = None
    base, name = _base(), _my_name()
    if name is not None and _own_private_dir(base):
        path = base / name
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink():  # a pid reused within one tick
                _remove(path)
            os.mkdir(path, 0o700)
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                info = os.fstat(fd)
                if info.st_uid == os.geteuid() and stat.S_ISDIR(info.st_mode):
                    os.fchmod(fd, _DIR_MODE)  # the umask does not apply to fchmod
                    found = FifoDir(str(path), info.st_dev, info.st_ino, pid)
                    atexit.register(_remove_mine, found)
            finally:
                os.close(fd)  # none held: each handshake opens its own
    _dirs.clear()
    _dirs[pid] = found
    return found


def _still_there(found: FifoDir) -> bool:
    try:
        info = os.lstat(found.path)
    except OSError:
        return False
    return (info.st_dev, info.st_ino) == (found.dev, found.ino)


def _remove_mine(found: FifoDir) -> None:
    if os.getpid() == found.pid:
        with contextlib.suppress(OSError):
            _remove(Path(found.path))


def _remove(path: Path) -> None:
    """Remove a FIFO directory (mode 0311: opened up first), never following a link.

    Not ``os.chmod(follow_symlinks=False)``: glibc before 2.32 cannot, and Python raises
    NotImplementedError there. An ``O_PATH`` fd (a 0311 directory refuses ``O_RDONLY`` to
    its owner; ``fchmod`` refuses ``O_PATH``) is changed through its ``/proc`` link."""
    fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.chmod(f"/proc/self/fd/{fd}", 0o700)
    finally:
        os.close(fd)
    shutil.rmtree(path)


class FifoLink:
    """The host's ends of one shell's FIFOs once the shell holds them.

    Its output is read by callbacks the event loop runs as each FIFO becomes readable (each
    registered once: no ``epoll_ctl`` pair, cancel scope and task wake-up per chunk), into a
    queue that one task, `pump`, hands on in order. A round trip's reply is then a loop
    callback per stream and one wake-up of that task."""

    def __init__(self, out_fd: int, err_fd: int, in_fd: int) -> None:
        self._fds = {"stdout": out_fd, "stderr": err_fd}
        self._in = in_fd
        self._closed = False
        self._ending = False
        self._chunks: deque[tuple[str, bytes]] = deque()
        self._queued = 0
        self._open = set(self._fds)  # streams not at their end yet
        self._watched: set[str] = set()  # streams the loop watches for us
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._write_lock = anyio.Lock(fast_acquire=True)

    async def write(self, data: bytes) -> None:
        """Write all of ``data`` to the shell's stdin: BrokenPipeError once the shell is gone
        or the link was closed meanwhile (writers take turns: one waits on the fd at once)."""
        view = memoryview(data)
        async with self._write_lock:
            while view:
                if self._closed:
                    raise BrokenPipeError(errno.EPIPE, "the session's FIFO is closed")
                try:
                    view = view[os.write(self._in, view):]
                except BlockingIOError:
                    try:
                        await anyio.wait_writable(self._in)
                    except (anyio.ClosedResourceError, anyio.BusyResourceError) as exc:
                        raise BrokenPipeError(errno.EPIPE,
                                              "the session's FIFO was closed") from exc

    async def pump(self, feed: Callable[[Any, bytes], Awaitable[None]]) -> None:
        """Hand the shell's output to ``feed`` (stream name, bytes; one chunk at a time, as
        from the attach stream) until both streams end, or, after `end`, until nothing more
        is readable at once. One pump per link."""
        if self._loop is not None:
            raise RuntimeError("the link is pumped already")
        loop = self._loop = asyncio.get_running_loop()
        try:
            self._watch()
            while not self._closed:
                if self._chunks:
                    name, data = self._chunks.popleft()
                    self._queued -= len(data)
                    if self._queued < _QUEUE:
                        self._watch()
                    await feed(name, data)
                elif self._ending:
                    await self._drain(feed)
                    return
                elif not self._open:
                    return
                else:
                    self._waiter = loop.create_future()
                    try:
                        await self._waiter
                    finally:
                        self._waiter = None
        finally:
            self._unwatch()

    def _watch(self) -> None:
        assert self._loop is not None
        if self._closed or self._ending:
            return
        for name in self._open - self._watched:
            self._loop.add_reader(self._fds[name], self._readable, name)
            self._watched.add(name)

    def _unwatch(self) -> None:
        for name in self._watched:
            assert self._loop is not None
            self._loop.remove_reader(self._fds[name])
        self._watched.clear()

    def _readable(self, name: str) -> None:
        try:
            data = os.read(self._fds[name], _READ)
        except BlockingIOError:
            return
        except OSError:  # as good as its end: the shell's end is told by its exec
            data = b""
        if data:
            self._chunks.append((name, data))
            self._queued += len(data)
            if self._queued >= _QUEUE:  # the pump is behind (a slow callback): wait for it
                self._unwatch()
        else:
            self._open.discard(name)
            self._watched.discard(name)
            assert self._loop is not None
            self._loop.remove_reader(self._fds[name])
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _drain(self, feed: Callable[[Any, bytes], Awaitable[None]]) -> None:
        """After `end`: hand on what each stream holds now, at most `_DRAIN` bytes each."""
        for name in [n for n in self._fds if n in self._open]:
            left = _DRAIN
            while left > 0 and not self._closed:
                try:
                    data = os.read(self._fds[name], _READ)
                except OSError:  # BlockingIOError: nothing more now
                    break
                if not data:
                    break
                left -= len(data)
                await feed(name, data)

    def end(self) -> None:
        """The shell has exited: the pump hands on what is readable now and stops. A process
        it left behind may hold its stdout open for ever, so end-of-file may never come."""
        self._ending = True
        if self._loop is not None:
            self._unwatch()
        self._wake()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._loop is not None:
            self._unwatch()  # before the fds go: a number reused must not call us
        self._wake()
        for fd in (*self._fds.values(), self._in):
            anyio.notify_closing(fd)
            os.close(fd)


class Handshake:
    """Three fresh FIFOs for one shell: the command line telling the shell to take them, and
    the host's side of the switch."""

    def __init__(self, where: FifoDir, target: str) -> None:
        self._where = where
        self._dir = -1
        self.fail_mark = secrets.token_hex(16)
        self._names = {key: secrets.token_hex(16) for key in ("out", "err", "in")}
        self._inodes: dict[str, int] = {}
        self._fds: dict[str, int] = {}
        self.error: OSError | None = None  # why the link could not be made, if it failed
        path = {key: f"{target}/{name}" for key, name in self._names.items()}
        # The shell opens stdout and stderr (the host reads both already), then blocks on
        # stdin until the host opens it for writing. A failure leaves the first redirection
        # undone (its open is the one that fails: same directory, same modes), so the shell
        # says so on its attach stdout and carries on there.
        self.line = (f"command exec 1>{path['out']} 2>{path['err']} 0<{path['in']} "
                     f"|| printf '%s\\n' {self.fail_mark}\n")

    def prepare(self) -> None:
        """Make the FIFOs and open the two the shell writes (before it is told their names)."""
        modes = {"out": 0o622, "err": 0o622, "in": 0o644}
        try:
            self._dir = self._where.open()
            for key, name in self._names.items():
                os.mkfifo(name, 0o600, dir_fd=self._dir)
                os.chmod(name, modes[key], dir_fd=self._dir)  # past the umask
                self._inodes[key] = os.stat(name, dir_fd=self._dir,
                                            follow_symlinks=False).st_ino
            for key in ("out", "err"):
                self._fds[key] = self._open(key, os.O_RDONLY)
        except BaseException:
            self.discard()
            raise

    def _open(self, key: str, flags: int) -> int:
        fd = os.open(self._names[key], flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                     dir_fd=self._dir)
        info = os.fstat(fd)
        if not stat.S_ISFIFO(info.st_mode) or info.st_ino != self._inodes[key]:
            os.close(fd)
            raise OSError(errno.EPERM, "the session FIFO is not the one the SDK made")
        return fd

    async def wait_shell(self, failed: anyio.Event, limit: float = HANDSHAKE_TIMEOUT
                         ) -> FifoLink | None:
        """Wait for the shell to hold the three FIFOs: their link, or None when the shell
        said it could not (``failed``), took longer than ``limit`` seconds, or the host could
        not open or lock down its end (`error`). The FIFOs are unlinked on every way out."""
        deadline = time.monotonic() + limit
        delay = 0.0002
        try:
            while not failed.is_set() and time.monotonic() < deadline:
                try:
                    in_fd = self._open("in", os.O_WRONLY)
                except OSError as exc:
                    if exc.errno != errno.ENXIO:  # ENXIO: the shell has not opened it yet
                        # EMFILE, a planted inode...: the shell's state is unknown, as
                        # after a timeout (the caller replaces it).
                        self.error = exc
                        return None
                    with anyio.move_on_after(delay):
                        await failed.wait()
                    delay = min(delay * 2, 0.01)
                    continue
                fds = (self._fds["out"], self._fds["err"], in_fd)
                try:
                    # The shell holds all three now. Mode 0: no process of any uid without
                    # capabilities reopens them through /proc/<pid>/fd (the sandbox user may
                    # have the SDK's uid and own them). Unlike the attach stream's pipes
                    # (the exec user's, 0600): ``>/dev/stderr`` fails here, ``>&2`` works.
                    for fd in fds:
                        os.fchmod(fd, 0)
                except OSError as exc:
                    os.close(in_fd)
                    self.error = exc
                    return None
                del self._fds["out"], self._fds["err"]
                return FifoLink(*fds)
            return None
        finally:
            self.discard()

    def discard(self) -> None:
        """Unlink the FIFOs and close the fds no link took (idempotent, never raises)."""
        if self._dir >= 0:
            for name in self._names.values():
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=self._dir)
            os.close(self._dir)
            self._dir = -1
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


async def collect(*, dry_run: bool, older_than: timedelta | None,
                  checkpoints_older_than: timedelta | None, here: Here, now: datetime,
                  docker: Any) -> Collected:
    """Remove the FIFO directories of this user's SDK processes that have exited (a
    `HostCollector`). A directory is ``<pid>-<start ticks>``: gone when that pid is not
    alive with that start time (the boot id is not needed: the base is cleared at boot
    or keeps only directories whose pid, if reused, started at another tick)."""
    del older_than, checkpoints_older_than, here, now, docker
    base = _base()
    removed: list[GcItem] = []
    kept: list[GcItem] = []
    failed: list[GcItem] = []
    try:
        names = sorted(os.listdir(base)) if base.is_dir() and _own_private_dir(base) else []
    except OSError:
        names = []
    for name in names:
        pid_text, _, start = name.partition("-")
        if not (pid_text.isascii() and pid_text.isdigit() and start.isdigit()):
            continue
        alive, ticks = pid_start(int(pid_text))
        if alive and ticks in (None, start):
            kept.append(GcItem(kind="session", id=name, name=f"session FIFOs {name}",
                               reason=f"its owner (pid {pid_text}) is alive"))
            continue
        item = GcItem(kind="session", id=name, name=f"session FIFOs {name}",
                      reason=f"its owner (pid {pid_text}) has exited")
        if dry_run:
            removed.append(item)
            continue
        try:
            await anyio.to_thread.run_sync(_remove, base / name)
            removed.append(item)
        except OSError as exc:
            failed.append(attrs.evolve(item, reason=f"{item.reason}; removing it failed: {exc}"))
    return Collected(removed=tuple(removed), kept=tuple(kept), failed=tuple(failed))
COLLECTOR: HostCollector = collect
