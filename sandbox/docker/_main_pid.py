"""The container's main process id after start, read with one inspect and shared.

The result finisher (a command's usage from the cgroup) and the stats sampler (the one
host sampler) both find the container's cgroup through its main process; each did its own
inspect, one of them in front of the sandbox's first command. A sandbox's container never
restarts (a stop fails the sandbox), so one answer holds for its life.
"""

from __future__ import annotations

import anyio

from ._gateway import Engine

__all__ = ["MainPid"]


class MainPid:
    """One inspect for every caller that needs ``State.Pid`` (concurrent callers share it;
    a failed inspect is not kept, so the next caller asks again)."""

    def __init__(self, engine: Engine, container_id: str) -> None:
        self._engine, self._container_id = engine, container_id
        self._pid: int | None = None
        self._lock = anyio.Lock()

    def offer(self, pid: int) -> None:
        """An inspect made for another reason (the event watcher's first look) gave the pid."""
        if self._pid is None and pid > 0:
            self._pid = pid

    async def get(self, *, deadline: float = 5.0) -> int:
        """The main process's pid on the engine's host (0 when it is not running)."""
        if self._pid is None:
            async with self._lock:
                if self._pid is None:
                    data = await self._engine.query_json(
                        "inspect the sandbox", f"containers/{self._container_id}/json",
                        deadline=deadline)
                    self._pid = int((data.get("State") or {}).get("Pid") or 0)
        return self._pid
