"""Find (and remove) what this process created since a moment and has not removed: the check
behind the pytest plugin's leak report.

Unlike `gc`, which only collects what dead owners left, this looks at the resources of the
running process itself, so it is meant for the end of a run (a test session), when nothing of
ours should remain. ``since`` keeps out what an enclosing run made before this one began.
"""

from __future__ import annotations

import os
from datetime import datetime

from .._constants import LABEL_OWNER_HOST, LABEL_OWNER_PID
from .._errors import SandboxError
from .._owner import GcItem, Here, created_at

__all__ = ["leftovers"]


async def leftovers(*, since: datetime, remove: bool = False) -> list[GcItem]:
    """Containers, networks and volumes labelled as this process's, created at or after
    ``since`` (to the second, as the label says), that still exist; removed with ``remove``.

    Raises:
        EngineUnavailable: No engine answers.
    """
    from ._gateway import Engine, new_client
    from ._gc import list_managed
    from ._gc import remove as remove_one

    here, pid = Here.current(), str(os.getpid())
    floor = since.replace(microsecond=0)
    found: list[GcItem] = []
    client = new_client()
    try:
        engine = Engine(client)
        for res in await list_managed(engine):
            labels = res.labels
            if labels.get(LABEL_OWNER_PID) != pid or labels.get(LABEL_OWNER_HOST) != here.host:
                continue
            created = created_at(labels, res.created)
            if created is None or created < floor:
                continue
            reason = "left behind by this process"
            if remove:
                try:
                    await remove_one(engine, res)
                    reason += " (now removed)"
                except SandboxError as exc:
                    reason += f" (removing it failed: {exc})"
            found.append(GcItem(kind=res.kind, id=res.id, name=res.name, reason=reason))
    finally:
        await client.close()
    return found
