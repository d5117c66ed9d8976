"""Small anyio helpers shared by the backends: wait for the first of several events, and
unwrap a task group's lone error."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

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
