"""Engine side of gc: list what carries the SDK's label, and remove one resource.

Only resources labelled ``io.sandbox.managed-by=sandbox-sdk`` are ever listed, so nothing the
SDK did not create can reach the removal calls.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Literal

import attrs

from .._checkpoint import fork_owner, parse_checkpoint
from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
from .._errors import SandboxError
from .._owner import Collected, GcItem, Here, HostCollector, age_text, owner_verdict
from .._wire_time import engine_time
from ._checkpoint import list_checkpoint_images, remove_image
from ._gateway import DockerClient, Engine, EngineConflict, EngineNotFound, engine_over

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


async def collect(*, dry_run: bool, older_than: timedelta | None,
                  checkpoints_older_than: timedelta | None, here: Here, now: datetime,
                  docker: DockerClient | None) -> Collected:
    """The Docker side of `sandbox.gc`: containers, networks and volumes whose owner is gone,
    and checkpoints by age (or, a fork's, by its maker); a `HostCollector`."""
    async with engine_over(docker) as engine:
        removed: dict[str, list[GcItem]] = {"container": [], "network": [], "volume": []}
        kept: dict[str, list[GcItem]] = {"container": [], "network": [], "volume": []}
        failed: list[GcItem] = []
        for res in await list_managed(engine):
            gone, reason = owner_verdict(res.labels, here=here, created=res.created,
                                         older_than=older_than, now=now)
            item = GcItem(kind=res.kind, id=res.id, name=res.name, reason=reason)
            if not gone:
                kept[res.kind].append(item)
                continue
            if not dry_run:
                try:
                    await remove(engine, res)
                except SandboxError as exc:
                    failed.append(attrs.evolve(item, reason=f"{reason}, but removing it "
                                                            f"failed: {exc}"))
                    continue
            removed[res.kind].append(item)
        old_checkpoints = await _collect_checkpoints(
            engine, checkpoints_older_than, now=now, dry_run=dry_run, failed=failed,
            here=here, older_than=older_than)
    return Collected(
        removed=(*removed["container"], *removed["network"], *removed["volume"],
                 *old_checkpoints[0]),
        kept=(*kept["container"], *kept["network"], *kept["volume"], *old_checkpoints[1]),
        failed=tuple(failed))


async def _collect_checkpoints(
    engine: Engine, by_age: timedelta | None, *, now: datetime, dry_run: bool,
    failed: list[GcItem], here: Here, older_than: timedelta | None,
) -> tuple[list[GcItem], list[GcItem]]:
    """Remove the fork checkpoints whose maker is gone, and (``by_age`` given) the
    checkpoints at least that old: (removed, kept); failures to ``failed``."""
    removed: list[GcItem] = []
    kept: list[GcItem] = []
    for image in await list_checkpoint_images(engine):
        point = parse_checkpoint(image)
        if point is None:
            continue  # labelled, but not a checkpoint the SDK can vouch for: never touched
        item = GcItem(kind="checkpoint", id=point.image_id, name=point.name, reason="")
        owner = fork_owner(image.get("Labels") or {})
        if owner:  # a fork's, to go with its forks: judged by its maker, like a container
            gone, reason = owner_verdict(owner, here=here, created=point.created,
                                         older_than=older_than, now=now)
            reason = f"a fork's checkpoint: {reason}"
            if not gone:
                if by_age is not None:  # else no checkpoint is reported, as before
                    kept.append(attrs.evolve(item, reason=reason))
                continue
        elif by_age is None:
            continue
        elif point.created is None:
            kept.append(attrs.evolve(item, reason="its age is unknown"))
            continue
        elif (age := now - point.created) < by_age:
            kept.append(attrs.evolve(item, reason=f"it is only {age_text(age)} old (younger "
                                                  f"than {age_text(by_age)})"))
            continue
        else:
            reason = f"it is {age_text(age)} old"
        if not dry_run:
            try:
                await remove_image(engine, point.image)
            except EngineConflict:
                kept.append(attrs.evolve(item, reason=f"{reason}, but a container uses it"))
                continue
            except SandboxError as exc:
                failed.append(attrs.evolve(item, reason=f"{reason}, but removing it failed: "
                                                        f"{exc}"))
                continue
        removed.append(attrs.evolve(item, reason=reason))
    return removed, kept


#: What `sandbox.gc` runs (see `sandbox._registry.HOST_COLLECTORS`).
COLLECTOR: HostCollector = collect
