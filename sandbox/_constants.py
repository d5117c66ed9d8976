"""Defaults and names shared by the whole package, kept in one place."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

#: The only directories the SDK's own root processes look programs up in (a root exec, the
#: Docker keepalive, a session shell's guarded copy, a reset's tools): the system's, never
#: /usr/local or an image's PATH entry, which a sandbox user may be able to write.
ROOT_PATH: Final = "/usr/sbin:/usr/bin:/sbin:/bin"

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
#: Default open files per process (RLIMIT_NOFILE, soft = hard). Times DEFAULT_PROCESS_LIMIT it
#: is 512 Ki file slots, about a fifth of a 2.47 M fs.file-max (Docker's own default here,
#: 20,000, would allow 20 M: one sandbox could exhaust the host's file table).
DEFAULT_FILE_LIMIT: Final = 512
#: Caps on one copy out of a sandbox (copy_files' max_bytes / max_entries): file data written
#: to the host, and files + directories + links created.
DEFAULT_COPY_MAX_BYTES: Final = 4 << 30
DEFAULT_COPY_MAX_ENTRIES: Final = 100_000
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
#: Every helper the SDK execs for a file operation (read, write, list, copy, stat) or for set-up
#: gets this many seconds for its fixed work; a hostile root may have replaced `head` by `sleep`.
#: As long as one engine call may take (a helper is three of them): the shared test host has
#: seen load averages of 60, and a healthy helper must not be cut off there.
HELPER_TIMEOUT: Final = 60.0
#: Data-moving helpers also get 1 s more per MiB moved (stdin written plus stdout read), so a big
#: legitimate copy finishes while a stalled or trickling one is cut off: "at least 1 MiB/s".
HELPER_MIN_RATE: Final = float(1 << 20)
#: No helper runs longer than this, however much it moved: a hostile tool that streams just
#: fast enough must still end.
HELPER_MAX_TIME: Final = 3600.0
#: list_files forks ``stat`` per entry (~60 bytes of output each; 2-4 ms per entry measured
#: with runc and gVisor on a loaded 2-core host), so its output earns time at a lower rate
#: (~7 ms per entry) and it stops within LIST_MAX_TIME.
LIST_MIN_RATE: Final = float(8 << 10)
LIST_MAX_TIME: Final = 600.0

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
#: Annotation key prefix under which `SandboxInfo` carries each of ``SandboxConfig.tools``
#: with its path (annotations keep the Go wire format unchanged).
ANNOTATION_TOOL: Final = "io.sandbox.tool/"
