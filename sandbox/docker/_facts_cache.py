"""The engine's facts kept from the last create, and checked against a fresh read before start.

``GET /info`` is the slowest call of a create (7-35 ms here: the engine runs ``runc --version``
and ``docker-init --version`` for it) and its answer almost never changes. So a create that
finds facts kept for its engine plans from them at once and reads ``/info`` meanwhile
(`FreshFacts`); before the container starts (nothing has run in it yet) the fresh facts must
equal the kept ones, or the sandbox starts over from the fresh ones. Every started container
was planned from facts read during its own create, as before; the read just no longer waits
in front of the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Final

from ._facts import EngineFacts
from ._gateway import Engine

__all__ = ["FreshFacts", "forget", "keep", "kept"]

#: Per engine address: the facts the last create there read.
_KEPT: dict[str, EngineFacts] = {}
_MAX_KEPT: Final = 16


def kept(address: str) -> EngineFacts | None:
    """The facts kept for the engine at ``address`` (None: read them first)."""
    return _KEPT.get(address)


def keep(address: str, facts: EngineFacts) -> None:
    """Keep ``facts`` for the engine at ``address``."""
    if len(_KEPT) >= _MAX_KEPT and address not in _KEPT:
        _KEPT.clear()
    _KEPT[address] = facts


def forget(address: str) -> None:
    """Drop what is kept for ``address`` (the next create there reads first)."""
    _KEPT.pop(address, None)


class FreshFacts:
    """A ``GET /info`` running while the create goes on; `result` waits for it.

    A plain asyncio task (not a task group around the whole create, which would wrap the
    create's own errors in exception groups); `cancel` ends it if the create stops early.
    """

    def __init__(self, engine: Engine) -> None:
        self._task = asyncio.ensure_future(engine.engine_info())

    async def result(self) -> EngineFacts:
        """The facts the engine reports now (its error, if the read failed)."""
        return EngineFacts.from_info(await asyncio.shield(self._task))

    def cancel(self) -> None:
        """Stop the read if it still runs, and consume its outcome either way."""
        if not self._task.done():
            self._task.cancel()
        self._task.add_done_callback(_consume)


def _consume(task: asyncio.Task[Any]) -> None:
    with contextlib.suppress(BaseException):
        task.exception()
