"""The engine's facts kept from the last create, and checked against a fresh read before start.

``GET /info`` is the slowest call of a create (7-35 ms here: the engine runs ``runc --version``
and ``docker-init --version`` for it) and its answer almost never changes. So a create that
finds facts kept for its engine plans from them at once and reads ``/info`` meanwhile
(`FreshFacts`); before the container starts (nothing has run in it yet) the fresh facts must
equal the kept ones, or the sandbox starts over from the fresh ones. Such a container was
planned from facts read during its own create; the read just no longer waits in front of the
rest.

Facts confirmed by a read sent less than `TRUSTED_FOR` seconds ago are planned from without
reading again when the sandbox runs under runc, pinned in the create body (`trusted`): a read
costs the engine 12-24 ms of CPU here (two process starts), beside every create on a 2-core
host. Of the facts, only the runtimes and the default one change without a daemon restart
(a reload); "runc" is a name the engine reserves (its arguments cannot be configured), and the
pin keeps the sandbox on it whatever the default became. The rest changes only with a restart
into another configuration, or a reboot: one into another engine version shows in the ping
that starts each create (its API version must still be the kept one, else the facts are read);
one into the same version within `TRUSTED_FOR` seconds of a read is not seen. That is the
trust: the daemon's configuration does not change by a restart in the moments after a read.

Creates that begin while such a read is in flight for their engine join it instead of starting
their own (ten creates at once made ten ``/info`` calls, twenty engine-side process starts,
beside the creates themselves): its answer comes after they began, so each started container
is still planned from facts the engine gave during its create. A joiner whose shared read
fails (the creating client was closed under it) reads on its own.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any, Final

from .._tasks import drop
from ._facts import EngineFacts
from ._gateway import Engine

__all__ = ["TRUSTED_FOR", "FreshFacts", "forget", "keep", "keep_api", "kept", "kept_api",
           "trusted"]

#: Seconds after a read of /info was sent during which its facts are planned from without a
#: new read, for a sandbox pinned to runc (see above).
TRUSTED_FOR: Final = 2.0

#: Per engine address: the facts the last create there read.
_KEPT: dict[str, EngineFacts] = {}
_MAX_KEPT: Final = 16
#: Per engine address: the API version its last ping answered with ("v1.41").
_API: dict[str, str] = {}
#: Per engine address: when (monotonic) the last read that gave the kept facts was sent.
_ASKED: dict[str, float] = {}
#: When each read of /info in flight was sent.
_SENT: weakref.WeakKeyDictionary[asyncio.Task[dict[str, Any]], float] = \
    weakref.WeakKeyDictionary()
#: Per engine address and event loop: the ``/info`` read in flight, and how many creates wait
#: on it (a task is never shared between loops).
_IN_FLIGHT: dict[tuple[str, asyncio.AbstractEventLoop], asyncio.Task[dict[str, Any]]] = {}
_USERS: dict[asyncio.Task[dict[str, Any]], int] = {}


def kept(address: str) -> EngineFacts | None:
    """The facts kept for the engine at ``address`` (None: read them first)."""
    return _KEPT.get(address)


def keep(address: str, facts: EngineFacts, asked_at: float | None = None) -> None:
    """Keep ``facts`` for the engine at ``address``, read by a call sent at ``asked_at``
    (`time.monotonic`; None: not known, so never `trusted`)."""
    newer = _ASKED.get(address)
    if asked_at is not None and newer is not None and newer > asked_at and \
            _KEPT.get(address) != facts:
        return  # an older read's answer: the one sent later stands
    if len(_KEPT) >= _MAX_KEPT and address not in _KEPT:
        _KEPT.clear()
        _ASKED.clear()
    _KEPT[address] = facts
    if asked_at is None:
        _ASKED.pop(address, None)
    else:
        _ASKED[address] = max(asked_at, _ASKED.get(address, asked_at))


def trusted(address: str, runtime: str) -> EngineFacts | None:
    """The kept facts, if a read that gave them was sent less than `TRUSTED_FOR` seconds ago,
    the sandbox is to run under ``runtime`` "runc" (the caller pins it in the create body),
    and the engine's API version is kept too (its ping must answer with it); else None."""
    facts = _KEPT.get(address)
    asked = _ASKED.get(address)
    if facts is None or asked is None or not _API.get(address) or \
            (runtime or facts.default_runtime) != "runc" or \
            time.monotonic() - asked >= TRUSTED_FOR:
        return None
    return facts


def forget(address: str) -> None:
    """Drop what is kept for ``address`` (the next create there reads first)."""
    _KEPT.pop(address, None)
    _API.pop(address, None)
    _ASKED.pop(address, None)


def kept_api(address: str) -> str:
    """The API version the engine at ``address`` answered last ("" when none is kept).

    A create's new client takes it before its ping, so the image's inspect goes out beside
    the ping instead of after it; the ping's answer still says which version holds (see
    `DockerBackend._create`).
    """
    return _API.get(address, "")


def keep_api(address: str, version: str) -> None:
    """Keep the API version (``"v1.41"``) the engine at ``address`` answered with."""
    if len(_API) >= _MAX_KEPT and address not in _API:
        _API.clear()
    _API[address] = version


class FreshFacts:
    """A ``GET /info`` running while the create goes on (or joined, see above); `result`
    waits for it.

    A plain asyncio task (not a task group around the whole create, which would wrap the
    create's own errors in exception groups); `cancel` ends it if the create stops early and
    no other create waits on it.
    """

    def __init__(self, engine: Engine, address: str = "") -> None:
        self._engine = engine
        key = (address, asyncio.get_running_loop())
        shared = _IN_FLIGHT.get(key) if address else None
        self._joined = shared is not None and not shared.done()
        if shared is not None and self._joined:
            self._task = shared
        else:
            self._task = task = asyncio.ensure_future(engine.engine_info())
            _SENT[task] = time.monotonic()
            if address:
                _IN_FLIGHT[key] = task
                task.add_done_callback(lambda done: _ended(key, done))
        _USERS[self._task] = _USERS.get(self._task, 0) + 1
        self._left = False
        #: When the read whose answer `result` gives was sent (`time.monotonic`).
        self.asked_at = _SENT.get(self._task, time.monotonic())

    async def result(self) -> EngineFacts:
        """The facts the engine reports now (its error, if the read failed)."""
        try:
            info = await asyncio.shield(self._task)
        except Exception:
            if not self._joined:
                raise
            self.asked_at = time.monotonic()
            info = await self._engine.engine_info()  # the shared read failed: our own
        return EngineFacts.from_info(info)

    def cancel(self) -> None:
        """Stop the read if it still runs and nobody else waits on it, and consume its
        outcome either way; idempotent."""
        if self._left:
            return
        self._left = True
        task = self._task
        users = _USERS.get(task, 1) - 1
        if users > 0:
            _USERS[task] = users
            return
        _USERS.pop(task, None)
        drop(task)


def _ended(key: tuple[str, asyncio.AbstractEventLoop],
           task: asyncio.Task[dict[str, Any]]) -> None:
    if _IN_FLIGHT.get(key) is task:
        del _IN_FLIGHT[key]

