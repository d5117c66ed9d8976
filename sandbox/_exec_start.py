"""Starting a command, on any backend: refuse what Linux could not start, and name why a
command could not start with one typed error.

A command too large for execve is refused before any engine sees it (`check_exec_size`).
Each backend learns in its own way that a command did not start (the Docker engine's message,
the fork server's errno, the Kubernetes wrapper's report) and says which `StartFault` it was;
`start_error` turns that into `CommandNotFound`, `CommandNotExecutable` or
`CommandStartFailed`, with the same words on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ._errors import CommandNotExecutable, CommandNotFound, CommandStartFailed

__all__ = ["ARG_MAX", "MAX_ARG_STRLEN", "StartFault", "check_exec_size", "start_error"]

#: Linux's limits for a new program (execve): bytes per argument or environment string
#: (MAX_ARG_STRLEN, NUL included), and for all of them plus their pointers (a quarter of the
#: default 8 MiB stack). runc enforces them; gVisor is more lenient, but commands stay portable.
MAX_ARG_STRLEN = 128 << 10
ARG_MAX = 2 << 20
#: Kept free for the environment the container adds (image ENV, PATH, HOSTNAME, HOME).
ENV_RESERVE = 64 << 10

#: Why a command did not start: ``path`` no program of that name in PATH; ``missing`` the
#: file (or its #! interpreter) does not exist; ``notfound`` one of those two, not known
#: which; ``notexec`` not an executable file; ``workdir`` its working directory is missing;
#: ``other`` anything else (the details say what).
StartFault = Literal["path", "missing", "notfound", "notexec", "workdir", "other"]


def check_exec_size(argv: Sequence[str], env: Sequence[str]) -> None:
    """Refuse, before the engine sees it, a command Linux (or the engine) could not start.

    Otherwise a 200 KB argument comes back as exit 1 with runc's message on stderr (which a
    program could print too, so it cannot be trusted), and a 10 MB environment as the engine's
    "message length exceeds maximum message size" (4 MiB).
    """
    total = 0
    for i, text in enumerate((*argv, *env)):
        # ASCII (nearly always) is one byte a character: no encoded copy needed to count it.
        size = (len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))) + 1
        if size > MAX_ARG_STRLEN:
            label = f"argv[{i}]" if i < len(argv) else \
                f"environment entry {text.partition('=')[0]!r} (KEY=value)"
            raise CommandStartFailed(
                f"cannot start {argv[0]!r}: {label} is {size - 1} bytes, but Linux allows at "
                f"most {MAX_ARG_STRLEN - 1} bytes per argument or environment entry",
                details="pass large data through stdin or a file (write_file) instead",
            )
        total += size + 8
    if total > ARG_MAX - ENV_RESERVE:
        raise CommandStartFailed(
            f"cannot start {argv[0]!r}: its arguments and environment take {total} bytes, but "
            f"Linux allows about {ARG_MAX} bytes in all ({ENV_RESERVE} of them kept for the "
            "container's own environment)",
            details="pass large data through stdin or a file (write_file) instead",
        )


#: What each fault (but ``other``) raises, and why it says the command did not start.
_FAULTS: dict[str, tuple[type[CommandStartFailed], str]] = {
    "path": (CommandNotFound, "it was not found in the sandbox's PATH"),
    "missing": (CommandNotFound,
                "it (or the interpreter its #! line names) does not exist in the sandbox"),
    "notfound": (CommandNotFound, "it was not found in the sandbox (not in its PATH, or the "
                 "interpreter its #! line names is missing)"),
    "notexec": (CommandNotExecutable, "it is not executable (no execute permission, a "
                "directory, or on a noexec mount)"),
    "workdir": (CommandStartFailed, "its working directory {workdir!r} does not exist in the "
                "sandbox (or is not searchable)"),
}


def start_error(name: str, fault: StartFault, *, details: str = "",
                workdir: str = "") -> CommandStartFailed:
    """The typed error for a command ``name`` that did not start because of ``fault``."""
    if fault not in _FAULTS:
        return CommandStartFailed(f"could not start {name!r} in the sandbox", details=details)
    kind, why = _FAULTS[fault]
    return kind(f"cannot start {name!r}: " + why.format(workdir=workdir), details=details)
