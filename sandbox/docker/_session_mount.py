"""Where a Docker sandbox may carry its sessions over FIFOs (`sandbox._session_fifo`): the
one read-only bind mount its create body gains, and only where that was checked to be safe.

Offered unless turned off (``SANDBOX_SESSION_FIFO=0``), on an engine answering a local unix
socket whose dockerd runs here as root (not rootless, not a Docker Desktop VM, not remote:
the mount source must be this host's directory), with runc (gVisor refuses the FIFOs; other
runtimes are untested), without user namespaces or SELinux labelling (untested), and
without added capabilities (``CAP_DAC_READ_SEARCH`` would let the sandbox list the
directory). Every other sandbox keeps the attach stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from .._session_fifo import FifoDir, enabled, process_dir
from ._engine_identity import identify
from ._facts import EngineFacts

__all__ = ["TARGET", "add_fifo_mount", "is_fifo_mount"]

#: Where the FIFO directory appears inside (on /dev's tmpfs: nothing is added to the image's
#: file system, so no fork or checkpoint carries a trace of it).
TARGET: Final = "/dev/.sandbox-session"

#: Per engine address: whether its daemon runs here as root.
_local_root: dict[str, bool] = {}


def _rootful_here(address: str) -> bool:
    if address not in _local_root:
        instance = identify(address)
        _local_root[address] = instance is not None and instance.uid == 0
    return _local_root[address]


def add_fifo_mount(body: dict[str, Any], facts: EngineFacts, *, runtime: str,
                   address: str) -> FifoDir | None:
    """Add the FIFO directory's read-only bind mount to ``body`` where it is safe: the
    directory, or None (then ``body`` is unchanged and sessions keep the attach stream)."""
    host = body.setdefault("HostConfig", {})
    runtime = str(host.get("Runtime") or runtime or facts.default_runtime)
    if (not enabled() or runtime != "runc" or facts.is_gvisor(runtime)
            or host.get("CapAdd") or host.get("Privileged") or host.get("UsernsMode")
            or any(facts.has_security_option(o) for o in ("userns", "rootless", "selinux"))
            or not _rootful_here(address)):
        return None
    where = process_dir()
    if where is None:
        return None
    host["Mounts"] = [*(host.get("Mounts") or []), {
        "Type": "bind", "Source": where.path, "Target": TARGET, "ReadOnly": True,
        "BindOptions": {"Propagation": "rprivate"},
    }]
    return where


def is_fifo_mount(mount: Mapping[str, Any], where: FifoDir | None) -> bool:
    """Whether ``mount`` (from the container's inspect) is the FIFO directory's, read-only:
    a pool's reset may ignore it (nothing a user does inside can leave anything there)."""
    return (where is not None and mount.get("Type") == "bind" and mount.get("RW") is False
            and mount.get("Source") == where.path and mount.get("Destination") == TARGET)
