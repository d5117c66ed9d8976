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
import hashlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["any_recorded", "forget", "places_dir", "recorded", "remember", "trusted_file"]

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


def forget(backend: str, place: Mapping[str, Any]) -> None:
    """Drop the record of a place that no longer exists (a removed kubeconfig)."""
    with contextlib.suppress(FileNotFoundError):
        (places_dir() / _record_name(backend, place)).unlink()
