"""What completes a command's result that only the sandbox knows: usage and OOM kills.

A command's exec tells its exit code; the sandbox adds the CPU and memory it used (from the
container's cgroup on this host, else the sampler), whether the out-of-memory killer ended it,
and, under gVisor, whether it failed because the whole sandbox died.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import anyio
import attrs

from .._cgroup_usage import (
    Counters,
    HostCgroup,
    RawCounters,
    lazy_command_usage,
    raw_command_usage,
)
from .._errors import SandboxError
from .._lazy_usage import LazyUsage
from .._lifecycle import Lifecycle
from .._models import CommandResult, ResourceLimits, ResourceUsage, SandboxStatus
from ._gateway import Engine
from ._main_pid import MainPid
from ._stats import StatsSampler
from ._usage import quiet_changes, quiet_last

__all__ = ["CommandFinalizer", "ResultFinisher"]

#: Called when the container is found stopped: (reason, exit code, OOM-killed).
OnStop = Callable[[str, "int | None", bool], None]


def _join_errors(first: str, rest: str) -> str:
    return f"{first}; {rest}" if rest else first


class CommandFinalizer:
    """Completes one command's result: `measure` when it ended (the result is then built
    with the usage, once), and the call adds the OOM kill and what else only the sandbox knows
    (and the usage, when nobody measured it: a session's result)."""

    def __init__(self, finisher: ResultFinisher, cgroup: HostCgroup | None,
                 before: Counters | RawCounters | None, start: float, ooms: int) -> None:
        self._finisher, self._cgroup, self._before = finisher, cgroup, before
        self._start, self._ooms = start, ooms
        self._measured = False
        self._usage: ResourceUsage | LazyUsage | None = None

    def measure(self) -> ResourceUsage | LazyUsage | None:
        """The usage from the command's start until now (the first call's; None: none): its
        counters are read now, the value may be built on first read (`LazyUsage`)."""
        if not self._measured:
            self._measured = True
            self._usage = self._finisher._usage(self._cgroup, self._before, self._start)
        return self._usage

    async def __call__(self, result: CommandResult) -> CommandResult:
        if self._measured and result.exit_code == 0:
            # Measured, and nothing else to add: the OOM, gVisor and SIGXCPU news all need a
            # non-zero exit (a signal a zero exit carries is a kill's SIGKILL). No coroutine
            # of `_finish` for most commands.
            return result
        usage = None if self._measured else self.measure()
        return await self._finisher._finish(result, usage, self._ooms)


def _raw_usage(last: ResourceUsage | None, before: RawCounters, after: RawCounters,
               seconds: float, timestamp: datetime) -> ResourceUsage:
    """`raw_command_usage` over the window of ``last`` alone (`quiet_changes`; None: no
    sampler), for `LazyUsage`: the value `_usage`'s eager path gives."""
    pending = None if last is None else quiet_changes(last, seconds)
    return raw_command_usage(last, before, after, seconds, pending, timestamp)


class ResultFinisher:
    """Completes the results of one container's commands; counts its OOM events."""

    def __init__(self, engine: Engine, container_id: str, *, life: Lifecycle,
                 resources: ResourceLimits, gvisor: bool,
                 sampler: Callable[[], StatsSampler | None], on_stop: OnStop,
                 main_pid: MainPid | None = None) -> None:
        self._engine, self._container_id, self._life = engine, container_id, life
        self._main_pid = main_pid or MainPid(engine, container_id)
        self._resources, self._gvisor = resources, gvisor
        self._sampler, self._on_stop = sampler, on_stop
        self._cgroup: HostCgroup | None = None
        self._cgroup_looked_up = False
        self.oom_events = 0
        self._oom_seen = anyio.Event()

    def on_oom(self) -> None:
        """Count an OOM event the engine reported for the container."""
        self.oom_events += 1
        self._oom_seen.set()
        self._oom_seen = anyio.Event()

    async def _host_cgroup(self) -> HostCgroup | None:
        """The container's cgroup on this host, looked up once; None for a remote engine."""
        if not self._cgroup_looked_up:
            with contextlib.suppress(SandboxError):
                pid = await self._main_pid.get()  # shared with the sampler: one inspect
                self._cgroup = HostCgroup.find(pid, self._container_id)
                self._cgroup_looked_up = True  # an engine error is worth another try
                if self._cgroup is not None:
                    # Read twice per command, on the loop: the files stay open until
                    # `close` (when the budget allows; else they are opened per read).
                    self._cgroup.keep_open()
        return self._cgroup

    def close(self) -> None:
        """Close the container's cgroup files (the sandbox is being removed)."""
        if self._cgroup is not None:
            self._cgroup.close()

    async def finalizer(self) -> CommandFinalizer:
        """Return what completes a command's result; call it just before the command starts."""
        if not self._cgroup_looked_up:
            await self._host_cgroup()
        return self.finalizer_now()

    def finalizer_now(self) -> CommandFinalizer:
        """`finalizer` without an await, once the cgroup was looked up (every command of a
        local container but the first; a coroutine per command cost more than its work)."""
        cgroup = self._cgroup
        before: Counters | RawCounters | None = None
        if cgroup is not None:
            # Read now, parsed when the usage is (see `_usage`).
            before = cgroup.read_raw(limit=False) or cgroup.read(limit=False)
        return CommandFinalizer(self, cgroup if before is not None else None, before,
                                time.monotonic(), self.oom_events)

    @property
    def ready(self) -> bool:
        """Whether `finalizer_now` has what `finalizer` would look up."""
        return self._cgroup_looked_up

    def _usage(self, cgroup: HostCgroup | None, before: Counters | RawCounters | None,
               start: float) -> ResourceUsage | LazyUsage | None:
        """The sandbox's usage from ``start`` until now: the sampler's window, made exact by
        the cgroup's counters where the SDK reads them (``before``: at the start), then built
        on first read."""
        end = time.monotonic()
        sampler = self._sampler()
        if type(before) is RawCounters and cgroup is not None:
            # The usual case, no sample since the command started: the window is the last
            # sample, its changes made in the build.
            # (Its records read in place: a method for it would take _stats.py past its
            # bound; this module is the sampler's sibling.)
            last = quiet_last(sampler._records, start) if sampler else None
            if last is not None or sampler is None:
                raw = cgroup.read_raw()
                if raw is not None:
                    # Read now, parsed and built on first read: whatever the bytes hold,
                    # the build gives what the eager path below gives with them.
                    return LazyUsage(_raw_usage, (last, before, raw, end - start,
                                                  datetime.now(UTC)))
        window = sampler.window(start, end) if sampler else None
        after = cgroup.read() if cgroup is not None and before is not None else None
        counted = before.parse() if isinstance(before, RawCounters) else before
        if counted is not None and after is not None:
            # One build: the window's changes and the counters' together.
            if window is None:
                return lazy_command_usage(None, counted, after, end - start)
            return lazy_command_usage(window[0], counted, after, end - start, window[1])
        if window is not None:
            return attrs.evolve(window[0], **window[1])
        return sampler.usage_between(start, end) if sampler else None

    async def _finish(self, result: CommandResult, usage: ResourceUsage | LazyUsage | None,
                      ooms: int) -> CommandResult:
        """Add what only the sandbox knows: usage during the command (None: the result has
        it already, or there is none), and OOM kills."""
        if result.exit_code != 0 and self._gvisor and not result.timed_out:
            # runsc reports its own lost connection to the dying sandbox as exit 128, often
            # before the engine has seen the container stop.
            await self._raise_if_container_died(2.0 if result.exit_code == 128 else 0.0)
        changes: dict[str, Any] = {}
        if usage is not None:
            changes["resource_usage"] = usage
        if result.exit_code == 137 and not result.timed_out:
            if self.oom_events == ooms and self._resources.memory_limit:
                # The oom event may trail the exec's end by a moment.
                with anyio.move_on_after(0.5):
                    await self._oom_seen.wait()
            if self.oom_events > ooms:
                changes["oom_killed"] = True
                changes["error"] = _join_errors(
                    "killed by the out-of-memory killer (memory limit reached)", result.error)
        if result.signal == "SIGXCPU" and not result.error:
            cpu_time = self._resources.cpu_time_limit.total_seconds()
            if cpu_time:
                changes["error"] = f"killed by SIGXCPU: cpu_time_limit of {cpu_time:g} s reached"
        return attrs.evolve(result, **changes) if changes else result

    async def _raise_if_container_died(self, patience: float) -> None:
        """Under gVisor a command can fail *because* the sandbox died (exit 128, "urpc ...
        EOF" on stderr, when the OOM killer took the whole sandbox); then that is the news.
        """
        if self._life.status is SandboxStatus.RUNNING:
            state: Mapping[str, Any] = {}
            with anyio.move_on_after(patience + 5):
                give_up = time.monotonic() + patience
                while True:
                    try:
                        data = await self._engine.query_json(
                            "inspect the sandbox", f"containers/{self._container_id}/json",
                            deadline=5)
                    except SandboxError:
                        return
                    state = data.get("State") or {}
                    if not state.get("Running") or time.monotonic() >= give_up:
                        break
                    await anyio.sleep(0.05)
            if state.get("Running", True):
                return
            # The event watcher explains the stop best (a kill from outside, OOM); wait for it.
            with anyio.move_on_after(1.0):
                while True:
                    if self._life.status is not SandboxStatus.RUNNING:
                        break
                    await anyio.sleep(0.02)
            if self._life.status is SandboxStatus.RUNNING:
                code, oom = state.get("ExitCode"), bool(state.get("OOMKilled"))
                self._on_stop(f"the container's main process exited with code {code}"
                              + (" (OOMKilled)" if oom else ""), code, oom)
        if self._life.status is SandboxStatus.FAILED:
            raise self._life.not_running()
