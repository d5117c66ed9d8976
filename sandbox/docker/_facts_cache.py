"""The engine's facts kept from the last create, and checked against a fresh read before start.

``GET /info`` is the slowest call of a create (7-35 ms here: the engine runs ``runc --version``
and ``docker-init --version`` for it) and its answer almost never changes. So a create that
finds facts kept for its engine plans from them at once and reads ``/info`` meanwhile
(`FreshFacts`); before the container starts (nothing has run in it yet) the fresh facts must
equal the kept ones, or the sandbox starts over from the fresh ones. Such a container was
planned from facts read during its own create; the read just no longer waits in front of the
rest.

Facts confirmed by a read are planned from without reading again when the sandbox runs under
runc, pinned in the create body (`trusted`): a read costs the engine 12-24 ms of CPU here (two
process starts), beside every create on a 2-core host. Of the facts, only the runtimes and the
default one change without a daemon restart (a reload), and the host's CPUs and memory (see
below); "runc" is a name the engine reserves (its arguments cannot be configured), and the pin
keeps the sandbox on it whatever the default became. The rest changes only with a restart into
another configuration, or a reboot; one into another engine version shows in the ping that
starts each create (its API version must still be the kept one, else the facts are read).
How long the facts are trusted depends on whether the daemon can be named:

- A local dockerd (`_engine_identity`): the facts are labelled with the daemon instance (pid,
  start time, boot) and the host size (its CPU affinity, the host's memory) named just before
  the read of ``/info`` was sent (named after, a restart in between would label the old
  daemon's facts with the new one; named before, it labels them with the old one, and the
  next check reads), and trusted for as long as the same instance and size answer. A
  trusting create checks that after the engine answered its create call and before the start
  (`SameDaemon`): the daemon that made the container is then the one the facts came from, as
  a process instance cannot come back and dockerd binds its socket only when it starts. Where
  the check names another instance or none, ``/info`` is read there and then, and the create
  goes on if the facts are the same, or starts over from the new ones (nothing ran in it).
  Still accepted: a restart between that check and the start call (the new daemon starts a
  container another one made, runc pinned; a cold create accepts the same between its read
  and its start); the path pointed at another listener and back between read and check (the
  socket file moved aside and restored); a daemon replacing itself by ``exec`` (same pid and
  start time; dockerd does not); the CPU affinity of dockerd's other threads changed alone
  (``taskset -a`` and cpusets change the first thread's too). The name only decides whether
  facts the SDK itself read from the engine are read again; it is made of the kernel's
  answers about the socket's listener, and nothing from a sandbox is read
  (`_engine_identity`, security).
- Otherwise (tcp, ssh, a socket-activated or proxied engine, a peer this process cannot see):
  facts confirmed by a read sent less than `TRUSTED_FOR` seconds ago. A restart into the same
  engine version within `TRUSTED_FOR` seconds of a read is not seen: the trust is that the
  daemon's configuration does not change by a restart in the moments after a read.

`TRUSTED_FOR` set to 0 turns both off: every create reads (tests, the bench's lone-create row).

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
from typing import Any, Final, TypeAlias

from .._tasks import drop
from ._engine_identity import EngineInstance, identify
from ._facts import EngineFacts
from ._gateway import Engine
from ._images import inspect_image

__all__ = ["TRUSTED_FOR", "Check", "FreshFacts", "SameDaemon", "check_api", "daemon",
           "early_inspect", "forget", "keep", "keep_api", "kept", "kept_api", "same_daemon",
           "trusted"]

#: Seconds after a read of /info was sent during which its facts are planned from without a
#: new read, for a sandbox pinned to runc, where the daemon cannot be named (see above); 0:
#: never trusted, named or not.
TRUSTED_FOR: Final = 2.0

#: Per engine address: the facts the last create there read.
_KEPT: dict[str, EngineFacts] = {}
_MAX_KEPT: Final = 16
#: Per engine address: the API version its last ping answered with ("v1.41").
_API: dict[str, str] = {}
#: Per engine address: when (monotonic) the last read that gave the kept facts was sent.
_ASKED: dict[str, float] = {}
#: Per engine address: the daemon instance named just before that read (`_engine_identity`).
_BY: dict[str, EngineInstance] = {}
#: When each read of /info in flight was sent, and the daemon named just before.
_SENT: weakref.WeakKeyDictionary[asyncio.Task[dict[str, Any]], float] = \
    weakref.WeakKeyDictionary()
_SENT_BY: weakref.WeakKeyDictionary[asyncio.Task[dict[str, Any]], EngineInstance | None] = \
    weakref.WeakKeyDictionary()
#: Per engine address and event loop: the ``/info`` read in flight, and how many creates wait
#: on it (a task is never shared between loops).
_IN_FLIGHT: dict[tuple[str, asyncio.AbstractEventLoop], asyncio.Task[dict[str, Any]]] = {}
_USERS: dict[asyncio.Task[dict[str, Any]], int] = {}


def kept(address: str) -> EngineFacts | None:
    """The facts kept for the engine at ``address`` (None: read them first)."""
    return _KEPT.get(address)


def keep(address: str, facts: EngineFacts, asked_at: float | None = None,
         by: EngineInstance | None = None) -> None:
    """Keep ``facts`` for the engine at ``address``, read by a call sent at ``asked_at``
    (`time.monotonic`; None: not known, so never `trusted`) to the daemon named ``by`` just
    before it was sent (None: not named, so trusted by the time window alone); for address
    "" (a caller's own client) nothing is kept."""
    if not address:
        return
    newer = _ASKED.get(address)
    if asked_at is not None and newer is not None and newer > asked_at and \
            _KEPT.get(address) != facts:
        return  # an older read's answer: the one sent later stands
    if len(_KEPT) >= _MAX_KEPT and address not in _KEPT:
        _KEPT.clear()
        _ASKED.clear()
        _BY.clear()
    _KEPT[address] = facts
    if asked_at is None:
        _ASKED.pop(address, None)
        _BY.pop(address, None)
        return
    if newer is None or asked_at >= newer:  # the label of the latest read stands
        _ASKED[address] = asked_at
        if by is None:
            _BY.pop(address, None)
        else:
            _BY[address] = by


def trusted(address: str, runtime: str) -> EngineFacts | None:
    """The kept facts, if a read that gave them was sent to a daemon named then (the caller
    checks with `same_daemon` that it still answers) or less than `TRUSTED_FOR` seconds ago,
    the sandbox is to run under ``runtime`` "runc" (the caller pins it in the create body),
    and the engine's API version is kept too (its ping must answer with it); else None."""
    facts = _KEPT.get(address)
    asked = _ASKED.get(address)
    if facts is None or asked is None or not _API.get(address) or TRUSTED_FOR <= 0 or \
            (runtime or facts.default_runtime) != "runc" or \
            (address not in _BY and time.monotonic() - asked >= TRUSTED_FOR):
        return None
    return facts


def forget(address: str) -> None:
    """Drop what is kept for ``address`` (the next create there reads first)."""
    _KEPT.pop(address, None)
    _API.pop(address, None)
    _ASKED.pop(address, None)
    _BY.pop(address, None)


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

    def __init__(self, engine: Engine, address: str = "", *, join: bool = True) -> None:
        self._engine = engine
        self._address = address
        key = (address, asyncio.get_running_loop())
        # A create that found another daemon answering does not join (``join=False``): a
        # read in flight may have been sent to, and labelled with, the daemon that left.
        shared = _IN_FLIGHT.get(key) if address and join else None
        self._joined = shared is not None and not shared.done()
        if shared is not None and self._joined:
            self._task = shared
        else:
            by = daemon(address)  # named before the read is sent
            self._task = task = asyncio.ensure_future(engine.engine_info())
            _SENT[task] = time.monotonic()
            _SENT_BY[task] = by
            if address:
                _IN_FLIGHT[key] = task
                task.add_done_callback(lambda done: _ended(key, done))
        _USERS[self._task] = _USERS.get(self._task, 0) + 1
        self._left = False
        #: When the read whose answer `result` gives was sent (`time.monotonic`), and the
        #: daemon named just before (`_engine_identity`).
        self.asked_at = _SENT.get(self._task, time.monotonic())
        self.asked_by = _SENT_BY.get(self._task)

    async def result(self) -> EngineFacts:
        """The facts the engine reports now (its error, if the read failed)."""
        try:
            info = await asyncio.shield(self._task)
        except Exception:
            if not self._joined:
                raise
            self.asked_by = daemon(self._address)
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


def daemon(address: str) -> EngineInstance | None:
    """The daemon instance answering at ``address`` now (`_engine_identity.identify`); None
    for none (or ``address`` "", a caller's own client)."""
    return identify(address) if address else None


def same_daemon(engine: Engine, address: str, facts: EngineFacts) -> SameDaemon | None:
    """The check a create trusting ``facts`` (`trusted`) makes after its create call, where
    they were kept with a daemon's name; None where they are trusted by the time window."""
    by = _BY.get(address)
    return None if by is None else SameDaemon(engine, address, facts, by)


class SameDaemon:
    """Whether the daemon that gave the trusted facts still answers (see above); if not,
    the facts read from the one that does (kept, if the same). Its `result` stands in for a
    `FreshFacts` one."""

    def __init__(self, engine: Engine, address: str, facts: EngineFacts,
                 by: EngineInstance) -> None:
        self._engine, self._address, self._facts, self._by = engine, address, facts, by
        self._outcome: EngineFacts | None = None

    async def result(self) -> EngineFacts:
        """The trusted facts while their daemon answers, else what the engine reports now."""
        if self._outcome is None:
            if identify(self._address) == self._by:
                self._outcome = self._facts
                return self._facts
            fresh = FreshFacts(self._engine, self._address, join=False)
            try:
                self._outcome = await fresh.result()
            finally:
                fresh.cancel()
            if self._outcome == self._facts:  # confirmed by that read: labelled with it
                keep(self._address, self._facts, fresh.asked_at, fresh.asked_by)
        return self._outcome


#: What a create planned from kept facts checks them by before its start.
Check: TypeAlias = FreshFacts | SameDaemon


def early_inspect(engine: Engine, image: str, address: str,
                  pull_policy: str) -> asyncio.Task[dict[str, Any] | None] | None:
    """The image's inspect, sent beside the ping in the API version the engine answered with
    last (kept for ``address``); None where no version is kept, the client has its own, or
    the pull policy pulls first anyway."""
    api = kept_api(address) if address else ""
    if not api or pull_policy == "always" or engine.docker.api_version != "auto":
        return None
    engine.docker.api_version = api
    return asyncio.ensure_future(inspect_image(engine, image))


def check_api(engine: Engine, version: str, address: str,
              early: asyncio.Task[dict[str, Any] | None] | None) -> \
        asyncio.Task[dict[str, Any] | None] | None:
    """After the ping: keep the early inspect if the engine still answers in the version it
    was sent in; else drop it (the image is inspected again), forget the facts kept for
    ``address`` and take the new version."""
    if early is None or f"v{version}" == engine.docker.api_version:
        return early
    drop(early)
    forget(address)
    engine.docker.api_version = f"v{version}" if version else "auto"
    return None
