"""A sandbox process's environment as the host's kill sweeps read it: bounded, and searched for
one entry without splitting it (shared by the Docker host kill and the process backend).

A process chooses what its environment file shows: ``prctl(PR_SET_MM, PR_SET_MM_MAP)`` moves
``env_start``/``env_end`` over any memory of its own, without a capability (measured inside
Docker's default seccomp profile, as the sandbox user). Read whole and split at each NUL, a 1.5
GiB "environment" took a root SDK from 44 MiB to 13.9 GiB and 41 s at one session timeout (the
round 11 review). So at most `MAX_ENVIRON` bytes are read, and the entry is found by a search.
The same move can hide a command's marker from the sweep: such a process outlives its command's
timeout (not its sandbox's end); see docs/security.md.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["MAX_ENVIRON", "has_entry", "has_name", "read_environ_file"]

#: The most bytes of one process's environment read: an exec's arguments and environment
#: together are bounded by a quarter of its stack limit (2 MiB at the usual 8 MiB).
MAX_ENVIRON = 4 << 20


def has_entry(environ: bytes, entry: bytes) -> bool:
    """Whether the NUL-separated ``environ`` holds ``entry`` ("NAME=value") exactly."""
    return environ.startswith(entry + b"\0") or b"\0" + entry + b"\0" in environ or \
        environ == entry or environ.endswith(b"\0" + entry)


def has_name(environ: bytes, name: bytes) -> bool:
    """Whether the NUL-separated ``environ`` sets the variable ``name``, to any value."""
    return environ.startswith(name + b"=") or b"\0" + name + b"=" in environ


def read_environ_file(path: str | Path) -> bytes:
    """The first `MAX_ENVIRON` bytes of an ``environ`` file (OSError: it cannot be read)."""
    with open(path, "rb") as f:
        return f.read(MAX_ENVIRON)
