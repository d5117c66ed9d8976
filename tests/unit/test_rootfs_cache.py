"""The process backend's rootfs cache stays under its cap (least recently used first), never
loses an entry a sandbox has mounted, and gc prunes entries whose image is gone.

Before: the cache only grew (567 MB, half of it images that no longer existed) and nothing
pruned it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sandbox.process._rootfs_cache import entries, evict, in_use, prune_missing, touch

MiB = 1 << 20


def _entry(cache: Path, name: str, size: int, used: float, image: str = "img") -> Path:
    path = cache / (name * 64)[:64]
    (path / "rootfs").mkdir(parents=True)
    (path / "rootfs" / "blob").write_bytes(os.urandom(size))
    (path / "image.json").write_text(json.dumps({"image": image}))  # no size: measured
    touch(path)
    os.utime(path / "last-used", (used, used))
    return path


def test_over_the_cap_the_least_recently_used_go_first(tmp_path: Path) -> None:
    old = _entry(tmp_path, "a", 2 * MiB, used=1000)
    middle = _entry(tmp_path, "b", 2 * MiB, used=2000)
    new = _entry(tmp_path, "c", 2 * MiB, used=3000)
    assert [e.path for e in entries(tmp_path)] == [old, middle, new]
    gone = evict(tmp_path, 5 * MiB, keep=(), mounted=set())
    assert [e.path for e, _ in gone] == [old]
    assert "least recently used" in gone[0][1]
    assert not old.exists() and middle.exists() and new.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".evict")]


def test_a_mounted_or_kept_entry_is_never_evicted(tmp_path: Path) -> None:
    mounted = _entry(tmp_path, "a", 2 * MiB, used=1000)
    just_made = _entry(tmp_path, "b", 2 * MiB, used=2000)
    other = _entry(tmp_path, "c", 2 * MiB, used=3000)
    gone = evict(tmp_path, 1, keep=(just_made.name,), mounted={mounted.name})
    assert [e.path for e, _ in gone] == [other]
    assert mounted.exists() and just_made.exists()


def test_under_the_cap_nothing_goes(tmp_path: Path) -> None:
    _entry(tmp_path, "a", MiB, used=1000)
    assert evict(tmp_path, 100 * MiB, mounted=set()) == []
    assert evict(tmp_path, 0, mounted=set()) == []  # 0: no cap


def test_gc_prunes_entries_whose_image_is_gone(tmp_path: Path) -> None:
    kept = _entry(tmp_path, "a", MiB, used=1000, image="still-here:1")
    gone = _entry(tmp_path, "b", MiB, used=1000, image="deleted:1")
    busy = _entry(tmp_path, "c", MiB, used=1000, image="deleted:2")
    present = {"sha256:" + kept.name}
    removed, left, failed = prune_missing(tmp_path, present, dry_run=True,
                                          mounted={busy.name})
    assert [e.path for e, _ in removed] == [gone] and gone.exists()  # dry run
    assert "deleted:1" in removed[0][1]
    removed, left, failed = prune_missing(tmp_path, present, dry_run=False,
                                          mounted={busy.name})
    assert [e.path for e, _ in removed] == [gone] and not gone.exists()
    assert {e.path for e, _ in left} == {kept, busy} and failed == []
    assert any("mounted" in why for e, why in left if e.path == busy)


def test_a_mount_of_an_entry_is_seen_in_mountinfo(tmp_path: Path) -> None:
    """What keeps a live sandbox's root from being deleted under it: a real bind mount of
    the entry, in a mount namespace of its own, as bwrap makes it."""
    if os.getuid() != 0:
        pytest.fail("needs root (make test runs as root)")
    entry = _entry(tmp_path, "d", 4096, used=1000)
    target = tmp_path / "mnt"
    target.mkdir()
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f"mount --bind {entry / 'rootfs'} {target} && echo ready && exec sleep 600"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        assert entry.name in in_use(tmp_path)
        assert evict(tmp_path, 1) == [] and entry.exists()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert entry.name not in in_use(tmp_path)
