"""Repository globs: which paths of a host tree a sandbox gets from include and exclude patterns.

Pure logic on POSIX paths relative to the repository root (plus a walk of a host directory), so
every backend selects files the same way.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = ["PathFilter", "compile_glob", "select_entries"]


def _segment_regex(segment: str) -> str:
    """Translate one path segment of a glob: ``*`` and ``?`` never cross a ``/``."""
    out: list[str] = []
    i, n = 0, len(segment)
    while i < n:
        c = segment[i]
        i += 1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            j = i
            if j < n and segment[j] in "!^":
                j += 1
            if j < n and segment[j] == "]":
                j += 1
            while j < n and segment[j] != "]":
                j += 1
            if j >= n:
                out.append(re.escape(c))
                continue
            body = segment[i:j]
            i = j + 1
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            body = body.replace("\\", "\\\\")
            out.append(f"[{'^/' if negate else ''}{body}]")
        else:
            out.append(re.escape(c))
    return "".join(out)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """Compile a repository glob into a regex over POSIX paths relative to the root.

    ``*``, ``?`` and ``[...]`` match within one segment, ``**`` any number of segments. A
    pattern without a ``/`` matches a name at any depth (as in ``.gitignore``); one with a
    ``/`` is anchored at the root. A trailing ``/`` is ignored.
    """
    cleaned = pattern.strip()
    if not cleaned or cleaned in ("/", "./"):
        raise ValueError(f"empty glob pattern {pattern!r}")
    anchored = "/" in cleaned.rstrip("/")
    cleaned = cleaned.strip("/")
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    parts = [p for p in cleaned.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise ValueError(f"glob pattern {pattern!r} must stay inside the repository")
    regex = "" if anchored else "(?:.*/)?"
    for k, part in enumerate(parts):
        last = k == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]+/)*"
        else:
            regex += _segment_regex(part) + ("" if last else "/")
    return re.compile(regex)


def _ancestors_and_self(rel: str) -> Iterable[str]:
    """Yield ``a``, ``a/b``, ``a/b/c`` for ``a/b/c``."""
    parts = rel.split("/")
    for k in range(1, len(parts) + 1):
        yield "/".join(parts[:k])


class PathFilter:
    """Decides which repository paths the sandbox gets from include and exclude globs.

    A pattern that matches a directory covers everything below it. Empty ``include`` selects
    everything; ``exclude`` always wins.
    """

    def __init__(self, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> None:
        self.include = [compile_glob(p) for p in include]
        self.exclude = [compile_glob(p) for p in exclude]

    @staticmethod
    def _hits(patterns: Sequence[re.Pattern[str]], rel: str) -> bool:
        return any(p.fullmatch(a) for a in _ancestors_and_self(rel) for p in patterns)

    def excluded(self, rel: str) -> bool:
        """The path or one of its ancestors matches an exclude pattern."""
        return self._hits(self.exclude, rel)

    def selects(self, rel: str) -> bool:
        """The sandbox gets this path (a POSIX path relative to the repository root)."""
        if self.excluded(rel):
            return False
        return not self.include or self._hits(self.include, rel)


def select_entries(root: Path, path_filter: PathFilter) -> list[str]:
    """List what the sandbox gets under ``root``, parents before children, never following links.

    Files and symlinks are listed when selected; a directory when it is selected itself or holds
    something selected (an excluded directory is never entered).
    """
    chosen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        base = Path(dirpath).relative_to(root).as_posix()
        base = "" if base == "." else base
        keep_dirs: list[str] = []
        for name in dirnames:
            rel = posixpath.join(base, name) if base else name
            if path_filter.excluded(rel):
                continue
            if os.path.islink(os.path.join(dirpath, name)):
                filenames.append(name)  # a link to a directory is copied as a link
                continue
            keep_dirs.append(name)
            if path_filter.selects(rel):
                chosen.add(rel)
        dirnames[:] = keep_dirs
        for name in filenames:
            rel = posixpath.join(base, name) if base else name
            if path_filter.selects(rel):
                chosen.add(rel)
                chosen.update(list(_ancestors_and_self(rel))[:-1])
    return sorted(chosen, key=lambda r: (r.count("/"), r))
