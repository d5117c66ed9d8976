"""Small anyio helpers shared by the backends: wait for the first of several events, unwrap a
task group's lone error, cancel asyncio tasks and wait for them (or drop them), and watch a
file descriptor."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import anyio

from ._flag import Flag


async def first_of(*events: anyio.Event | Flag) -> None:
    """Wait until any one of ``events`` is set."""
    async with anyio.create_task_group() as tg:
        async def wait(event: anyio.Event | Flag) -> None:
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


def drop(task: asyncio.Future[Any]) -> None:
    """Cancel ``task`` if it still runs, without waiting, and consume its outcome either way
    (asyncio logs an outcome nobody retrieved)."""
    if not task.done():
        task.cancel()
    task.add_done_callback(_consume)


def _consume(task: asyncio.Future[Any]) -> None:
    with contextlib.suppress(BaseException):
        task.exception()


@contextlib.contextmanager
def fd_readable(fd: int, callback: Callable[[], object]) -> Iterator[None]:
    """Call ``callback`` on the running loop each time ``fd`` is readable, until the block
    ends (the reader is removed however it ends)."""
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, callback)
    try:
        yield
    finally:
        loop.remove_reader(fd)
