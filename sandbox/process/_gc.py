"""gc's process side: the state directories (and cgroups) that dead owners left behind.

A process sandbox's bwrap dies with its owner (``--die-with-parent``), so an owner killed hard
leaves no process, only its state directory (with ``owner.json``, the same owner labels as a
container's) and its cgroup directories. They are judged by the same owner rules as
containers (`sandbox._owner.owner_verdict`) and removed with `_state.remove_state`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from .._owner import Collected, GcItem, Here, HostCollector, owner_verdict
from ._rootfs import prune_cache
from ._state import leftovers, read_owner, remove_state

__all__ = ["COLLECTOR", "collect"]


async def collect(*, dry_run: bool, older_than: timedelta | None,
                  checkpoints_older_than: timedelta | None, here: Here, now: datetime,
                  docker: Any = None) -> Collected:
    """Process sandboxes removed, kept and failed, as `GcItem` values of kind "process"; a
    `HostCollector` (it keeps no checkpoints and needs no engine)."""
    removed: list[GcItem] = []
    kept: list[GcItem] = []
    failed: list[GcItem] = []
    for state in leftovers():
        gone, reason = owner_verdict(read_owner(state), here=here, older_than=older_than,
                                     now=now)
        item = GcItem(kind="process", id=state.name, name=str(state), reason=reason)
        if not gone:
            kept.append(item)
            continue
        errors = [] if dry_run else remove_state(state)
        if errors:
            failed.append(GcItem(kind="process", id=state.name, name=str(state),
                                 reason=f"{reason}, but removing it failed: "
                                        f"{'; '.join(errors)}"))
        else:
            removed.append(item)
    # The rootfs cache: entries for images the engine no longer has.
    pruned, left, broken = await prune_cache(dry_run=dry_run, docker=docker)
    for found, into in ((pruned, removed), (left, kept), (broken, failed)):
        into += [GcItem(kind="rootfs", id=e.image_id, name=str(e.path), reason=why)
                 for e, why in found]
    return Collected(removed=tuple(removed), kept=tuple(kept), failed=tuple(failed))


#: What `sandbox.gc` runs (see `sandbox._registry.HOST_COLLECTORS`).
COLLECTOR: HostCollector = collect
