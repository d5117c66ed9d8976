"""Spares: process sandboxes made ahead of demand, so the next create like the last is a
hand-over.

A create takes the spare made for its key (everything that shapes the sandbox: image, plan,
ids, limits, filter) when there is one, and waits for it when it is still being made; then a
new spare for that key is started behind it. A spare is a whole sandbox of its own (its own
namespaces, cgroup, overlay upper, /tmp, made by the same code as any other) that nobody has
used: the create renames its state directory and cgroup to its own id and takes its holder.

Bounded and owned:

* At most `limit` (``SANDBOX_PROCESS_SPARES``, default 2; 0 turns spares off) idle spares per
  event loop, one per key; a key gets one only once it was seen twice (a create that is never
  repeated makes none), the least recently used key's is dropped for a new one.
* Each spare is owned by one task on the loop that made it (its channels read there), and
  is made `START_DELAY` after the create that asked for it (at once when a create waits for
  it), not during the first command of the sandbox just made. The task removes the spare
  when nobody took it for `IDLE_TTL` seconds, when it is dropped, and when the task is
  cancelled (``asyncio.run`` cancels every task before it closes its loop).
* The holders are the fork server's children and die with it (bwrap's ``--die-with-parent``),
  and it exits when this process does: a process killed hard leaves only a state directory and
  a cgroup, with the same owner labels as any sandbox's, for ``gc``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import weakref
from collections.abc import Awaitable, Callable, Hashable
from typing import Protocol

import anyio

__all__ = ["IDLE_TTL", "Spare", "drop_all", "limit", "offer", "settled", "stats", "take"]

#: Seconds an unused spare is kept.
IDLE_TTL = 30.0
#: Seconds after the create that asked for it before a spare is made, unless a create wants it
#: sooner: its making (a fork server request, bwrap, cgroup moves) would otherwise compete for
#: the CPU with the first command of the sandbox just made or handed out.
START_DELAY = 0.05
#: Keys remembered for the "seen twice" rule.
SEEN = 64


class Spare(Protocol):
    """What a spare must offer: a check that it still lives, and its removal."""

    def alive(self) -> bool: ...

    async def remove(self) -> None: ...


def limit() -> int:
    """Idle spares allowed per event loop (``SANDBOX_PROCESS_SPARES``, default 2)."""
    raw = os.environ.get("SANDBOX_PROCESS_SPARES", "").strip()
    return max(0, int(raw)) if raw.isdigit() else 2


class _Slot:
    """One spare: being made, then waiting for a taker (or its end)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.made: asyncio.Future[Spare | None] = loop.create_future()
        self.claimed: asyncio.Future[bool] = loop.create_future()  # True: handed over
        self.wanted = asyncio.Event()  # a create waits for it: make it now
        self.task: asyncio.Task[None] | None = None

    def release(self, taken: bool) -> None:
        if not self.claimed.done():
            self.claimed.set_result(taken)


class _Spares:
    """One event loop's spares."""

    def __init__(self) -> None:
        self.slots: dict[Hashable, _Slot] = {}  # oldest first
        self.seen: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        self.made = self.taken = self.dropped = 0


_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Spares] = \
    weakref.WeakKeyDictionary()


def _here() -> _Spares:
    loop = asyncio.get_running_loop()
    spares = _loops.get(loop)
    if spares is None:
        spares = _loops[loop] = _Spares()
    return spares


async def take(key: Hashable) -> Spare | None:
    """The spare made for ``key``, waiting for one being made; None when there is none (or
    its making failed). The caller owns what it gets (it removes it if it cannot use it)."""
    spares = _here()
    slot = spares.slots.pop(key, None)
    if slot is None:
        return None
    slot.wanted.set()
    try:
        spare = await asyncio.shield(slot.made)
    except BaseException:  # cancelled while it was being made: its owner removes it
        slot.release(False)
        raise
    if spare is None or not spare.alive():
        slot.release(False)
        return None
    slot.release(True)
    spares.taken += 1
    return spare


def offer(key: Hashable, make: Callable[[], Awaitable[Spare]]) -> None:
    """Start making a spare for ``key`` (a create for it just ran), if the rules allow."""
    spares = _here()
    bound = limit()
    seen = key in spares.seen
    spares.seen[key] = None
    spares.seen.move_to_end(key)
    while len(spares.seen) > SEEN:
        spares.seen.popitem(last=False)
    if not seen or bound == 0 or key in spares.slots:
        return
    while len(spares.slots) >= bound:  # the least recently used key's goes
        spares.slots.pop(next(iter(spares.slots))).release(False)
        spares.dropped += 1
    slot = _Slot(asyncio.get_running_loop())
    spares.slots[key] = slot
    spares.made += 1
    slot.task = asyncio.ensure_future(_own(spares, key, slot, make))


async def _own(spares: _Spares, key: Hashable, slot: _Slot,
               make: Callable[[], Awaitable[Spare]]) -> None:
    """Make the spare, keep it until it is taken, dropped or idle too long; remove it unless
    it was handed over."""
    spare: Spare | None = None
    try:
        with anyio.move_on_after(START_DELAY):
            await slot.wanted.wait()
        if slot.claimed.done():  # dropped before it was made
            return
        try:
            spare = await make()
        except Exception:
            slot.made.set_result(None)
            return
        slot.made.set_result(spare)
        with anyio.move_on_after(IDLE_TTL):
            await asyncio.shield(slot.claimed)
        if slot.claimed.done() and slot.claimed.result():
            spare = None  # the taker's now
    finally:
        if not slot.made.done():
            slot.made.set_result(None)
        slot.release(False)
        if spares.slots.get(key) is slot:
            del spares.slots[key]
        if spare is not None:
            with anyio.CancelScope(shield=True), contextlib.suppress(Exception):
                await spare.remove()


async def settled() -> list[Spare]:
    """Wait until this loop's spares being made are made; the ones there are now."""
    made = [await asyncio.shield(slot.made) for slot in list(_here().slots.values())]
    return [spare for spare in made if spare is not None]


def stats() -> dict[str, int]:
    """This loop's spares: ``idle`` (made or being made), ``made``, ``taken``, ``dropped``."""
    spares = _here()
    return {"idle": len(spares.slots), "made": spares.made, "taken": spares.taken,
            "dropped": spares.dropped}


async def drop_all() -> None:
    """Remove this loop's spares now (and wait for that)."""
    spares = _here()
    slots = list(spares.slots.values())
    spares.slots.clear()
    for slot in slots:
        slot.release(False)
        slot.wanted.set()
    for slot in slots:
        if slot.task is not None:
            with contextlib.suppress(BaseException):
                await slot.task


def _forget_in_child() -> None:
    _loops.clear()


os.register_at_fork(after_in_child=_forget_in_child)
