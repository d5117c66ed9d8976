"""Sandbox paths: resolution against the working directory, ``copy_files`` arguments, and
``security.tmpfs_paths`` entries.

Backend-neutral: every backend, and the in-memory fake, resolves paths the same way.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence

import attrs

from ._errors import ConfigError, FileOperationFailed

__all__ = ["SANDBOX_SCHEME", "CopyPlan", "parse_copy", "resolve", "tmpfs_entries"]

#: The prefix that marks the sandbox side of ``copy_files``.
SANDBOX_SCHEME = "sandbox:"


def resolve(cwd: str, path: str) -> str:
    """Resolve a sandbox path against the working directory and normalize ``..``."""
    if not path:
        raise FileOperationFailed("an empty path was given", path=path)
    if "\0" in path:
        raise FileOperationFailed("the path contains a NUL byte", path=path)
    try:
        path.encode()
    except UnicodeEncodeError:
        raise FileOperationFailed(
            "the path is not valid Unicode (it holds a lone surrogate)", path=path,
            details="the Engine API carries paths as UTF-8 text; reach such a file with a "
                    "glob in execute_command") from None
    joined = path if path.startswith("/") else posixpath.join(cwd, path)
    norm = posixpath.normpath(joined)
    return "/" + norm.lstrip("/")


@attrs.frozen(kw_only=True)
class CopyPlan:
    """What ``copy_files(source, dest)`` asks for.

    Attributes:
        into_sandbox: True for host -> sandbox, False for sandbox -> host.
        sandbox_path: The sandbox side, resolved to an absolute path.
        host_path: The host side, as given.
    """

    into_sandbox: bool
    sandbox_path: str
    host_path: str


def parse_copy(cwd: str, source: str, dest: str) -> CopyPlan:
    """Tell which side of a copy is in the sandbox (written ``sandbox:/path``) and resolve it."""
    src_in = source.startswith(SANDBOX_SCHEME)
    dst_in = dest.startswith(SANDBOX_SCHEME)
    if src_in == dst_in:
        raise FileOperationFailed(
            "copy_files needs exactly one side in the sandbox, written 'sandbox:/path'",
            path=source, details=f"source={source!r} dest={dest!r}",
        )
    if dst_in:
        return CopyPlan(into_sandbox=True, host_path=source,
                        sandbox_path=resolve(cwd, dest.removeprefix(SANDBOX_SCHEME)))
    return CopyPlan(into_sandbox=False, host_path=dest,
                    sandbox_path=resolve(cwd, source.removeprefix(SANDBOX_SCHEME)))


def tmpfs_entries(entries: Sequence[str]) -> Iterator[tuple[str, str, str]]:
    """``security.tmpfs_paths`` split into (entry, normalized path, options), one at a time:
    each path absolute, not /, and listed once; each backend reads the options its own way."""
    seen: set[str] = set()
    for entry in entries:
        path, _, options = entry.partition(":")
        if not path.startswith("/") or posixpath.normpath(path) == "/":
            raise ConfigError(f"security.tmpfs_paths: {entry!r} must be an absolute path "
                              "other than /")
        path = posixpath.normpath(path)
        if path in seen:
            raise ConfigError(f"security.tmpfs_paths: {path!r} is listed twice")
        seen.add(path)
        yield entry, path, options
