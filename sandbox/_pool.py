"""SandboxPool: started sandboxes kept ready, handed out in milliseconds, refilled behind.

Creating a sandbox costs a container create and start (~240 ms here); a pool pays that ahead
of time, in the background, so an ``acquire`` only takes a ready sandbox and asks its backend
whether it still runs (a local Docker container: read from the host, ~0.05 ms; else one engine
inspect, ~2 ms).

Example:
    async with SandboxPool(SandboxConfig(), min_ready=4, max_size=8) as pool:
        async with pool.acquire() as sb:
            result = await sb.execute_command("pytest -q")

Rules:

* Every sandbox the pool makes belongs to the pool's task group, which the ``async with``
  owns; leaving it (normally, by an error or a cancellation) removes every sandbox, ready or
  in use, and waits for the removals. A process killed hard leaves containers labelled with
  its pid, which ``sandbox.gc()`` proves dead and removes, like any sandbox's.
* At most ``max_size`` sandboxes are ready, in use or being created at once. A used one
  whose removal has begun (Docker kills it first) holds no place, so a removal does not hold
  back the create behind it; counting removals, at most twice ``max_size`` exist.
* A sandbox goes to one user (``max_uses=1``, the default) and is then destroyed: nothing
  can leak between users. With ``max_uses > 1`` it is reset between users (see
  ``sandbox._reset`` for what that proves) and destroyed instead when the reset cannot
  prove it clean (always, where the backend cannot show it from outside), when anything ran
  in it as another user, when it is unhealthy, or when it was used ``max_uses`` times.
* ``acquire`` hands out only a sandbox its backend's ``health`` says is running and not paused
  now (the host's view of the container, or the engine): one killed or paused while it
  waited, even a moment before, is removed and the next one taken (or a new one made).
* A sandbox idle for ``max_idle`` is replaced by a fresh one.
* Refilling after an acquire served from the queue waits for a quiet moment, so no create
  slows a user's first command: until ``REFILL_DELAY`` passed without an acquire (at most
  ``RETIRE_LIMIT`` after the first acquire it waits for), unless an acquire waits. A release
  that leaves nothing ready starts one create at once (the next user's), the rest of the
  top-up still waits.
* A sandbox given back (used up, or not reusable) is never handed out again; its removal
  starts once no acquire came for ``REFILL_DELAY``, at most ``RETIRE_LIMIT`` after the
  release, at once when the pool needs the room, and always at close (which waits for it):
  removed at the release, it competed for the CPU with the next user's first command.
* Background failures are never swallowed: each is logged, counted in `PoolStats`, and
  raised by an ``acquire`` that would otherwise wait for the sandbox that failed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from types import TracebackType

import anyio
import anyio.abc
import attrs

from ._backend import SupportsHealth
from ._errors import ConfigError, SandboxError, SandboxInitFailed, SandboxNotRunning
from ._models import SandboxConfig, SandboxStatus, as_config
from ._reset import Baseline, check_reusable, record_baseline, reset
from ._sandbox import Sandbox

__all__ = ["PoolStats", "SandboxPool"]

log = logging.getLogger("sandbox.pool")

#: Acquire latencies kept for the percentiles in `PoolStats`.
LATENCY_WINDOW = 1000
#: After a failed create, the next waits this long, doubling up to `MAX_BACKOFF`.
FIRST_BACKOFF = 0.1
MAX_BACKOFF = 5.0
#: Creates in flight by default: the measured knee of throughput on a 2-core host (see
#: ``SandboxPool``'s ``create_concurrency``).
CREATE_CONCURRENCY = 3
#: A refill that only tops the ready queue back up (nobody waits) starts once no acquire came
#: for this long (at most `RETIRE_LIMIT` after the first one it waited for); a release that
#: leaves nothing ready starts one create before that. Started at the acquire, the create
#: competed for the CPU with the acquirer's first command (process pool on 2 cores: acquire to
#: first command 13-24 ms instead of ~3 ms); started at once when two acquires in a row left
#: the pool two short, it still did (6.7-7.4 ms in round 4's bench).
REFILL_DELAY = 0.05
#: A used sandbox's removal waits at most this long for a quiet moment (see ``_retire``):
#: a busy pool removes its used sandboxes late, never not at all.
RETIRE_LIMIT = 0.25

Factory = Callable[[SandboxConfig], Sandbox]


@attrs.frozen(kw_only=True)
class PoolStats:
    """A snapshot of a pool.

    Attributes:
        ready: Sandboxes started and waiting for a user.
        in_use: Sandboxes handed out (or being checked or reset between users).
        creating: Sandboxes being created.
        removing: Sandboxes being removed.
        created: Sandboxes created so far.
        reused: Acquires served by a sandbox that had a user before.
        discarded: Sandboxes removed so far (used up, unhealthy, idle too long, not
            resettable, or at close).
        unhealthy: Of those, the ones found dead or paused when about to be handed out, or
            while they waited.
        failed: Background failures (a create or a removal that failed).
        acquired: Acquires served.
        acquire_p50: Median seconds an acquire took (over the last 1,000).
        acquire_p95: 95th percentile of the same.
        last_error: The last background failure, "" if none.
    """

    ready: int
    in_use: int
    creating: int
    removing: int
    created: int
    reused: int
    discarded: int
    unhealthy: int
    failed: int
    acquired: int
    acquire_p50: float
    acquire_p95: float
    last_error: str = ""


class _Lease:
    """One sandbox of the pool, and what the pool knows about it."""

    __slots__ = ("baseline", "idle_since", "sb", "uses")

    def __init__(self, sb: Sandbox, baseline: Baseline | None) -> None:
        self.sb = sb
        self.baseline = baseline
        self.uses = 0
        self.idle_since = time.monotonic()


def _percentile(samples: list[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _seconds(value: timedelta | float | None, field: str) -> float | None:
    if value is None:
        return None
    secs = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(secs, bool) or not isinstance(secs, int | float) or not secs > 0:
        raise ConfigError(f"SandboxPool {field} must be a positive duration or None, "
                          f"got {value!r}")
    return float(secs)


def _count(value: object, field: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"SandboxPool {field} must be an integer >= {minimum}, got {value!r}")
    return value


class SandboxPool:
    """Sandboxes started ahead of time and handed out by `acquire`.

    Args:
        config: What every sandbox of the pool is created from.
        min_ready: Sandboxes kept started and waiting (as far as ``max_size`` allows).
        max_size: Most sandboxes ready, in use or being created at once (used ones being
            removed may add as many again).
        max_uses: Users a sandbox serves before it is destroyed; 1 (the default) gives every
            user a fresh one. Above 1, a sandbox is reset between users, and configs whose
            state a reset cannot check are refused (`ConfigError`).
        max_idle: A ready sandbox older than this (seconds or a timedelta) since it was made
            or last released is replaced; None keeps it indefinitely.
        create_concurrency: Sandboxes created at once in the background. The default, 3, is
            the knee measured on a 2-core host (``bench/run.py --only poolknee``; 40
            acquire/``true``/release cycles with ``max_uses=1``: 16.5/14.5 s at 2, then
            13.1/13.5/10.1 s at 3, 10.8/10.7/10.0 s at 4, 10.6 s at 6): more only contend
            for the engine.
        factory: Makes an uninitialized `Sandbox` from the config; by default ``Sandbox``
            (the backend ``config.type`` names).

    Raises:
        ConfigError: A bad value; the message names the argument.
    """

    def __init__(
        self, config: SandboxConfig | None = None, *, min_ready: int = 1, max_size: int = 4,
        max_uses: int = 1, max_idle: timedelta | float | None = None,
        create_concurrency: int = CREATE_CONCURRENCY, factory: Factory | None = None,
    ) -> None:
        self._config = as_config(config)
        self._max_size = _count(max_size, "max_size", 1)
        self._min_ready = _count(min_ready, "min_ready", 0)
        if self._min_ready > self._max_size:
            raise ConfigError(f"SandboxPool min_ready ({min_ready}) cannot exceed max_size "
                              f"({max_size})")
        self._max_uses = _count(max_uses, "max_uses", 1)
        if self._max_uses > 1:
            check_reusable(self._config)
        self._max_idle = _seconds(max_idle, "max_idle")
        self._concurrency = _count(create_concurrency, "create_concurrency", 1)
        self._factory: Factory = factory or Sandbox
        self._ready: deque[_Lease] = deque()
        self._held: set[_Lease] = set()  # handed out, being checked or being reset
        self._creating = 0
        self._removing = 0
        self._waiting = 0  # acquires that found nothing ready
        self._refill_after = 0.0  # a top-up refill waits until then (see REFILL_DELAY)
        self._deferred_since = 0.0  # the acquire the pending top-up first waited for
        self._refill_one = False  # a release left nothing ready: one create may start now
        self._quiet_at = 0.0  # REFILL_DELAY after the last acquire: retired ones go then
        # Given back, never handed out again, removal not yet started (counted in _removing).
        self._retiring: deque[tuple[float, _Lease, str]] = deque()
        self._changed = anyio.Event()
        self._tg: anyio.abc.TaskGroup | None = None
        self._refill_scope: anyio.CancelScope | None = None
        self._open = False
        self._closed = False
        self._failures: deque[BaseException] = deque()  # not yet raised by an acquire
        self._removal_errors: list[SandboxError] = []  # raised at close: they may be leaks
        self._retry_at = 0.0
        self._backoff = 0.0
        self._latencies: deque[float] = deque(maxlen=LATENCY_WINDOW)
        self._counts = dict.fromkeys(
            ("created", "reused", "discarded", "unhealthy", "failed", "acquired"), 0)
        self._last_error = ""
        self._told_unverifiable = False  # logged once per pool: every release discards

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> SandboxPool:
        if self._open or self._closed:
            raise SandboxError("a SandboxPool can be entered once; make a new one")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg, self._open = tg, True
        # Made here, not in the task: a pool closed before the task first runs must stop it.
        self._refill_scope = anyio.CancelScope()
        tg.start_soon(self._refiller, self._refill_scope)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        """Remove every sandbox (ready, in use, being made) and wait until all are gone.

        Raises:
            SandboxError: Some could not be removed (``gc`` collects them once this process
                has exited); raised only when the block itself raised nothing.
        """
        assert self._tg is not None
        self._close()
        try:
            suppress = await self._tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The background tasks catch their own errors, so the group holds only what the
            # block raised: let that propagate as itself, not wrapped.
            if exc is not None and all(e is exc for e in group.exceptions):
                return False
            raise
        if self._removal_errors and exc is None:
            first = self._removal_errors[0]
            raise SandboxError(
                f"the pool could not remove {len(self._removal_errors)} sandbox(es)",
                details=f"{first}; `python -m sandbox gc` removes them once this process "
                        "has exited", cause=first)
        return suppress

    def _close(self) -> None:
        """Stop refilling and remove every sandbox; the task group then waits for it all."""
        self._closed = True
        if self._refill_scope is not None:
            self._refill_scope.cancel()  # creates in flight remove what they made
        self._start_retired(math.inf)
        while self._ready:
            self._discard(self._ready.popleft(), "the pool closed")
        for lease in list(self._held):
            # A user still holding one (in another task) finds it removed.
            self._discard(lease, "the pool closed")
        self._notify()

    @property
    def config(self) -> SandboxConfig:
        """What every sandbox of the pool is created from."""
        return self._config

    def stats(self) -> PoolStats:
        """A snapshot of the pool's counts and acquire latency."""
        samples = list(self._latencies)
        return PoolStats(
            ready=len(self._ready), in_use=len(self._held), creating=self._creating,
            removing=self._removing, acquire_p50=_percentile(samples, 0.5),
            acquire_p95=_percentile(samples, 0.95), last_error=self._last_error,
            **self._counts)

    # -- acquire and release -----------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Sandbox]:
        """Yield a started sandbox the engine says is running; give it back on leaving.

        Do not keep the sandbox after the block: with ``max_uses > 1`` the next user gets it.

        Raises:
            SandboxNotRunning: The pool is not open (use ``async with SandboxPool(...)``) or
                closed while waiting.
            SandboxInitFailed: Creating a sandbox failed in the background while this
                acquire waited for one (the failure is its cause).
        """
        start = time.perf_counter()
        lease = await self._take()
        self._latencies.append(time.perf_counter() - start)
        self._counts["acquired"] += 1
        if lease.uses:
            self._counts["reused"] += 1
        try:
            yield lease.sb
        finally:
            # Synchronous: the pool's task group does the rest, so a cancelled caller
            # cannot interrupt a reset or a removal halfway.
            self._release(lease)

    async def _take(self) -> _Lease:
        if not self._open:
            raise SandboxNotRunning("the pool is not open: use `async with SandboxPool(...)`")
        waiting = False
        try:
            while True:
                changed = self._changed
                if self._closed:
                    raise SandboxNotRunning("the pool was closed")
                if self._ready:
                    lease = self._ready.popleft()
                    self._held.add(lease)
                    if await self._usable(lease):
                        now = time.monotonic()
                        self._quiet_at = now + REFILL_DELAY
                        if not waiting:
                            # Served from the queue: its refill waits for a quiet moment
                            # (REFILL_DELAY without an acquire, RETIRE_LIMIT at most).
                            if self._refill_after <= now:
                                self._deferred_since = now
                            self._refill_after = min(self._quiet_at,
                                                     self._deferred_since + RETIRE_LIMIT)
                            self._refill_one = False
                        self._notify()
                        return lease
                    continue
                if self._failures:
                    failure = self._failures.popleft()
                    raise SandboxInitFailed(
                        "the pool could not create a sandbox",
                        details=f"{type(failure).__name__}: {failure}", cause=failure)
                if not waiting:
                    # Counted only now: the refiller makes one more per acquire that waits.
                    waiting = True
                    self._waiting += 1
                    self._notify()
                    continue
                await changed.wait()
        finally:
            if waiting:
                self._waiting -= 1

    async def _usable(self, lease: _Lease) -> bool:
        """Check a lease just taken from the ready queue; discard it if it is not usable.

        The backend's ``health`` is asked (from the host where it sees the container, else
        the engine), not the sandbox's cached status: a container killed a moment ago may not
        have reached the event watcher yet.
        """
        why = ""
        if self._max_idle is not None and \
                time.monotonic() - lease.idle_since > self._max_idle:
            why = "idle longer than max_idle"
            self._discard(lease, why)
            return False
        try:
            if lease.sb.status is not SandboxStatus.RUNNING:
                why = f"it is {lease.sb.status.value}"
            elif isinstance(backend := lease.sb.backend, SupportsHealth):
                why = await backend.health()
            # else: a backend that cannot ask its engine is judged by its lifecycle alone
        except SandboxError as exc:
            why = str(exc)
        except BaseException:
            # Cancelled while asking: the lease goes back untouched.
            self._held.discard(lease)
            self._ready.appendleft(lease)
            self._notify()
            raise
        if why:
            self._counts["unhealthy"] += 1
            log.info("pool: sandbox %s not handed out: %s", lease.sb.id, why)
            self._discard(lease, why)
            return False
        return True

    def _release(self, lease: _Lease) -> None:
        if lease not in self._held:
            return  # the pool closed meanwhile and removed it
        if self._refill_after and not self._ready:
            # Its user is done and nothing else is ready: one create for the next user may
            # start (the rest of the top-up waits for the quiet moment). With one still
            # ready, the next acquire (often at once) is served without it.
            self._refill_one = True
            self._notify()
        lease.uses += 1
        sb = lease.sb
        if self._closed or lease.uses >= self._max_uses or \
                sb.status is not SandboxStatus.RUNNING:
            self._retire(lease, "used up" if lease.uses >= self._max_uses else "not running")
            return
        if lease.baseline is not None and lease.baseline.unverifiable:
            self._retire(lease, f"a reset cannot verify it: {lease.baseline.unverifiable}")
            return
        assert self._tg is not None
        self._tg.start_soon(self._recycle, lease)

    async def _recycle(self, lease: _Lease) -> None:
        """Reset a used sandbox for its next user, or discard it."""
        assert lease.baseline is not None
        try:
            why = await reset(lease.sb, lease.baseline)
        except SandboxError as exc:
            why = f"the reset failed: {exc}"
        except Exception as exc:
            self._failed(exc)
            why = f"the reset failed: {type(exc).__name__}: {exc}"
        if lease not in self._held:
            return  # removed at close meanwhile
        if why or self._closed:
            log.info("pool: sandbox %s not reused: %s", lease.sb.id, why or "the pool closed")
            self._discard(lease, why or "the pool closed")
            return
        self._held.discard(lease)
        lease.idle_since = time.monotonic()
        self._ready.append(lease)
        self._notify()

    # -- background --------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    def _retire(self, lease: _Lease, why: str) -> None:
        """Take a given-back lease out of service now; its removal starts in `_start_retired`
        (the refiller), off the next user's first command."""
        if self._closed:
            self._discard(lease, why)
            return
        self._held.discard(lease)
        self._removing += 1  # holds no place, but counts against twice max_size
        self._counts["discarded"] += 1
        self._retiring.append((time.monotonic(), lease, why))
        self._notify()

    def _start_retired(self, now: float) -> None:
        """Start the removals that waited: all once no acquire came for REFILL_DELAY (or at
        close, ``now`` infinite) or when a create wants their room; else those released more
        than RETIRE_LIMIT ago."""
        if not self._retiring:
            return
        wanted = self._min_ready + self._waiting - len(self._ready) - self._creating > 0
        crowded = wanted and self._live() + self._removing >= 2 * self._max_size
        everything = now >= self._quiet_at or crowded
        while self._retiring and (everything or self._retiring[0][0] + RETIRE_LIMIT <= now):
            _, lease, why = self._retiring.popleft()
            assert self._tg is not None
            self._tg.start_soon(self._remove, lease.sb, why)

    def _live(self) -> int:
        return len(self._ready) + len(self._held) + self._creating

    def _to_create(self, now: float) -> int:
        """Creates to start now: a lease taken leaves a deficit at once (not at its release),
        and a used sandbox being removed holds no place, so a slow removal never holds back
        the next create, unless removals pile up: with them, at most twice ``max_size``.
        A top-up right after an acquire waits for a quiet moment (`REFILL_DELAY`), except
        one create once a release left nothing ready (and none is being made)."""
        want = self._min_ready + self._waiting
        deficit = want - len(self._ready) - self._creating
        if not self._waiting and now < self._refill_after:
            if not (self._refill_one and not self._ready and not self._creating):
                return 0  # a top-up right after an acquire: deferred (REFILL_DELAY)
            deficit = min(deficit, 1)
        live = self._live()
        room = min(self._max_size - live, 2 * self._max_size - live - self._removing)
        return max(0, min(deficit, room, self._concurrency - self._creating))

    async def _refiller(self, scope: anyio.CancelScope) -> None:
        """Keep ``min_ready`` (plus one per waiting acquire) ready; expire idle ones."""
        with scope:
            async with anyio.create_task_group() as creators:
                while True:
                    changed = self._changed
                    self._expire_idle()
                    now = time.monotonic()
                    self._start_retired(now)
                    if now >= self._retry_at:
                        for _ in range(self._to_create(now)):
                            self._creating += 1
                            creators.start_soon(self._create_one)
                    wake = self._next_wake(now)
                    with anyio.move_on_after(wake):
                        await changed.wait()

    def _next_wake(self, now: float) -> float:
        wake = math.inf
        if self._retry_at > now:
            wake = self._retry_at - now
        if self._refill_after > now:
            wake = min(wake, self._refill_after - now)
        if self._retiring:
            wake = min(wake, max(0.0, min(self._quiet_at, self._retiring[0][0] + RETIRE_LIMIT)
                                 - now))
        if self._ready:
            # The event watcher marks a sandbox killed while idle: look again each second.
            wake = min(wake, 1.0)
            if self._max_idle is not None:
                oldest = min(lease.idle_since for lease in self._ready)
                wake = min(wake, max(0.01, oldest + self._max_idle - now))
        return wake

    def _expire_idle(self) -> None:
        """Discard ready sandboxes idle too long, or found stopped while waiting."""
        now = time.monotonic()
        for lease in list(self._ready):
            why = ""
            if self._max_idle is not None and now - lease.idle_since > self._max_idle:
                why = "idle longer than max_idle"
            elif lease.sb.status is not SandboxStatus.RUNNING:
                why = f"it is {lease.sb.status.value} while idle"
                self._counts["unhealthy"] += 1
            if why:
                self._ready.remove(lease)
                self._held.add(lease)
                self._discard(lease, why)

    async def _create_one(self) -> None:
        sb: Sandbox | None = None
        started = False
        try:
            sb = self._factory(self._config)
            await sb.initialize()  # a failed or cancelled one removes what it made
            started = True
            baseline = await record_baseline(sb) if self._max_uses > 1 else None
            # Checked once here, off the acquire's path: a backend may prepare its quick
            # check meanwhile (Docker takes its host view of the container from the answer).
            backend = sb.backend
            why = await backend.health() if isinstance(backend, SupportsHealth) else ""
        except Exception as exc:
            self._creating -= 1
            if sb is not None and started:
                self._removing += 1
                assert self._tg is not None
                self._tg.start_soon(self._remove, sb, "its baseline could not be recorded")
            self._failed(exc)
            self._failures.append(exc)
            # Only the latest few wait for an acquire; the count and the log keep the rest.
            while len(self._failures) > self._max_size:
                self._failures.popleft()
            self._backoff = min(MAX_BACKOFF, max(FIRST_BACKOFF, self._backoff * 2))
            self._retry_at = time.monotonic() + self._backoff
            self._notify()
            return
        except BaseException:
            self._creating -= 1
            if sb is not None and started:
                with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                    await sb.cleanup()
            raise
        self._creating -= 1
        self._counts["created"] += 1
        self._backoff = 0.0
        self._failures.clear()  # stale: creating works again (each was logged and counted)
        if baseline is not None and baseline.unverifiable and not self._told_unverifiable:
            self._told_unverifiable = True
            log.warning("pool: max_uses=%d, but no sandbox will be reused: a reset cannot "
                        "verify one (%s); each user gets a fresh sandbox", self._max_uses,
                        baseline.unverifiable)
        lease = _Lease(sb, baseline)
        if self._closed or why:
            if why:
                self._counts["unhealthy"] += 1
                log.info("pool: new sandbox %s not handed out: %s", sb.id, why)
            self._held.add(lease)
            self._discard(lease, why or "the pool closed")
        else:
            self._ready.append(lease)
        self._notify()

    def _failed(self, exc: BaseException) -> None:
        """Record a background failure: logged, counted, and raised by a waiting acquire."""
        log.error("pool: %s: %s", type(exc).__name__, exc, exc_info=exc)
        self._counts["failed"] += 1
        self._last_error = f"{type(exc).__name__}: {exc}"

    def _discard(self, lease: _Lease, why: str) -> None:
        """Remove a held lease's sandbox in the background; it counts until it is gone."""
        self._held.discard(lease)
        self._removing += 1
        self._counts["discarded"] += 1
        assert self._tg is not None
        self._tg.start_soon(self._remove, lease.sb, why)

    async def _remove(self, sb: Sandbox, why: str) -> None:
        try:
            with anyio.CancelScope(shield=True):
                await sb.cleanup()
        except SandboxError as exc:
            exc.add_note(f"removing pool sandbox {sb.id} ({why})")
            self._failed(exc)
            self._removal_errors.append(exc)
        finally:
            self._removing -= 1
            self._notify()
