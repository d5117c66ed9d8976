"""Answers kept per key, asked once: concurrent askers of a key nobody knows yet wait for the
first one's answer instead of each asking (ten sandboxes created together from one new image
read its working dir once, not ten times; a fork's ten children probe its user once). Askers
of different keys never wait for each other.

Cancellation-safe: when the asker whose question is in flight fails or is cancelled, the
waiting askers wake and one of them asks in its place (an error is never shared: each asker
sees its own). Bounded: past ``limit`` kept answers, all are dropped (they are cheap to ask
again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

import anyio

__all__ = ["SingleFlight"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Kept answers per key, and the questions in flight."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._kept: dict[K, V] = {}
        self._flights: dict[K, anyio.Event] = {}

    def get(self, key: K) -> V | None:
        """The kept answer for ``key``, if any (asks nothing)."""
        return self._kept.get(key)

    def in_flight(self, key: K) -> bool:
        """Whether someone is fetching the answer for ``key`` now."""
        return key in self._flights

    def keep(self, key: K, value: V) -> None:
        """Keep ``value`` as the answer for ``key``."""
        if key not in self._kept and len(self._kept) >= self._limit:
            self._kept.clear()
        self._kept[key] = value

    def clear(self) -> None:
        """Drop every kept answer (questions in flight still finish)."""
        self._kept.clear()

    def __len__(self) -> int:
        return len(self._kept)

    async def ask(self, key: K, fetch: Callable[[], Awaitable[V]]) -> V:
        """The answer for ``key``: kept, or the one in flight once it lands, or ``fetch()``'s
        (then kept)."""
        while True:
            if key in self._kept:
                return self._kept[key]
            landed = self._flights.get(key)
            if landed is None:
                break
            await landed.wait()  # then kept, or the asker failed: look again
        landed = self._flights[key] = anyio.Event()
        try:
            value = await fetch()
            self.keep(key, value)
            return value
        finally:
            if self._flights.get(key) is landed:
                del self._flights[key]
            landed.set()
