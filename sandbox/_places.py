"""Where this host's sandboxes put resources that live off this host, so gc can look there.

Docker and process sandboxes leave their resources on this host, where gc finds them by label.
A backend whose resources live elsewhere (the Kubernetes backend: Pods in a cluster's
namespace) cannot be searched that way: once its owner is dead, nothing else knows which
cluster it used. So the backend records each place (a small JSON object it defines: for
Kubernetes the kubeconfig file, context and namespace) before it creates anything there, and
`sandbox.gc` asks that backend's collector to look in every recorded place. No record means
gc never imports that backend (nor its client library).

Records live in ``$SANDBOX_PLACES``, else ``$XDG_STATE_HOME/sandbox-sdk/places`` (by default
``~/.local/state/...``): state that must outlive a reboot, since an owner from before one is
gone for sure. One file per place, named by a hash of its content, written once (a temporary
file linked to its name, never over an existing record: a record a process holds locked must
stay the one its name names), so concurrent owners never interleave. A directory that is not
this user's alone is not written to (a file planted there could hang `hold`). A record tells
gc which credentials to load (a kubeconfig can name a program to run), so a record is only
believed from a directory and a file that this user owns and no one else can write.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import stat
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["any_recorded", "forget", "hold", "places_dir", "recorded", "release", "remember",
           "retire", "trusted_file"]

log = logging.getLogger("sandbox.gc")


def _fallback_dir() -> Path:
    """The directory used when there is no home directory: in the shared /tmp, so only
    believed when it is this user's own and no one else's (see `_writable_dir`)."""
    return Path(tempfile.gettempdir()) / f"sandbox-sdk-places-{os.getuid()}"


def places_dir() -> Path:
    """The directory of the records: SANDBOX_PLACES, else under XDG_STATE_HOME."""
    if env := os.environ.get("SANDBOX_PLACES"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no home directory to be found: this user's own, in /tmp
            return _fallback_dir()
    return Path(base) / "sandbox-sdk" / "places"


def _writable_dir(where: Path) -> None:
    """Make ``where`` (mode 0700) unless it exists, and raise OSError unless only this user
    can put files in it: another user's file there (a FIFO, a record held locked) could hang
    `hold`, and their record would be believed by gc. The /tmp fallback, which anyone could
    have made first, must moreover be a directory (not a link) of this user, mode 0700."""
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    if where == _fallback_dir():
        info = os.lstat(where)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() \
                or info.st_mode & 0o077:
            raise OSError(f"{where} is not a directory of this user's alone (mode 0700)")
    elif why := trusted_file(where):
        raise OSError(f"{where} is not to be trusted: {why}")


def trusted_file(path: Path, *, follow: bool = True) -> str:
    """Why ``path`` must not be believed ("" when it may): it must be owned by this user (or
    root) and writable by no one else."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except OSError as exc:
        return f"cannot read it ({exc.strerror or exc})"
    if info.st_uid not in (os.getuid(), 0):
        return f"it belongs to uid {info.st_uid}"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "others can write it"
    if not follow and stat.S_ISLNK(info.st_mode):
        return "it is a symbolic link"
    return ""


def _record_name(backend: str, place: Mapping[str, Any]) -> str:
    text = json.dumps({"backend": backend, "place": dict(place)}, sort_keys=True)
    return f"{backend}-{hashlib.sha256(text.encode()).hexdigest()[:24]}.json"


def remember(backend: str, place: Mapping[str, Any]) -> None:
    """Record that a sandbox of ``backend`` puts resources in ``place`` (a no-op when it is
    recorded already: a check of the directory and one stat). Called before the first
    resource is created there. Raises OSError when the directory is not to be written to
    (see `_writable_dir`)."""
    where = places_dir()
    _writable_dir(where)
    path = where / _record_name(backend, place)
    if os.path.lexists(path):
        return
    text = json.dumps({"backend": backend, "place": dict(place)}, sort_keys=True)
    fd, temp = tempfile.mkstemp(dir=where, prefix=f".{path.name}.", suffix=".new")
    try:
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        # A link, not a rename: an existing record (maybe held locked by a process, see
        # `hold`) is never replaced by another writer's copy.
        with contextlib.suppress(FileExistsError):
            os.link(temp, path)
    finally:
        os.unlink(temp)


#: Record path -> (the open record this process holds a shared lock on, how many of its
#: sandboxes are in that place). Guarded by `_HOLDS_LOCK` (sandboxes of several threads).
_HOLDS: dict[str, tuple[int, int]] = {}
_HOLDS_LOCK = threading.Lock()


#: How many times (1 ms apart) `hold` tries for its shared lock: the only one to hold a
#: record exclusively is `_drop`, for the microseconds of an unlink; anything longer is not a
#: record of ours, and waiting on it would hang the event loop.
_LOCK_TRIES = 50


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        now = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)


def _share_lock(fd: int, path: Path) -> None:
    """Take a shared lock on ``fd`` without blocking for long (see `_LOCK_TRIES`)."""
    for _ in range(_LOCK_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(0.001)
    raise OSError(f"the record {path} stays locked by another process")


def _lock_record(path: Path, backend: str, place: Mapping[str, Any]) -> int:
    """The record at ``path`` (written if missing), open and share-locked: the same file as
    the path names once locked (a `retire` between the open and the lock unlinked the one
    opened: then again, with a new record). Never blocks: not on a FIFO put in its place
    (opened without waiting, then refused as not a regular file), nor on a lock held long."""
    for _ in range(100):
        remember(backend, place)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            continue  # retired just now
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(f"the record {path} is not a regular file")
            _share_lock(fd, path)
            if _same_file(path, fd):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(f"the record {path} kept being replaced")


def hold(backend: str, place: Mapping[str, Any]) -> str:
    """Record ``place`` (see `remember`) and keep its record until `release`: a sandbox of
    this process is about to put resources there. Returns the token to release it with.
    The first hold of a place in this process costs an open and a lock, the next ones a stat:
    the record held must still be the one its path names (else gc could have dropped the
    path's, held by no one): if not, the path's record is locked (written) anew."""
    path = places_dir() / _record_name(backend, place)
    token = str(path)
    with _HOLDS_LOCK:
        if token in _HOLDS:
            fd, count = _HOLDS[token]
            if not _same_file(path, fd):
                new = _lock_record(path, backend, place)
                os.close(fd)
                fd = new
            _HOLDS[token] = (fd, count + 1)
            return token
        fd = _lock_record(path, backend, place)
        _HOLDS[token] = (fd, 1)
    return token


def release(token: str) -> None:
    """One sandbox of this process left the place `hold` returned ``token`` for; after the
    last one the record may be retired. Idempotent per hold only: call it once per hold."""
    with _HOLDS_LOCK:
        if token not in _HOLDS:
            return
        fd, count = _HOLDS.pop(token)
        if count > 1:
            _HOLDS[token] = (fd, count - 1)
            return
    os.close(fd)  # lets go of the lock


def _drop(path: Path) -> bool:
    """Unlink the record at ``path`` unless a process holds it (`hold`): under an exclusive
    lock got without waiting, on the file the path still names. Whether it was dropped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False  # not a record of ours (a FIFO): left alone
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        now, opened = os.stat(path, follow_symlinks=False), os.fstat(fd)
        if (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino):
            return False  # replaced meanwhile: a new owner's record
        path.unlink()
        return True
    except OSError:  # BlockingIOError: a sandbox of this host is there, or about to be
        return False
    finally:
        os.close(fd)


async def retire(backend: str, place: Mapping[str, Any],
                 empty: Callable[[], Awaitable[bool]]) -> bool:
    """Drop the record of ``place``, where gc just found nothing of ours, unless a process
    of this host holds it (`hold`). ``empty`` looks again after the drop: if something is
    there after all (made by an owner that died between gc's look and the drop), or that
    cannot be told, the record is written back. Whether it stays dropped."""
    if not _drop(places_dir() / _record_name(backend, place)):
        return False
    try:
        still_empty = await empty()
    except BaseException:
        remember(backend, place)
        raise
    if not still_empty:
        remember(backend, place)
    return still_empty


def _names(backend: str) -> list[str]:
    try:
        names = sorted(os.listdir(places_dir()))
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("gc: cannot read the places sandboxes recorded in %s: %s", places_dir(), exc)
        return []
    return [n for n in names if n.startswith(f"{backend}-") and n.endswith(".json")]


def any_recorded(backend: str) -> bool:
    """Whether any place of ``backend`` is recorded (one directory listing, nothing read)."""
    return bool(_names(backend))


def _read_record(path: Path) -> bytes:
    """The text of the record at ``path``, never waiting (a FIFO there is refused, OSError):
    at most 64 KiB, far more than a record holds."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return os.read(fd, 65536)
    finally:
        os.close(fd)


def recorded(backend: str) -> list[dict[str, Any]]:
    """Every place recorded for ``backend`` that can be believed (see `trusted_file`); none
    when the directory does not exist (nothing was ever recorded), without further cost."""
    where = places_dir()
    wanted = _names(backend)
    if not wanted:
        return []
    if why := trusted_file(where):
        log.warning("gc: ignoring the places recorded in %s: %s", where, why)
        return []
    found: list[dict[str, Any]] = []
    for name in wanted:
        path = where / name
        if why := trusted_file(path, follow=False):
            log.warning("gc: ignoring the place recorded in %s: %s", path, why)
            continue
        with contextlib.suppress(OSError, ValueError):
            doc = json.loads(_read_record(path))
            if isinstance(doc, dict) and doc.get("backend") == backend \
                    and isinstance(doc.get("place"), dict):
                found.append(doc["place"])
    return found


def forget(backend: str, place: Mapping[str, Any]) -> bool:
    """Drop the record of a place that no longer exists (a removed kubeconfig), unless a
    sandbox of this host still holds it (`hold`). Whether it was dropped."""
    return _drop(places_dir() / _record_name(backend, place))
