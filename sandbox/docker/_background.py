"""A Docker sandbox's own background work: engine events, the wall clock, the sampler.

All of it runs under one `Supervisor` (an anyio task group the sandbox owns). What it learns
reaches the sandbox's `Lifecycle`: a stop, an OOM kill, a removal or a pause from outside, the
wall time limit, or its own failure, which fails the sandbox visibly. The cleanup ends it
(`Background.ending`) while the engine removes the container.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence

import anyio

from .._audit import Auditor
from .._errors import SandboxError
from .._lifecycle import Lifecycle
from .._models import ResourceUsage, SandboxConfig
from .._policy import seconds
from .._supervisor import Supervisor, Work
from ._finish import ResultFinisher
from ._gateway import Engine
from ._health import REMOVED_REASON, watch_container
from ._helpers import Helpers
from ._host_health import SHAPE, HostHealth
from ._main_pid import MainPid
from ._stats import PROC_SCRIPT, StatsSampler, parse_proc_counts

__all__ = ["Background", "Ending"]

log = logging.getLogger("sandbox.health")

#: Seconds after the event watcher's first look during which `Background.host_view` looks
#: again at a container not yet of the expected shape (``runc init`` still to exec docker-init,
#: or docker-init still to fork the keepalive: milliseconds, more under load).
HOST_VIEW_PATIENCE = 10.0


def _attach(error: BaseException, close: BaseException) -> None:
    """Keep ``close`` (closing the host's views failed as well) on ``error``, which leads: a
    note says it, and it is the error's context unless that holds another already."""
    error.add_note("closing the host's views of the container failed too: "
                   f"{type(close).__name__}: {close}")
    if error.__context__ is None:
        error.__context__ = close


class Ending:
    """What ending the background work raised (closing the host's views of the container:
    its pidfds, its cgroup files), kept while the cleanup removes the network and workspace."""

    def __init__(self) -> None:
        self.error: Exception | None = None

    def check(self, errors: Sequence[str]) -> None:
        """Raise what the cleanup could not do, if anything. The removal's ``errors`` lead
        (something is left on the engine or the host), with the close's error attached."""
        close = self.error
        if errors:
            error = SandboxError("cleanup could not remove everything",
                                 details="; ".join(errors), retryable=True)
            if close is not None:
                _attach(error, close)
            raise error
        if close is not None:
            raise SandboxError("cleanup removed everything but could not close the host's "
                               "views of the container",
                               details=f"{type(close).__name__}: {close}", cause=close)


class Background:
    """Watches one container for its sandbox; `ending` (the cleanup's) ends the watching."""

    def __init__(self, owner: str, *, life: Lifecycle, audit: Callable[[], Auditor],
                 stop_commands: Callable[[], None]) -> None:
        self._life, self._audit, self._stop_commands = life, audit, stop_commands
        self._supervisor = Supervisor(owner, self._failed)
        self._engine: Engine | None = None
        self._container_id = ""
        self._helpers: Helpers | None = None
        #: The stats sampler, once one runs (or `get_resource_usage` made one).
        self.sampler: StatsSampler | None = None
        #: Whether the container is paused, as the event watcher last saw it.
        self.paused = False
        #: Pauses and unpauses the watcher saw (a checkpoint waits for its own two).
        self.pause_events = 0
        #: A checkpoint's own freeze is under way: commands wait for it at the exec gate, so
        #: the sandbox stays RUNNING.
        self.checkpointing = False
        #: The container seen from the host (its init's pidfd and its freezer), once the
        #: event watcher's first look gave the init's pid; None where the host cannot see it.
        self.host_health: HostHealth | None = None
        self._init_pid = 0  # the engine's pid of the init, while a host view may be taken
        self._main_pid: MainPid | None = None
        self._host_until = 0.0
        self._then: Callable[[], None] | None = None  # what `cancel` runs at the end
        self._close_error: Exception | None = None  # from that, for `ending` to keep

    @property
    def task(self) -> object:
        """The supervisor task while it runs (for tests that watch it end)."""
        return self._supervisor.task

    def start(self, engine: Engine, container_id: str, *, life: Lifecycle,
              config: SandboxConfig, finisher: ResultFinisher, helpers: Helpers,
              on_sample: Callable[[ResourceUsage], object] | None, host_mem: int,
              main_pid: MainPid | None = None) -> None:
        """Start the event watcher, the wall clock (if limited) and the sampler (if asked)."""
        self._engine, self._container_id, self._helpers = engine, container_id, helpers
        self._life, self._main_pid = life, main_pid
        work: list[Work] = []
        wall = seconds(config.resources.wall_time_limit)
        if wall is not None:
            work.append(("the wall clock", lambda: self._wall_clock(wall)))
        if main_pid is not None:
            main_pid.expect_offer()  # the watcher's first look, for the sampler
        work.append(("the event watcher", lambda: watch_container(
            engine, container_id, self.on_container_stop, on_oom=finisher.on_oom,
            on_pause=self._on_pause, on_running=self._found_init)))
        interval = config.stats_interval.total_seconds()
        if interval > 0:
            sampler = self.sampler = StatsSampler(
                engine, container_id, interval=max(interval, 1.0), on_sample=on_sample,
                proc_reader=self._read_proc_counts, started_at=time.monotonic(),
                host_mem=host_mem, host=True, main_pid=main_pid,
            )
            work.append(("the stats sampler", sampler.run))
        self._supervisor.start(work, unless=lambda: life.removing)

    def cancel(self, then: Callable[[], None]) -> None:
        """Ask the background work to end, not waiting: its streams close while the engine
        removes the container. Once it has ended the host view closes, then ``then`` runs
        (in the shadow of the removal, not after it); `ending` waits for all that and
        keeps what they raised."""
        self._init_pid, self._host_until = 0, -1.0  # closing: no new host view
        self._then = then
        self._supervisor.cancel(self._ended)

    def _ended(self) -> None:
        """The work has ended: close the host view and run what `cancel` was given (once),
        each whatever the other raised."""
        then, self._then = self._then, None
        for close in (self._close_host, then):
            try:
                if close is not None:
                    close()
            except Exception as exc:  # raised in the cleanup's task (`_end`)
                if self._close_error is None:
                    self._close_error = exc
                else:
                    _attach(self._close_error, exc)

    @contextlib.asynccontextmanager
    async def ending(self, then: Callable[[], None]) -> AsyncIterator[Ending]:
        """`cancel` (``then`` as there), then the block (the container's removal: its DELETE
        goes out while the work ends), then the wait for that end, whatever the block did.

        What closing the host's views raised stops nothing: it is noted on the block's error
        if the block raised (that error leads), else kept in the `Ending` for its `check`,
        after the network and the workspace were removed.
        """
        self.cancel(then)
        ended = Ending()
        try:
            yield ended
        except BaseException as exc:
            if (close := await self._end()) is not None:
                _attach(exc, close)
            raise
        ended.error = await self._end()

    async def _end(self) -> Exception | None:
        """End all background work and wait for it; return what closing the host's views
        raised (once)."""
        await self._supervisor.aclose()
        self._init_pid, self._host_until = 0, -1.0  # closed: no host view any more
        self._ended()  # where the task's end came first (its callbacks run later)
        error, self._close_error = self._close_error, None
        return error

    def _close_host(self) -> None:
        host, self.host_health = self.host_health, None
        if host is not None:
            host.close()

    def _found_init(self, pid: int) -> None:
        """The watcher saw the container run with init ``pid``: look at it from the host
        (and let the finisher and the sampler have the pid without an inspect of their own)."""
        if self._main_pid is not None:
            self._main_pid.offer(pid)
        if self._host_until:
            return  # looked already (the engine's answer to `health` came first)
        self._init_pid, self._host_until = pid, time.monotonic() + HOST_VIEW_PATIENCE
        self.host_view()

    def offer_init(self, pid: int) -> None:
        """An inspect made anyway (`health` asking the engine) gave the init's pid before the
        watcher's first look: take the host view from it, so the next `health` is local."""
        self._found_init(pid)

    def host_view(self) -> HostHealth | None:
        """The container seen from the host, or None (health is asked of the engine then).

        The first look may come before docker-init has started the keepalive; then the next
        calls look again, for `HOST_VIEW_PATIENCE` seconds.
        """
        if self.host_health is not None or not self._init_pid:
            return self.host_health
        found = HostHealth.open(self._container_id, self._init_pid)
        if isinstance(found, HostHealth):
            self.host_health = found
        elif found != SHAPE or time.monotonic() >= self._host_until:
            log.debug("container %s: health is asked of the engine: %s",
                      self._container_id[:12], found)
            self._init_pid = 0  # for good
        return self.host_health

    def _failed(self, name: str, exc: Exception) -> None:
        self._life.fail(f"{name} failed: {type(exc).__name__}: {exc}", error=exc)
        self._stop_commands()

    async def _read_proc_counts(self) -> tuple[int, int, int]:
        # As the sandbox user: root has no capabilities, so it could not read another
        # user's fds either; the SDK's own root helpers are not what the counts are for.
        assert self._helpers is not None
        result = await self._helpers.run(["/bin/sh", "-c", PROC_SCRIPT], what="count processes")
        return parse_proc_counts(result.stdout)

    def on_container_stop(self, reason: str, exit_code: int | None, oom_killed: bool) -> None:
        """The container stopped (or was removed): record why, end its commands."""
        if self._life.fail(reason, exit_code=exit_code, oom_killed=oom_killed,
                           gone=reason == REMOVED_REASON) and oom_killed:
            self._audit().limit("memory", f"the sandbox stopped: {reason}")
        self._stop_commands()

    def _on_pause(self, paused: bool) -> None:
        self.paused = paused
        self.pause_events += 1
        if not (paused and self.checkpointing):
            self._life.set_paused(paused, "the container was paused from outside")

    async def _wall_clock(self, limit: float) -> None:
        await anyio.sleep(limit)
        if not self._life.alive:
            return
        self._life.fail(f"TimeoutExceeded: wall_time_limit of {limit:g} s reached")
        self._audit().limit("wall_time", self._life.reason)
        assert self._engine is not None
        with contextlib.suppress(SandboxError):
            if self.paused:
                # Pausing must not outlive the limit; a frozen container ignores SIGKILL.
                await self._engine.request("unpause the sandbox at its wall time limit",
                                           f"containers/{self._container_id}/unpause", "POST")
            await self._engine.request("stop the sandbox at its wall time limit",
                                       f"containers/{self._container_id}/kill", "POST")
        self._stop_commands()
