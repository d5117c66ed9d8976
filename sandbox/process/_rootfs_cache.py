"""The rootfs cache's upkeep: a size cap with least-recently-used eviction, and gc's pruning
of entries whose image the engine no longer has.

Each entry is ``<cache>/<image id hex>/`` (``rootfs/`` and ``image.json``, which records the
image's name and the entry's size in bytes). Using an entry touches its ``last-used`` file
(at most once a minute per image and process: `resolve_rootfs` caches names). After each
export the cache is cut back under `max_bytes` (``SANDBOX_ROOTFS_CACHE_MAX``, default 2 GiB),
oldest use first. An entry a sandbox has mounted (seen in any process's mountinfo) is never
removed, whatever its age; an entry is renamed away before it is deleted, so a half-deleted
one is never taken for a complete export.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

import attrs

from .._rmtree import remove_tree

__all__ = ["DEFAULT_MAX_BYTES", "Entry", "entries", "evict", "in_use", "max_bytes",
           "prune_missing", "record_size", "touch", "tree_size"]

log = logging.getLogger("sandbox.process")

#: The cap when ``SANDBOX_ROOTFS_CACHE_MAX`` does not set one (the SDK's python image is
#: ~300 MB exported, busybox ~2 MB).
DEFAULT_MAX_BYTES = 2 << 30
_LAST_USED = "last-used"
_META = "image.json"


@attrs.frozen
class Entry:
    """One exported image in the cache."""

    path: Path
    image: str
    size: int
    last_used: float

    @property
    def image_id(self) -> str:
        return "sha256:" + self.path.name


def max_bytes() -> int:
    """The cap: ``SANDBOX_ROOTFS_CACHE_MAX`` in bytes (0: no cap), else `DEFAULT_MAX_BYTES`."""
    raw = os.environ.get("SANDBOX_ROOTFS_CACHE_MAX", "").strip()
    try:
        return int(raw) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        log.warning("SANDBOX_ROOTFS_CACHE_MAX=%r is not a number of bytes; using %d", raw,
                    DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES


def tree_size(root: Path) -> int:
    """Bytes ``root`` takes on disk (allocated blocks; hard links counted once)."""
    total, seen = 0, set()
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(top, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
    return total


def record_size(entry: Path, image: str) -> int:
    """Measure ``entry/rootfs`` and write ``image.json`` with the size; return it."""
    size = tree_size(entry / "rootfs")
    (entry / _META).write_text(json.dumps({"image": image, "bytes": size}))
    return size


def touch(entry: Path) -> None:
    """Mark ``entry`` used now (best effort: a read-only cache is still usable)."""
    with contextlib.suppress(OSError):
        (entry / _LAST_USED).touch()


def entries(cache: Path) -> list[Entry]:
    """Every complete entry of ``cache``, least recently used first."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for path in cache.iterdir():
            if path.name.startswith(".") or not (path / "rootfs").is_dir():
                continue
            try:
                meta = json.loads((path / _META).read_text())
            except (OSError, ValueError):
                meta = {}
            size = meta.get("bytes")
            if not isinstance(size, int):  # an entry exported before sizes were recorded
                size = tree_size(path / "rootfs")
                with contextlib.suppress(OSError):
                    (path / _META).write_text(json.dumps({**meta, "bytes": size}))
            used = path / _LAST_USED
            try:
                last = used.stat().st_mtime
            except OSError:
                last = path.stat().st_mtime
            out.append(Entry(path=path, image=str(meta.get("image", "")), size=size,
                             last_used=last))
    return sorted(out, key=lambda e: e.last_used)


def in_use(cache: Path) -> set[str]:
    """Names of the entries some process has mounted (an overlay's lower dir, a bind).

    An entry's name (the image id's 64 hex digits) is looked for anywhere in every
    process's mountinfo: a bind's path there may be relative to another filesystem's root.
    """
    names = {path.name for path in _dirs(cache)}
    found: set[str] = set()
    with contextlib.suppress(FileNotFoundError):
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or found == names:
                continue
            try:
                with open(f"/proc/{pid}/mountinfo") as f:
                    text = f.read()
            except OSError:
                continue
            found |= {name for name in names - found if name in text}
    return found


def _dirs(cache: Path) -> list[Path]:
    with contextlib.suppress(FileNotFoundError):
        return [p for p in cache.iterdir() if not p.name.startswith(".") and p.is_dir()]
    return []


def _remove(entry: Entry) -> str:
    """Rename the entry away (atomically), then delete it; "" or what was left."""
    doomed = entry.path.with_name(f".evict-{entry.path.name}-{uuid.uuid4().hex[:8]}")
    try:
        entry.path.rename(doomed)
    except FileNotFoundError:
        return ""  # another process removed it first
    except OSError as exc:
        return str(exc)
    return "; ".join(remove_tree(doomed))


def _human(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def evict(cache: Path, limit: int, *, keep: Iterable[str] = (),
          mounted: set[str] | None = None) -> list[tuple[Entry, str]]:
    """Remove least recently used entries until the cache is at most ``limit`` bytes.

    ``keep`` names entries never removed (the one just exported); ``mounted`` defaults to
    `in_use`. Returns each removed entry with the reason (also logged at INFO).
    """
    if limit <= 0:
        return []
    found = entries(cache)
    total = sum(e.size for e in found)
    if total <= limit:
        return []
    busy = (in_use(cache) if mounted is None else mounted) | set(keep)
    removed = []
    for entry in found:
        if total <= limit:
            break
        if entry.path.name in busy:
            continue
        reason = (f"the rootfs cache held {_human(total)}, over its cap of {_human(limit)} "
                  f"(SANDBOX_ROOTFS_CACHE_MAX); this entry was the least recently used")
        problem = _remove(entry)
        if problem:
            log.warning("rootfs cache: could not evict %s (%s): %s", entry.path, entry.image,
                        problem)
            continue
        total -= entry.size
        log.info("rootfs cache: evicted %s (%s, %s): %s", entry.path.name[:12], entry.image,
                 _human(entry.size), reason)
        removed.append((entry, reason))
    return removed


def prune_missing(cache: Path, present: set[str], *, dry_run: bool,
                  mounted: set[str] | None = None
                  ) -> tuple[list[tuple[Entry, str]], list[tuple[Entry, str]],
                             list[tuple[Entry, str]]]:
    """(removed, kept, failed) entries, by whether the engine still has their image.

    ``present`` is the engine's image ids (``sha256:...``). An entry whose image is gone is
    removed unless a sandbox has it mounted; one whose image exists is kept.
    """
    busy = in_use(cache) if mounted is None else mounted
    removed: list[tuple[Entry, str]] = []
    kept: list[tuple[Entry, str]] = []
    failed: list[tuple[Entry, str]] = []
    for entry in entries(cache):
        if entry.image_id in present:
            kept.append((entry, f"the engine still has its image ({entry.image or '?'})"))
        elif entry.path.name in busy:
            kept.append((entry, "its image is gone from the engine, but a running sandbox "
                                "has it mounted"))
        else:
            reason = (f"its image ({entry.image or '?'}) is no longer on the engine; "
                      f"frees {_human(entry.size)}")
            problem = "" if dry_run else _remove(entry)
            (failed if problem else removed).append(
                (entry, f"{reason}, but removing it failed: {problem}" if problem else reason))
    return removed, kept, failed
