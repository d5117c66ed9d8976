"""What runs: the sandboxes the SDK started on the engine (``sandbox ps``) and their live
resource use (``sandbox top``), from the same stats sampler a `Sandbox` uses.

Only containers carrying the SDK's ``managed-by`` label are listed, whoever started them on
this engine; the row and its owner column are `sandbox._ps_rows`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs

from .._constants import (
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_SANDBOX_ID,
)
from .._models import ResourceUsage
from .._owner import Here, created_at, owner_pid
from .._ps_rows import SandboxRow, display_text, owner_state

__all__ = ["SandboxRow", "TopRow", "list_sandboxes", "watch"]

#: Seconds `watch` waits for a new sandbox's first sample before showing it without one.
FIRST_SAMPLE_WAIT = 5.0
_FILTERS = json.dumps({"label": [f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}"]})


@attrs.frozen(kw_only=True)
class TopRow:
    """A sandbox and its latest resource sample (None before the first)."""

    sandbox: SandboxRow
    usage: ResourceUsage | None

    def to_dict(self) -> dict[str, Any]:
        data = self.sandbox.to_dict()
        u = self.usage
        data.update(cpu_percent=round(u.cpu_usage, 1) if u else None,
                    memory_bytes=u.memory_usage if u else None,
                    memory_percent=round(u.memory_percent, 1) if u else None,
                    pids=u.process_count if u else None)
        return data


def row_of(container: Mapping[str, Any], *, here: Here, now: datetime) -> SandboxRow:
    """A `SandboxRow` from one entry of the engine's container list."""
    labels = container.get("Labels") or {}
    labels = {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}
    engine_created = None
    if isinstance(container.get("Created"), int | float):
        engine_created = datetime.fromtimestamp(container["Created"], UTC)
    created = created_at(labels, engine_created)
    names = container.get("Names") or []
    name = names[0].lstrip("/") if isinstance(names, list) and names and \
        isinstance(names[0], str) else ""
    pid = labels.get(LABEL_OWNER_PID, "")
    return SandboxRow(
        id=display_text(labels.get(LABEL_SANDBOX_ID, "")),
        container_id=display_text(container.get("Id")),
        name=display_text(name), image=display_text(container.get("Image")),
        state=display_text(container.get("State")), created=created,
        age_seconds=max((now - created).total_seconds(), 0.0) if created else None,
        owner_pid=owner_pid(pid),
        owner_host=display_text(labels.get(LABEL_OWNER_HOST, "")), owner=owner_state(labels, here),
    )


async def _list(engine: Any, owner: int | None = None) -> list[SandboxRow]:
    found = await engine.query_json("list the SDK's containers", "containers/json",
                                    params={"all": "1", "filters": _FILTERS})
    here, now = Here.current(), datetime.now(UTC)
    rows = [row_of(c, here=here, now=now) for c in found if isinstance(c, Mapping)]
    if owner is not None:
        rows = [r for r in rows if r.owner_pid == owner and r.owner_host == here.host]
    return sorted(rows, key=lambda r: (r.created or now, r.name))


async def list_sandboxes(*, owner: int | None = None) -> list[SandboxRow]:
    """Every container the SDK labelled on the engine at DOCKER_HOST, oldest first; with
    ``owner``, only those the process with that pid (on this host) created."""
    from ._gateway import Engine, new_client

    client = new_client()
    try:
        return await _list(Engine(client), owner)
    finally:
        await client.close()


async def watch(interval: float = 1.0, *, owner: int | None = None,
                ) -> AsyncGenerator[list[TopRow], None]:
    """Every ``interval`` seconds, the running sandboxes and their latest samples.

    One `StatsSampler` (the SDK's own) follows each running sandbox; sandboxes that appear
    or go between refreshes gain or lose theirs. Everything stops when the iteration ends.
    """
    from ._gateway import Engine, new_client
    from ._stats import StatsSampler

    client = new_client()
    engine = Engine(client)
    samplers: dict[str, tuple[StatsSampler, asyncio.Task[None]]] = {}
    try:
        while True:
            rows = [r for r in await _list(engine, owner) if r.state == "running"]
            live = {r.container_id for r in rows}
            for cid in set(samplers) - live:
                samplers.pop(cid)[1].cancel()
            new: list[StatsSampler] = []
            for row in rows:
                if row.container_id not in samplers:
                    sampler = StatsSampler(engine, row.container_id, interval=interval)
                    samplers[row.container_id] = (sampler,
                                                  asyncio.ensure_future(sampler.run()))
                    new.append(sampler)
            # A new sandbox is shown with its first sample (the engine's come every second).
            await asyncio.gather(*(s.wait_first(FIRST_SAMPLE_WAIT) for s in new),
                                 return_exceptions=True)
            yield [TopRow(sandbox=r, usage=samplers[r.container_id][0].latest) for r in rows]
            await asyncio.sleep(interval)
    finally:
        tasks = [task for _, task in samplers.values()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await client.close()
