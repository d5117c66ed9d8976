"""Defaults and names shared by the whole package, kept in one place."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

#: Image with a static busybox: tiny, starts fast, has sh, tar, stat, httpd.
IMAGE_BUSYBOX: Final = "sandbox-busybox:latest"
#: Debian bookworm minbase with python3, git and ca-certificates.
IMAGE_PYTHON: Final = "sandbox-python:latest"

DEFAULT_IMAGE: Final = IMAGE_PYTHON
DEFAULT_TYPE: Final = "docker"
DEFAULT_RUNTIME: Final = "runc"
DEFAULT_WORKING_DIR: Final = "/workspace"
DEFAULT_PULL_POLICY: Final = "missing"
DEFAULT_MAX_OUTPUT_BYTES: Final = 16 * 1024 * 1024
DEFAULT_PROCESS_LIMIT: Final = 1024
#: Who commands run as when ``SecurityPolicy.run_as_user`` is empty and the image names no
#: non-root user of its own: a fixed uid and gid, whatever the image's /etc/passwd says.
DEFAULT_USER: Final = "1000:1000"
#: Default memory limit: this many bytes, or a quarter of the host's memory if that is less.
DEFAULT_MEMORY_LIMIT: Final = 2 * 1024**3
DEFAULT_MEMORY_HOST_FRACTION: Final = 4
#: Default CPU limit in cores, or the host's CPU count if that is less (1 if unknown).
DEFAULT_CPU_LIMIT: Final = 2.0
DEFAULT_STATS_INTERVAL: Final = timedelta(seconds=1)
DEFAULT_ENGINE_TIMEOUT: Final = 60.0
DEFAULT_CLEANUP_TIMEOUT: Final = 30.0
#: Removing a gVisor sandbox can take over 30 s on a loaded host.
GVISOR_CLEANUP_TIMEOUT: Final = 120.0

#: Label keys put on everything the SDK creates, so leaks can be found and collected.
LABEL_PREFIX: Final = "io.sandbox."
LABEL_MANAGED_BY: Final = "io.sandbox.managed-by"
LABEL_MANAGED_BY_VALUE: Final = "sandbox-sdk"
LABEL_SANDBOX_ID: Final = "io.sandbox.id"
LABEL_OWNER_HOST: Final = "io.sandbox.owner.host"
LABEL_OWNER_PID: Final = "io.sandbox.owner.pid"
LABEL_OWNER_START: Final = "io.sandbox.owner.start"
LABEL_OWNER_BOOT_ID: Final = "io.sandbox.owner.boot-id"
LABEL_CREATED: Final = "io.sandbox.created"
