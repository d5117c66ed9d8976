"""Where a Docker sandbox may carry its sessions over FIFOs (`sandbox._session_fifo`): the
one read-only bind mount its create body gains, and only where that was checked to be safe.

Offered unless turned off (``SANDBOX_SESSION_FIFO=0``), on an engine answering a local unix
socket whose dockerd runs here as root (not rootless, not a Docker Desktop VM, not remote:
the mount source must be this host's directory) and resolves the directory through the same
mount as this process (`dockerd_sees`: not under systemd's PrivateTmp), with runc (gVisor
refuses the FIFOs; other runtimes are untested), without user namespaces or SELinux
labelling (untested), and without added capabilities (``CAP_DAC_READ_SEARCH`` would let the
sandbox list the directory). Every other sandbox keeps the attach stream.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from .._errors import SandboxError
from .._session_fifo import FifoDir, enabled, process_dir
from ._engine_identity import EngineInstance, identify
from ._facts import EngineFacts

__all__ = ["TARGET", "add_fifo_mount", "create_dropping_fifo", "dockerd_sees", "is_fifo_mount"]

log = logging.getLogger("sandbox.session")

#: Where the FIFO directory appears inside (on /dev's tmpfs: nothing is added to the image's
#: file system, so no fork or checkpoint carries a trace of it).
TARGET: Final = "/dev/.sandbox-session"

#: Per engine address: its daemon when it runs here as root.
_local_root: dict[str, EngineInstance | None] = {}
#: Per (process, daemon, directory): whether the daemon sees the directory's mount.
_seen: dict[tuple[int, EngineInstance, FifoDir], bool] = {}
#: Processes whose create failed on the mount's source: no more FIFOs for them.
_failed: set[int] = set()


def _rootful_here(address: str) -> EngineInstance | None:
    if address not in _local_root:
        instance = identify(address)
        _local_root[address] = instance if instance is not None and instance.uid == 0 else None
    return _local_root[address]


def _mounts(path: str) -> dict[str, tuple[str, str]]:
    """Mount id -> (root within its file system, mount point) from a ``mountinfo`` file."""
    found: dict[str, tuple[str, str]] = {}
    with open(path, "rb") as info:
        for line in info.read().decode("utf-8", "surrogateescape").splitlines():
            fields = line.split(" ")
            if len(fields) > 4:
                found[fields[0]] = (fields[3], fields[4])
    return found


def dockerd_sees(where: FifoDir, pid: int, proc: str = "/proc") -> bool:
    """Whether the daemon (``pid``) resolves ``where.path`` through the very mount this
    process does, at the same place: the bind mount's source is resolved by dockerd, as root,
    in its own mount namespace. Under systemd's ``PrivateTmp`` (or any other mount namespace
    of our own) the path would name nothing there, or whatever another host user planted at
    it in the host's /tmp (a link to our home, mounted into every sandbox). Mount ids are
    unique across namespaces: the one holding our directory fd in the daemon's mountinfo
    (same root, same mount point: same root directory too) is the same mount. Anything that
    cannot be read or does not match: False."""
    try:
        fd = where.open()
        try:
            with open(f"/proc/self/fdinfo/{fd}", "rb") as fdinfo:
                lines = fdinfo.read().splitlines()
        finally:
            os.close(fd)
        mnt_id = next(line.partition(b":")[2].strip().decode() for line in lines
                      if line.startswith(b"mnt_id:"))
        ours = _mounts(f"{proc}/self/mountinfo").get(mnt_id)
        theirs = _mounts(f"{proc}/{pid}/mountinfo").get(mnt_id)
    except (OSError, StopIteration, UnicodeDecodeError):
        return False
    return ours is not None and ours == theirs


def add_fifo_mount(body: dict[str, Any], facts: EngineFacts, *, runtime: str,
                   address: str) -> FifoDir | None:
    """Add the FIFO directory's read-only bind mount to ``body`` where it is safe: the
    directory, or None (then ``body`` is unchanged and sessions keep the attach stream)."""
    host = body.setdefault("HostConfig", {})
    runtime = str(host.get("Runtime") or runtime or facts.default_runtime)
    if (not enabled() or os.getpid() in _failed or runtime != "runc"
            or facts.is_gvisor(runtime)
            or host.get("CapAdd") or host.get("Privileged") or host.get("UsernsMode")
            or any(facts.has_security_option(o) for o in ("userns", "rootless", "selinux"))):
        return None
    daemon = _rootful_here(address)
    if daemon is None:
        return None
    where = process_dir()
    if where is None:
        return None
    key = (os.getpid(), daemon, where)
    if key not in _seen:
        _seen[key] = dockerd_sees(where, daemon.pid)
        if not _seen[key]:
            log.info("session FIFOs: the engine's daemon does not see %s as this process "
                     "does (another mount namespace: PrivateTmp?); sessions keep the attach "
                     "stream", where.path)
    if not _seen[key]:
        return None
    host["Mounts"] = [*(host.get("Mounts") or []), _mount(where)]
    return where


def _mount(where: FifoDir) -> dict[str, Any]:
    return {"Type": "bind", "Source": where.path, "Target": TARGET, "ReadOnly": True,
            "BindOptions": {"Propagation": "rprivate"}}


async def create_dropping_fifo(create: Callable[[Mapping[str, Any]], Awaitable[str]],
                               body: dict[str, Any], where: FifoDir | None
                               ) -> tuple[str, FifoDir | None]:
    """Create the container from ``body`` (``create``): its id and the FIFO directory it
    mounts. Should the engine refuse the directory as a bind source (it sees another file
    system than this process: checked in `add_fifo_mount`, so this is defence in depth),
    FIFOs are turned off for this process and the create is made once more without it."""
    try:
        return await create(body), where
    except SandboxError as exc:
        text = str(exc)
        if where is None or "bind source path" not in text or where.path not in text:
            raise
        _failed.add(os.getpid())
        log.warning("session FIFOs: the engine refused their directory (%s); this process's "
                    "sessions keep the attach stream", exc)
    host = body.get("HostConfig") or {}
    with contextlib.suppress(ValueError, KeyError, AttributeError):
        host["Mounts"].remove(_mount(where))
    return await create(body), None


def is_fifo_mount(mount: Mapping[str, Any], where: FifoDir | None) -> bool:
    """Whether ``mount`` (from the container's inspect) is the FIFO directory's, read-only:
    a pool's reset may ignore it (nothing a user does inside can leave anything there)."""
    return (where is not None and mount.get("Type") == "bind" and mount.get("RW") is False
            and mount.get("Source") == where.path and mount.get("Destination") == TARGET)
