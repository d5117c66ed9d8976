"""A one-shot event whose waitable part is made only when someone waits.

A command's handle marks several moments (its output ended, its result is there, the engine
said it ended); for most commands nobody ever waits on them, because the caller's own task
reads the output and builds the result in order. An ``anyio.Event`` per moment was set-up
every exec paid (each asks anyio which backend runs, and builds an ``asyncio.Event``); a
`Flag` is a bool until the first waiter.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["Flag"]


class Flag:
    """``is_set``/``set``/``wait`` as ``anyio.Event`` has them; set once, never cleared.

    ``wait`` on a set flag is a checkpoint, as the event's is; callers on a hot path test
    `is_set` first to skip it. Not thread-safe (neither is the event): set it from the loop.
    """

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: anyio.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        if not self._set:
            self._set = True
            if self._event is not None:
                self._event.set()

    async def wait(self) -> None:
        """Until the flag is set (a checkpoint if it is already)."""
        if self._set:
            await anyio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = anyio.Event()
        await self._event.wait()
