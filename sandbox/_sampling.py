"""One background sampler per event loop for every sandbox that samples: idle ones cost ~nothing.

A task per sandbox (a wake-up, a thread hop and a scan every interval) made the samplers of 300
idle process sandboxes take 1.5 of this host's 2 cores. Here a sandbox joins the `Hub` of its
event loop instead; one task wakes when the earliest member is due, reads every due member in
one worker-thread call (files only: cgroup and /proc), then publishes on the loop. A member
makes an idle reading cheap itself (one counter file unchanged: the last sample, restamped).
The hub's task exists only while it has members.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import copy
import inspect
import logging
import math
import time
import weakref
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeVar

import anyio
import anyio.abc

from ._models import ResourceUsage

__all__ = ["History", "Hub", "Member", "hub", "restamped", "run_callback"]

log = logging.getLogger("sandbox.stats")
_T = TypeVar("_T")


class Member(Protocol):
    """A sandbox's sampler as the hub drives it."""

    @property
    def interval(self) -> float:
        """Seconds between samples."""
        ...

    def read(self) -> object:
        """Take a reading (in a worker thread, alongside other members: files only)."""
        ...

    def publish(self, reading: object) -> Awaitable[None] | None:
        """Keep the reading (on the loop); an awaitable (a callback) runs on its own."""
        ...


async def run_callback(callback: Callable[[_T], object] | None, value: _T) -> None:
    """Call ``callback`` (sync or async) with ``value``; one that raises is logged."""
    if callback is None:
        return
    try:
        result = callback(value)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("the on_sample callback failed; sampling goes on")


def restamped(base: ResourceUsage, timestamp: datetime, uptime: float,
              cpu_ns: int | None = None, cpu_usage: float = 0.0) -> ResourceUsage:
    """``base`` taken again at ``timestamp`` by a sandbox that ran (next to) nothing since: the
    same counters, and ``cpu_ns``/``cpu_usage`` when given. A copy: its values are valid, and
    `attrs.evolve` re-runs every converter and validator (~10x the time, which 300 idle
    sandboxes a second feel)."""
    new = copy.copy(base)
    object.__setattr__(new, "timestamp", timestamp)
    object.__setattr__(new, "cpu_usage", max(cpu_usage, 0.0))
    object.__setattr__(new, "uptime", timedelta(seconds=max(uptime, 0.0)))
    if cpu_ns is not None:
        object.__setattr__(new, "cpu_time", timedelta(microseconds=max(cpu_ns, 0) / 1000))
    return new


#: An idle sample as kept: (time.time(), uptime s, cpu ns or None, cpu %). Only atomic values,
#: so the garbage collector stops tracking it: 1,000 sandboxes keep 600,000 of them.
_Idle = tuple[float, float, "int | None", float]


class History:
    """The last ``size`` samples. An idle one is kept as a stamp on the sample before it (a
    sandbox that ran nothing since has the same counters) and made a `ResourceUsage` (once)
    only when someone reads it."""

    def __init__(self, size: int) -> None:
        self._kept: collections.deque[ResourceUsage | _Idle] = collections.deque(
            maxlen=max(size, 1))
        self._head: ResourceUsage | None = None  # the base of stamps whose base left

    def __len__(self) -> int:
        return len(self._kept)

    def _make_room(self) -> None:
        kept = self._kept
        if len(kept) == kept.maxlen and isinstance(kept[0], ResourceUsage):
            self._head = kept[0]

    def append(self, sample: ResourceUsage) -> None:
        self._make_room()
        self._kept.append(sample)

    def append_idle(self, timestamp: datetime, uptime: float, cpu_ns: int | None = None,
                    cpu_usage: float = 0.0) -> None:
        """Keep the last sample `restamped` with these values (made when read); there must
        be one."""
        self._make_room()
        self._kept.append((timestamp.timestamp(), uptime, cpu_ns, cpu_usage))

    def samples(self) -> list[ResourceUsage]:
        """Every kept sample, oldest first."""
        kept, base = self._kept, self._head
        for i, item in enumerate(kept):
            if isinstance(item, ResourceUsage):
                base = item
            elif base is not None:
                base = kept[i] = _materialize(base, item)
        return [u for u in kept if isinstance(u, ResourceUsage)]

    def last(self) -> ResourceUsage | None:
        kept = self._kept
        if not kept:
            return None
        item = kept[-1]
        if isinstance(item, ResourceUsage):
            return item
        return self.samples()[-1] if len(kept) < 2 or not isinstance(kept[-2], ResourceUsage) \
            else self._set_last(_materialize(kept[-2], item))

    def _set_last(self, sample: ResourceUsage) -> ResourceUsage:
        self._kept[-1] = sample
        return sample


def _materialize(base: ResourceUsage, item: _Idle) -> ResourceUsage:
    stamp, uptime, cpu_ns, cpu_usage = item
    return restamped(base, datetime.fromtimestamp(stamp, UTC), uptime, cpu_ns, cpu_usage)


class Hub:
    """The sampling members of one event loop and the one task that samples them."""

    def __init__(self) -> None:
        self._due: dict[Member, float] = {}  # member -> monotonic time of its next sample
        self._busy: set[Member] = set()  # members whose callback still runs
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._due)

    def add(self, member: Member) -> None:
        """Sample ``member`` every interval from now on, starting about one interval from now
        (on the hub's `GRID`, so that members share wake-ups)."""
        self._due[member] = _on_grid(time.monotonic() + member.interval)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    def discard(self, member: Member) -> None:
        """Stop sampling ``member`` (idempotent); the task ends with the last member."""
        self._due.pop(member, None)
        self._wake.set()

    async def _run(self) -> None:
        # A member may join while the group waits for callbacks after the last one left:
        # look again before ending (nothing runs between that look and the task's end).
        while self._due:
            async with anyio.create_task_group() as tg:
                await self._sample(tg)

    async def _sample(self, tg: anyio.abc.TaskGroup) -> None:
        while self._due:
            self._wake.clear()
            delay = min(self._due.values()) - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), delay)
                continue  # membership may have changed: look again
            now = time.monotonic()
            due = []
            for m, at in self._due.items():
                if at > now + _EARLY:  # the loop's timers may fire a little early
                    continue
                if m in self._busy:  # its callback still runs: look again in a moment
                    self._due[m] = _on_grid(now + 0.1)
                    continue
                due.append(m)
                # On the grid; no catching up in bursts after a stall.
                at += m.interval
                self._due[m] = at if at > now + _EARLY else _on_grid(now + m.interval)
            if not due:
                continue
            readings = await anyio.to_thread.run_sync(_read_all, due)
            for m, reading in zip(due, readings, strict=True):
                if reading is None or m not in self._due:
                    continue  # failed (logged), or left while it was read
                follow = m.publish(reading)
                if follow is not None:
                    self._busy.add(m)
                    tg.start_soon(self._follow, m, follow)

    async def _follow(self, member: Member, follow: Awaitable[None]) -> None:
        try:
            await follow
        finally:
            self._busy.discard(member)


#: Due times are rounded up to this many seconds, so the members of a loop are read in a
#: few batches a second (one wake-up and one thread hop each), not one by one.
GRID = 0.25


_EARLY = 0.005


def _on_grid(t: float) -> float:
    return math.ceil(t / GRID) * GRID


def _read_all(members: list[Member]) -> list[object | None]:
    out: list[object | None] = []
    for m in members:
        try:
            out.append(m.read())
        except Exception:
            log.exception("a resource-usage reading failed; sampling goes on")
            out.append(None)
    return out


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Hub] = \
    weakref.WeakKeyDictionary()


def hub() -> Hub:
    """The running event loop's hub (made on first use)."""
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = Hub()
    return found
