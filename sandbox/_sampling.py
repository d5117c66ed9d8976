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
import contextlib
import inspect
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio
import anyio.abc

__all__ = ["Hub", "Member", "hub", "run_callback"]

log = logging.getLogger("sandbox.stats")


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


async def run_callback(callback: Callable[[object], object] | None, value: object) -> None:
    """Call ``callback`` (sync or async) with ``value``; one that raises is logged."""
    if callback is None:
        return
    try:
        result = callback(value)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("the on_sample callback failed; sampling goes on")


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
        """Sample ``member`` every interval from now on, starting one interval from now."""
        self._due[member] = time.monotonic() + member.interval
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
            due = [m for m, at in self._due.items() if at <= now and m not in self._busy]
            for m in due:  # from now, not from when it was due: no catching up in bursts
                self._due[m] = now + m.interval
            if not due:
                for m in self._due:  # every due member is busy: look again after a tick
                    self._due[m] = max(self._due[m], now + 0.1)
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
