"""``resources.disk_limit`` and ``disk_request``: what caps a sandbox's writes on this engine.

``disk_limit`` has two honest forms, else it is refused:

* The engine can cap a container's writable layer (storage driver btrfs, zfs, devicemapper,
  or overlay2 on XFS mounted with ``pquota``): HC ``StorageOpt.size``, the engine's own cap.
* Otherwise (overlay2 on ext4, like this engine), with ``security.read_only_root`` the only
  writable places are the sandbox's tmpfs mounts (working dir, /tmp, ``tmpfs_paths``): each
  gets ``size=disk_limit`` unless its own options give a size. Writes past it fail with
  ENOSPC and the sandbox lives on (measured under runc and runsc). Tmpfs pages count against
  the memory limit, so disk_limit must stay below it.

Either way a repository mounted live and writable (``local_path`` without filters) writes to
the host's disk, which nothing here caps: refused with disk_limit.

``disk_request`` means: refuse to start when the engine's data root has less free space than
that. It reserves nothing (Docker cannot); it is checked from here, so the engine's data root
must be visible at the same path (the SDK on the engine's host), else it is refused.
"""

from __future__ import annotations

import os
from typing import Any, Final

from .._errors import SandboxInitFailed
from .._models import SandboxConfig
from ._facts import EngineFacts

__all__ = ["disk_options", "layer_quota"]

_QUOTA_DRIVERS: Final = frozenset({"btrfs", "zfs", "devicemapper"})
#: How to make the engine able to cap a layer (README "Limits and security" says more).
ENABLE_HINT: Final = (
    "put the engine's data root on XFS mounted with pquota (e.g. a loop file: mkfs.xfs, "
    "mount -o pquota, data-root in daemon.json, restart dockerd), or set "
    "security.read_only_root=True so the only writable places are tmpfs mounts it can cap"
)


def layer_quota(engine: EngineFacts) -> bool:
    """Whether the engine's storage driver can cap a container's writable layer."""
    driver, backing = engine.storage_driver, engine.backing_filesystem
    return driver in _QUOTA_DRIVERS or (driver == "overlay2" and backing == "xfs")


def disk_options(config: SandboxConfig, engine: EngineFacts, host: dict[str, Any]) -> None:
    """Fill the disk cap into `host` (after the tmpfs mounts) and check ``disk_request``."""
    res, repo = config.resources, config.repository
    limit = res.disk_limit
    if limit:
        if repo is not None and repo.local_path and not repo.read_only and not (
                repo.include_files or repo.exclude_files):
            raise SandboxInitFailed(
                "resources.disk_limit: repository.local_path is mounted live and writable, and "
                "writes there go to the host's disk, which nothing caps",
                details="set repository.read_only=True, or give include_files/exclude_files "
                        "so the sandbox works on its own copy")
        if layer_quota(engine):
            host["StorageOpt"] = {"size": str(limit)}
        elif config.security.read_only_root:
            memory = int(host.get("Memory") or 0)
            if memory and limit >= memory:
                raise SandboxInitFailed(
                    f"resources.disk_limit: {limit} bytes of tmpfs would count against the "
                    f"memory limit of {memory} bytes", details="tmpfs lives in memory: give a "
                    "disk_limit below resources.memory_limit")
            tmpfs: dict[str, str] = host.get("Tmpfs") or {}
            for path, options in tmpfs.items():
                if "size=" not in options:
                    tmpfs[path] = f"{options},size={limit}"
        else:
            driver, backing = engine.storage_driver, engine.backing_filesystem
            raise SandboxInitFailed(
                f"resources.disk_limit: storage driver {driver or 'unknown'} on "
                f"{backing or 'unknown'} cannot limit a container's disk",
                details=f"it needs btrfs, zfs, devicemapper, or overlay2 on xfs mounted with "
                        f"pquota; {ENABLE_HINT}")
    if res.disk_request:
        _check_free(engine.docker_root_dir, res.disk_request)


def _check_free(root: str, wanted: int) -> None:
    try:
        stat = os.statvfs(root) if root else None
    except OSError:
        stat = None
    if stat is None:
        raise SandboxInitFailed(
            "resources.disk_request: the engine's data root "
            f"({root or 'not reported'}) is not visible from here, so its free space cannot "
            "be checked", details="Docker cannot reserve disk space; disk_request only "
                                  "refuses to start on a fuller engine: remove it, or run the "
                                  "SDK on the engine's host")
    free = stat.f_bavail * stat.f_frsize
    if free < wanted:
        raise SandboxInitFailed(
            f"resources.disk_request: the engine's data root {root} has {free} bytes free, "
            f"less than the {wanted} asked", details="free space on the engine, or ask less")
