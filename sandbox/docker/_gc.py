"""Engine side of gc: list what carries the SDK's label, and remove one resource.

Only resources labelled ``io.sandbox.managed-by=sandbox-sdk`` are ever listed, so nothing the
SDK did not create can reach the removal calls.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Literal

import attrs

from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
from .._errors import SandboxError
from .._wire_time import engine_time
from ._gateway import Engine, EngineNotFound

Kind = Literal["container", "network", "volume"]

_FILTERS = json.dumps({"label": [f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"]})


@attrs.frozen(kw_only=True)
class Managed:
    """One resource the engine holds with the SDK's label."""

    kind: Kind
    id: str
    name: str
    labels: Mapping[str, str]
    created: datetime | None
    paused: bool = False


def _ours(labels: Mapping[str, str] | None) -> bool:
    # The engine filtered already; checked again so a filter bug can never widen removal.
    return bool(labels) and (labels or {}).get(LABEL_MANAGED_BY) == LABEL_MANAGED_BY_VALUE


async def list_managed(engine: Engine) -> list[Managed]:
    """Containers, then networks, then volumes carrying the SDK's label (removal order)."""
    found: list[Managed] = []
    containers = await engine.query_json(
        "list the SDK's containers", "containers/json", params={"all": "1", "filters": _FILTERS}
    )
    for c in containers or []:
        labels = c.get("Labels") or {}
        if _ours(labels):
            names = c.get("Names") or [""]
            found.append(Managed(kind="container", id=c["Id"], name=names[0].lstrip("/"),
                                 labels=labels, created=engine_time(c.get("Created")),
                                 paused=c.get("State") == "paused"))
    networks = await engine.query_json(
        "list the SDK's networks", "networks", params={"filters": _FILTERS}
    )
    for n in networks or []:
        labels = n.get("Labels") or {}
        if _ours(labels):
            found.append(Managed(kind="network", id=n["Id"], name=n.get("Name", ""),
                                 labels=labels, created=engine_time(n.get("Created"))))
    volumes = await engine.query_json(
        "list the SDK's volumes", "volumes", params={"filters": _FILTERS}
    )
    for v in (volumes or {}).get("Volumes") or []:
        labels = v.get("Labels") or {}
        if _ours(labels):
            found.append(Managed(kind="volume", id=v["Name"], name=v["Name"], labels=labels,
                                 created=engine_time(v.get("CreatedAt"))))
    return found


async def remove(engine: Engine, item: Managed) -> None:
    """Remove one resource; one that is already gone counts as removed."""
    if item.kind == "container":
        action, path, params = "remove a container", f"containers/{item.id}", \
            {"force": "1", "v": "1"}
    elif item.kind == "network":
        action, path, params = "remove a network", f"networks/{item.id}", {}
    else:
        action, path, params = "remove a volume", f"volumes/{item.id}", {}
    if item.paused:
        # On this engine (cgroup v1) removing a paused container hangs until it is thawed.
        with contextlib.suppress(SandboxError):
            await engine.request("unpause a container", f"containers/{item.id}/unpause", "POST")
    try:
        await engine.request(f"{action} ({item.name or item.id[:12]})", path, "DELETE",
                             params=params or None)
    except EngineNotFound:
        return  # already gone
