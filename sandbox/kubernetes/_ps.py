"""``sandbox ps`` on Kubernetes: the SDK's Pods in every place a sandbox of this host recorded.

The places are the ones `sandbox.gc` looks in (`sandbox._places`), believed by the same rules
(`reachable`): a record or a kubeconfig others could write is ignored, so a credential plugin
an attacker put in one never runs. Listing changes nothing, not even a record whose kubeconfig
is gone. The row and its owner column are `sandbox._ps_rows`'s, as for Docker. Places are
looked at concurrently, each within `PLACE_DEADLINE` (connect and list): N clusters that
do not answer cost one deadline, not N, and one place's failure is that place's warning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from .._constants import (
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_SANDBOX_ID,
)
from .._errors import SandboxError
from .._owner import Here, created_at, owner_pid
from .._places import recorded
from .._ps_rows import PlaceLister, SandboxRow, display_text, owner_state
from .._wire_time import engine_time
from ._gc import BACKEND, PLACE_DEADLINE, connect_place, reachable
from ._plan import CONTAINER

__all__ = ["LISTER", "list_sandboxes", "row_of"]

log = logging.getLogger("sandbox.ps")


def _strings(value: object) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def row_of(pod: Mapping[str, Any], *, place: Mapping[str, Any], here: Here,
           now: datetime) -> SandboxRow:
    """A `SandboxRow` from one Pod of the API server's list (untrusted text: each shown
    string is cut and made printable)."""
    meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    status = _mapping(pod.get("status"))
    labels, notes = _strings(meta.get("labels")), _strings(meta.get("annotations"))
    containers = [c for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    image = next((c.get("image") for c in containers if c.get("name") == CONTAINER),
                 containers[0].get("image") if containers else "")
    state = "terminating" if meta.get("deletionTimestamp") else \
        str(status.get("phase") or "unknown").lower()
    created = created_at(notes, engine_time(meta.get("creationTimestamp")))
    pid = notes.get(LABEL_OWNER_PID, "")
    return SandboxRow(
        id=display_text(labels.get(LABEL_SANDBOX_ID, "")),
        container_id=display_text(meta.get("uid")),
        name=display_text(f"{meta.get('namespace') or place.get('namespace')}/"
                          f"{meta.get('name')}"),
        image=display_text(image), state=display_text(state), created=created,
        age_seconds=max((now - created).total_seconds(), 0.0) if created else None,
        owner_pid=owner_pid(pid),
        owner_host=display_text(notes.get(LABEL_OWNER_HOST, "")),
        owner=owner_state(notes, here), type=BACKEND, place=dict(place))


async def _pods_in(spot: Mapping[str, Any], namespace: str) -> list[Mapping[str, Any]]:
    """The SDK's Pods in one recorded place: connect and list within `PLACE_DEADLINE`; []
    with a warning when that fails."""
    try:
        async with asyncio.timeout(PLACE_DEADLINE):
            cluster = await connect_place(spot)
            try:
                found = await cluster.call(
                    "list the SDK's Pods", "GET", f"/api/v1/namespaces/{namespace}/pods",
                    query=[("labelSelector", f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}")],
                    deadline=PLACE_DEADLINE)
            finally:
                await cluster.close()
    except (SandboxError, TimeoutError) as exc:
        why = exc if isinstance(exc, SandboxError) else \
            f"no answer within {PLACE_DEADLINE:g} s"
        log.warning("ps: cannot look in Kubernetes namespace %r (kubeconfig %s): %s",
                    namespace, spot.get("kubeconfig") or "in-cluster", why)
        return []
    items = found.get("items")
    return [p for p in items if isinstance(p, Mapping)] if isinstance(items, list) else []


async def list_sandboxes(*, owner: int | None, here: Here, now: datetime) -> list[SandboxRow]:
    """The SDK's Pods in every recorded place (a `PlaceLister`); with ``owner``, only those
    the process with that pid on this host created. A place that cannot be reached (in
    `PLACE_DEADLINE`) is skipped with a warning; places are looked at concurrently."""
    spots: list[tuple[Mapping[str, Any], str]] = []
    for spot in recorded(BACKEND):
        namespace = str(spot.get("namespace") or "default")
        if why := reachable(spot, forget_gone=False):
            log.info("ps: not looking in Kubernetes namespace %r: %s", namespace, why)
            continue
        spots.append((spot, namespace))
    async with asyncio.TaskGroup() as group:
        looks = [group.create_task(_pods_in(spot, ns)) for spot, ns in spots]
    rows: dict[str, SandboxRow] = {}  # by uid: two records may name one cluster
    for (where, _ns), look in zip(spots, looks, strict=True):
        for pod in look.result():
            row = row_of(pod, place=where, here=here, now=now)
            rows.setdefault(row.container_id or f"{len(rows)}", row)
    return [r for r in rows.values()
            if owner is None or (r.owner_pid == owner and r.owner_host == here.host)]


#: What ``sandbox ps`` runs (see `sandbox._registry.PLACE_LISTERS`).
LISTER: PlaceLister = list_sandboxes
