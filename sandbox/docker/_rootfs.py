"""Map `SecurityPolicy`'s filesystem settings to the engine's options: a read-only root, tmpfs
mounts, and read-only and masked paths.

Pure, like the rest of the create plan (`_plan`), whose docstring table lists each field's
mapping and what runsc ignores.

Measured on this engine (20.10, API 1.41):

* ``MaskedPaths``/``ReadonlyPaths``: an absent key keeps Docker's defaults, a list replaces
  them (``[]`` unmasks everything), so a list always starts with the defaults.
* Tmpfs mounts default to noexec; a mount over an image directory keeps that directory's mode.
"""

from __future__ import annotations

import posixpath
from typing import Any, Final

from .._errors import ConfigError, SandboxInitFailed
from .._models import SecurityPolicy
from .._paths import tmpfs_entries

__all__ = ["DOCKER_MASKED_PATHS", "DOCKER_READONLY_PATHS", "filesystem_options"]

TMPFS_DEFAULT_OPTIONS: Final = "rw,exec,nosuid,nodev"
#: Docker 20.10's defaults; sending a list replaces them, so ours extend them.
DOCKER_MASKED_PATHS: Final = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
)
DOCKER_READONLY_PATHS: Final = (
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
)


def filesystem_options(
    sec: SecurityPolicy, user: str, working_dir: str, gvisor: bool, host: dict[str, Any]
) -> tuple[str, ...]:
    """Fill the root filesystem and tmpfs options of `host`; return the tmpfs mount points."""
    tmpfs: dict[str, str] = {}
    for _entry, path, options in tmpfs_entries(sec.tmpfs_paths):
        # The engine merges options left to right, so the user's own ones win.
        tmpfs[path] = f"{TMPFS_DEFAULT_OPTIONS},{options}" if options else TMPFS_DEFAULT_OPTIONS
    if sec.read_only_root:
        host["ReadonlyRootfs"] = True
        owner = _tmpfs_owner(user)
        for path in (working_dir, "/tmp"):
            if path and path != "/" and path not in tmpfs:
                tmpfs[path] = TMPFS_DEFAULT_OPTIONS + owner
    if tmpfs:
        host["Tmpfs"] = tmpfs
    for field, defaults, key in (
        ("read_only_paths", DOCKER_READONLY_PATHS, "ReadonlyPaths"),
        ("masked_paths", DOCKER_MASKED_PATHS, "MaskedPaths"),
    ):
        extra: tuple[str, ...] = getattr(sec, field)
        if not extra:
            continue  # No key keeps the engine's defaults.
        if gvisor:
            # gVisor ignores OCI maskedPaths/readonlyPaths (measured); its own /proc and /sys
            # lack or protect what Docker's defaults cover, so only listed paths are refused.
            raise SandboxInitFailed(
                f"security.{field}: gVisor (runsc) ignores it: the paths would stay "
                + ("visible" if field == "masked_paths" else "writable"),
                details="use runtime 'runc', or read_only_root / tmpfs_paths",
            )
        for path in extra:
            if not path.startswith("/"):
                raise ConfigError(f"security.{field}: {path!r} must be an absolute path")
        host[key] = list(dict.fromkeys((*defaults, *map(posixpath.normpath, extra))))
    return tuple(tmpfs)


def _tmpfs_owner(user: str) -> str:
    """Tmpfs options giving the sandbox user the mount; only numeric ids can go there."""
    owner = ""
    uid, _, gid = user.partition(":")
    if uid.isdigit():
        owner += f",uid={uid}"
    if gid.isdigit():
        owner += f",gid={gid}"
    return owner
