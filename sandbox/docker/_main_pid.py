"""The container's main process id after start, read with one inspect and shared.

The result finisher (a command's usage from the cgroup) and the stats sampler (the one
host sampler) both find the container's cgroup through its main process; each did its own
inspect, one of them in front of the sandbox's first command. A sandbox's container never
restarts (a stop fails the sandbox), so one answer holds for its life. The event watcher's
first look (an inspect it makes anyway) offers the pid too; the sampler waits a moment for
that offer instead of making a second inspect beside it at every sandbox's start.
"""

from __future__ import annotations

from typing import Final

import anyio

from ._gateway import Engine

__all__ = ["MainPid"]

#: Seconds `MainPid.get` waits for an expected offer before asking the engine itself.
OFFER_PATIENCE: Final = 2.0


class MainPid:
    """One inspect for every caller that needs ``State.Pid`` (concurrent callers share it;
    a failed inspect is not kept, so the next caller asks again)."""

    def __init__(self, engine: Engine, container_id: str) -> None:
        self._engine, self._container_id = engine, container_id
        self._pid: int | None = None
        self._lock = anyio.Lock()
        self._offered: anyio.Event | None = None

    def expect_offer(self) -> None:
        """An inspect made anyway (the event watcher's first look) is about to `offer` the
        pid: ``get(wait_offer=True)`` waits for it (at most `OFFER_PATIENCE` seconds)."""
        if self._pid is None and self._offered is None:
            self._offered = anyio.Event()

    def offer(self, pid: int) -> None:
        """An inspect made for another reason (the event watcher's first look) gave the pid."""
        if self._pid is None and pid > 0:
            self._pid = pid
        if self._offered is not None:
            self._offered.set()

    async def get(self, *, deadline: float = 5.0, wait_offer: bool = False) -> int:
        """The main process's pid on the engine's host (0 when it is not running); with
        ``wait_offer``, an expected offer is waited for first (for callers not in a hurry)."""
        if self._pid is None and wait_offer and self._offered is not None:
            with anyio.move_on_after(OFFER_PATIENCE):
                await self._offered.wait()
        if self._pid is None:
            async with self._lock:
                if self._pid is None:
                    data = await self._engine.query_json(
                        "inspect the sandbox", f"containers/{self._container_id}/json",
                        deadline=deadline)
                    self._pid = int((data.get("State") or {}).get("Pid") or 0)
        return self._pid
