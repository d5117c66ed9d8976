"""Small anyio helpers shared by the backends: wait for the first of several events, unwrap a
task group's lone error, and cancel asyncio tasks and wait for them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio


async def first_of(*events: anyio.Event) -> None:
    """Wait until any one of ``events`` is set."""
    async with anyio.create_task_group() as tg:
        async def wait(event: anyio.Event) -> None:
            await event.wait()
            tg.cancel_scope.cancel()
        for event in events:
            tg.start_soon(wait, event)


@contextlib.asynccontextmanager
async def single_errors() -> AsyncIterator[None]:
    """Raise a task group's lone error as itself, so callers can ``except`` our error types."""
    try:
        yield
    except BaseExceptionGroup as group:
        errors = group.exceptions
        if len(errors) == 1 and not isinstance(errors[0], BaseExceptionGroup):
            raise errors[0] from errors[0].__cause__
        raise


async def cancel_and_wait(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended, shielded from our own cancellation."""
    with anyio.CancelScope(shield=True):
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
