"""Run cleanup-critical work to its end even when the caller is cancelled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import anyio

__all__ = ["finish_despite_cancel"]

log = logging.getLogger("sandbox.lifecycle")


async def finish_despite_cancel(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` to its end even if the caller is cancelled, then pass the cancellation on.

    Used for removal, and for creates whose result (an id) must be known before cleanup.

    anyio's shield stops anyio cancellation only; asyncio's ``Task.cancel()`` (and the Ctrl-C
    handler of ``asyncio.run``, which uses it) still lands at the next await, so the work runs
    in a task of its own that the caller's cancellation cannot reach.
    """
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError as exc:
                cancelled = exc
    if cancelled is not None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed after the caller was cancelled: %s",
                        getattr(coro, "__qualname__", coro), task.exception())
        raise cancelled
    task.result()
