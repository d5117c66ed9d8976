"""gc's process side: the state directories (and cgroups) that dead owners left behind.

A process sandbox's bwrap dies with its owner (``--die-with-parent``), so an owner killed hard
leaves no process, only its state directory (with ``owner.json``, the same owner labels as a
container's) and its cgroup directories. They are judged by the same owner rules as
containers (`sandbox._gc.owner_verdict`) and removed with `_state.remove_state`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ._state import leftovers, read_owner, remove_state

__all__ = ["collect"]


def collect(*, dry_run: bool, older_than: timedelta | None, here: Any,
            now: datetime) -> tuple[list[Any], list[Any], list[Any]]:
    """(removed, kept, failed) process sandboxes, as `GcItem` values of kind "process"."""
    from .._gc import GcItem, owner_verdict

    removed: list[Any] = []
    kept: list[Any] = []
    failed: list[Any] = []
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
    return removed, kept, failed
