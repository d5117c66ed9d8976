"""A sandbox's own background work (event watcher, wall clock, sampler), owned and watched.

The work runs in one anyio task group under a supervisor task: the group must outlive the
call that starts it, and cleanup may run in another task. A failure is logged and handed to
``on_failure`` (which fails the sandbox, visibly), and the rest of the work is cancelled, since
it cannot be trusted without the failed part; nothing is swallowed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import anyio

__all__ = ["Supervisor", "Work"]

log = logging.getLogger("sandbox.lifecycle")

#: A named piece of background work: ("the event watcher", coroutine function).
Work = tuple[str, Callable[[], Coroutine[Any, Any, None]]]


class Supervisor:
    """Runs one sandbox's background work until `aclose`; reports the first failure."""

    def __init__(self, owner: str, on_failure: Callable[[str, Exception], None]) -> None:
        self._owner, self._on_failure = owner, on_failure
        self._task: asyncio.Task[None] | None = None

    def start(self, work: Sequence[Work], *, unless: Callable[[], bool] | None = None) -> None:
        """Start ``work`` in a task group of its own (once).

        ``unless`` is asked when the task first runs: if it says True by then (the sandbox's
        cleanup was asked for in the meantime, `Lifecycle.removing`), nothing starts. A
        cleanup right after create then does not open the event stream only to close it.
        """
        if self._task is not None:
            raise RuntimeError("the background work was started already")
        self._task = asyncio.ensure_future(self._supervise(work, unless))

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The supervisor task while it exists (for tests that watch it end)."""
        return self._task

    async def _supervise(self, work: Sequence[Work], unless: Callable[[], bool] | None) -> None:
        if unless is not None and unless():
            return
        async with anyio.create_task_group() as tg:
            for name, start in work:
                tg.start_soon(self._guarded, name, start, tg.cancel_scope)

    async def _guarded(self, name: str, start: Callable[[], Coroutine[Any, Any, None]],
                       group: anyio.CancelScope) -> None:
        try:
            await start()
        except Exception as exc:
            log.error("sandbox %s: %s failed", self._owner, name, exc_info=exc)
            self._on_failure(name, exc)
            group.cancel()

    def cancel(self, then: Callable[[], None] | None = None) -> None:
        """Ask the work to end without waiting for it (a cleanup sends its DELETE meanwhile)
        and call ``then`` once it has ended (at once if none runs); `aclose` must still
        follow, to wait for the end. Idempotent."""
        task = self._task
        if task is None:
            if then is not None:
                then()
            return
        task.cancel()
        if then is not None:
            task.add_done_callback(lambda _task: then())

    async def aclose(self) -> None:
        """Cancel the work and wait for it to end; idempotent."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # _guarded logged and reported every failure; what is left is the cancellation.
            with contextlib.suppress(BaseException):
                await task
