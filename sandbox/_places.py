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
file renamed over), so concurrent owners never interleave. A record tells gc which
credentials to load (a kubeconfig can name a program to run), so a record is only believed
from a directory and a file that this user owns and no one else can write.
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
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["any_recorded", "forget", "hold", "places_dir", "recorded", "release", "remember",
           "retire", "trusted_file"]

log = logging.getLogger("sandbox.gc")


def places_dir() -> Path:
    """The directory of the records: SANDBOX_PLACES, else under XDG_STATE_HOME."""
    if env := os.environ.get("SANDBOX_PLACES"):
        return Path(env)
    base = os.environ.get("XDG_STATE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".local" / "state")
        except RuntimeError:  # no home directory to be found: this user's own, in /tmp
            return Path(tempfile.gettempdir()) / f"sandbox-sdk-places-{os.getuid()}"
    return Path(base) / "sandbox-sdk" / "places"


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
    recorded already: one stat). Called before the first resource is created there."""
    where = places_dir()
    path = where / _record_name(backend, place)
    if path.exists():
        return
    where.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = json.dumps({"backend": backend, "place": dict(place)}, sort_keys=True)
    temp = where / f".{path.name}.{os.getpid()}.new"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(temp, path)


#: Record path -> (the open record this process holds a shared lock on, how many of its
#: sandboxes are in that place). Guarded by `_HOLDS_LOCK` (sandboxes of several threads).
_HOLDS: dict[str, tuple[int, int]] = {}
_HOLDS_LOCK = threading.Lock()


def _lock_record(path: Path, backend: str, place: Mapping[str, Any]) -> int:
    """The record at ``path`` (written if missing), open and share-locked: the same file as
    the path names once locked (a `retire` between the open and the lock unlinked the one
    opened: then again, with a new record)."""
    for _ in range(100):
        remember(backend, place)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # retired just now
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)  # waits only while a `retire` unlinks it
            now, opened = os.stat(path, follow_symlinks=False), os.fstat(fd)
            if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise OSError(f"the record {path} kept being replaced")


def hold(backend: str, place: Mapping[str, Any]) -> str:
    """Record ``place`` (see `remember`) and keep its record until `release`: a sandbox of
    this process is about to put resources there. Returns the token to release it with.
    The first hold of a place in this process costs an open and a lock, the next ones none."""
    path = places_dir() / _record_name(backend, place)
    token = str(path)
    with _HOLDS_LOCK:
        if token in _HOLDS:
            fd, count = _HOLDS[token]
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
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
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
            doc = json.loads(path.read_text())
            if isinstance(doc, dict) and doc.get("backend") == backend \
                    and isinstance(doc.get("place"), dict):
                found.append(doc["place"])
    return found


def forget(backend: str, place: Mapping[str, Any]) -> bool:
    """Drop the record of a place that no longer exists (a removed kubeconfig), unless a
    sandbox of this host still holds it (`hold`). Whether it was dropped."""
    return _drop(places_dir() / _record_name(backend, place))
