"""Deadlines for many short awaits on one event-loop timer.

An engine call takes a millisecond and nearly always ends long before its deadline (tens of
seconds). ``asyncio.timeout`` schedules a timer per call and cancels it after: a handle built,
pushed on the loop's heap (whose order Python compares, handle by handle) and left there
cancelled until the heap is rebuilt; three of them per exec were a fifth of the SDK's own CPU
per command. A `DeadlineKeeper` keeps one timer, armed at the earliest deadline it was given:
a call's deadline is a set entry added and dropped, and the timer is re-armed only when a call
needs an earlier deadline than the one armed. When it fires it expires every deadline due,
exactly as ``asyncio.Timeout`` does (``Task.cancel()``, then a ``TimeoutError`` where the
block ends if no other cancel came meanwhile, told apart by the task's cancel count), and
arms itself for the earliest one left.

asyncio only (the engine's client, aiohttp, runs on asyncio alone).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

__all__ = ["Deadline", "DeadlineKeeper"]


class Deadline:
    """One block's deadline, kept by a `DeadlineKeeper`: `start` it with the task to cancel
    (the current one), `end` it where the block ends (always), then `expired` says whether it
    fired. A class to inherit too (the engine's call is its own deadline: one object less)."""

    __slots__ = ("_cancelling", "_keeper", "_task", "expired", "when")

    def start(self, keeper: DeadlineKeeper, seconds: float, task: asyncio.Task[Any]) -> None:
        """Cancel ``task`` (the current one) ``seconds`` from now (inf: never) unless `end`
        came first."""
        self._keeper, self._task, self.expired = keeper, task, False
        self._cancelling = task.cancelling()
        if seconds == math.inf:
            self.when = math.inf
        else:
            self.when = keeper.loop.time() + seconds
            keeper._add(self)

    def end(self, exc: BaseException | None) -> bool:
        """The block ended with ``exc`` (None: normally); True when that is the deadline's
        own cancellation, to be raised as a timeout (as ``asyncio.Timeout`` does)."""
        self._keeper._live.discard(self)
        if not self.expired:
            return False
        return self._task.uncancel() <= self._cancelling and \
            isinstance(exc, asyncio.CancelledError)

    def _expire(self) -> None:
        self.expired = True
        self._task.cancel()


class DeadlineKeeper:
    """The deadlines of one event loop's blocks, on one timer (see the module)."""

    __slots__ = ("_armed", "_handle", "_live", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._live: set[Deadline] = set()
        self._handle: asyncio.TimerHandle | None = None
        self._armed = math.inf  # when the timer fires (inf: not armed)

    def _add(self, deadline: Deadline) -> None:
        self._live.add(deadline)
        if deadline.when < self._armed:
            if self._handle is not None:
                self._handle.cancel()
            self._armed = deadline.when
            self._handle = self.loop.call_at(deadline.when, self._fire)

    def _fire(self) -> None:
        self._handle, self._armed = None, math.inf
        now = self.loop.time()
        earliest = math.inf
        for deadline in list(self._live):
            if deadline.when <= now:
                self._live.discard(deadline)
                deadline._expire()
            elif deadline.when < earliest:
                earliest = deadline.when
        if earliest != math.inf:
            self._armed = earliest
            self._handle = self.loop.call_at(earliest, self._fire)
