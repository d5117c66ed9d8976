"""Root filesystems made for process-backend tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from sandbox import IMAGE_BUSYBOX
from sandbox.process._rootfs import resolve_rootfs

#: The host uid and gid the process backend's sandbox user maps to (nobody).
NOBODY = 65534


@contextlib.asynccontextmanager
async def busybox_root_owning(*dirs: str) -> AsyncIterator[Path]:
    """A copy of the busybox root, readable by host nobody, whose top-level ``dirs`` the
    sandbox's user (host nobody) owns, so its writes there are allowed by the file modes and
    land in the overlay's upper directory. Removed after."""
    top = Path(tempfile.mkdtemp())
    os.chmod(top, 0o755)
    root = top / "root"
    source = (await resolve_rootfs(IMAGE_BUSYBOX)).path
    try:
        await anyio.run_process(["cp", "-a", str(source), str(root)])
        for name in dirs:
            os.chown(root / name, NOBODY, NOBODY)
        yield root
    finally:
        shutil.rmtree(top)
