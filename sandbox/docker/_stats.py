"""The stats sampler: a background task following a container's stats stream.

`StatsSampler` follows the engine's streaming endpoint (through `_follow.follow_json_lines`,
which reopens it with backoff), turns each sample into a `ResourceUsage` with
`_usage.usage_from_stats`, keeps a bounded history and answers per-command questions with
`StatsSampler.usage_between`. How the engine's samples behave (one a second, one-shot latency,
zero-time samples of a stopped container) is in docs/engine-notes.md, section "Stats".
"""

from __future__ import annotations

import collections
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, Final, NamedTuple, TypeVar

import anyio
import attrs

from .._errors import SandboxNotRunning, TimeoutExceeded
from .._models import ResourceUsage
from ._follow import GAVE_UP, Reconnect, follow_json_lines
from ._gateway import Engine, EngineNotFound
from ._usage import (
    PROC_SCRIPT,
    parse_proc_counts,
    read_time,
    sample_is_live,
    usage_from_stats,
    usage_over,
)
from ._wire import size_rw

# PROC_SCRIPT and parse_proc_counts belong with the sampler's callers too (the sandbox reads
# process counts with them).
__all__ = ["PROC_SCRIPT", "ProcReader", "StatsSampler", "parse_proc_counts"]

log = logging.getLogger("sandbox.stats")

_T = TypeVar("_T")

#: Reads (processes, threads, open file handles) inside the sandbox; see `PROC_SCRIPT`.
ProcReader = Callable[[], Awaitable[tuple[int, int, int]]]
SampleCallback = Callable[[ResourceUsage], object]

#: Consecutive stream failures tolerated before the sampler gives up (logged, not raised).
STREAM_RETRIES: Final = 5
#: Seconds to wait before each reconnect; the last value repeats.
STREAM_BACKOFF: Final = (0.5, 1.0, 2.0, 4.0, 8.0)
#: The engine sends a sample every second, even for a stopped container, so a silent stream
#: for this long is broken.
STREAM_READ_TIMEOUT: Final = 30.0
#: Read processes/threads/fds every this many engine samples (it costs an exec).
PROC_EVERY: Final = 5
#: Read the writable layer's size every this many samples: ``size=1`` walks the layer, 1 ms
#: for a fresh container but 0.2 s with 50,000 files.
SIZE_EVERY: Final = 10
#: Limit for one proc read, size read or one-shot sample.
SLOW_CALL_TIMEOUT: Final = 10.0
#: Samples kept for per-command windows, independent of the published history.
WINDOW_SAMPLES: Final = 900
#: Published samples may come this much early, so jitter in the engine's 1 s tick does not
#: skip every other sample.
_PUBLISH_SLACK: Final = 0.25
_RECONNECT: Final = Reconnect(retries=STREAM_RETRIES, backoff=STREAM_BACKOFF)


class _Record(NamedTuple):
    mono: float
    usage: ResourceUsage


class StatsSampler:
    """Follow a container's stats in the background and keep recent samples.

    Start `run` in a task owned by the sandbox and cancel it at cleanup. The engine samples
    once a second; with ``interval`` above that every sample still feeds peaks and
    per-command windows, but only one per interval is published (``latest``, ``history``,
    ``on_sample``).

    Example:
        sampler = StatsSampler(engine, container_id, interval=1.0)
        task = asyncio.ensure_future(sampler.run())
        first = await sampler.wait_first(5)
    """

    def __init__(
        self,
        engine: Engine,
        container_id: str,
        *,
        interval: float = 1.0,
        history: int = 600,
        on_sample: SampleCallback | None = None,
        proc_reader: ProcReader | None = None,
        started_at: float | None = None,
        host_mem: int = 0,
    ) -> None:
        """Prepare a sampler; nothing runs until `run` is awaited.

        Args:
            engine: The engine client.
            container_id: The container to follow.
            interval: Seconds between published samples (the engine's floor is 1 s).
            history: Published samples kept by `history`.
            on_sample: Called with each published sample, sync or async; keep it quick,
                sampling waits for it. Errors are logged.
            proc_reader: Reads (processes, threads, fds) in the sandbox, every 5th sample.
            started_at: ``time.monotonic()`` when the sandbox started, for ``uptime``;
                defaults to now.
            host_mem: Host memory in bytes, used when a sample carries no memory limit.
        """
        self._engine = engine
        self._id = container_id
        self._interval = max(interval, 0.0)
        self._history: collections.deque[ResourceUsage] = collections.deque(
            maxlen=max(history, 1)
        )
        self._records: collections.deque[_Record] = collections.deque(
            maxlen=max(history, WINDOW_SAMPLES)
        )
        self._on_sample = on_sample
        self._proc_reader = proc_reader
        self._started_at = time.monotonic() if started_at is None else started_at
        self._host_mem = host_mem
        self._latest: ResourceUsage | None = None
        self._last_raw: Mapping[str, Any] | None = None
        self._last_published = -math.inf
        self._peak = 0
        self._seen = 0
        self._received = 0
        self._proc: tuple[int, int, int] | None = None
        self._disk_usage = 0
        self._first_event: anyio.Event | None = None
        self._slow_failures: dict[str, int] = {}

    # -- what callers read ------------------------------------------------------------------------

    @property
    def latest(self) -> ResourceUsage | None:
        """The most recently published sample, or None before the first."""
        return self._latest

    @property
    def peak_memory(self) -> int:
        """Highest memory use seen since the sampler started, in bytes."""
        return self._peak

    def history(self) -> list[ResourceUsage]:
        """Published samples, oldest first (bounded by ``history``)."""
        return list(self._history)

    def usage_between(self, start: float, end: float) -> ResourceUsage:
        """Estimate what the sandbox used between two ``time.monotonic()`` stamps.

        It is the whole sandbox's usage during the window, other concurrent commands
        included. The window is stretched to samples that exist: the last one at or before
        ``start`` and the first at or after ``end`` (else the latest), so with 1 s samples a
        short command's CPU includes up to two seconds around it; call `mark` at both ends to
        narrow it. ``cpu_time``, disk and network are deltas; ``cpu_usage`` is the average over
        the sampled window; ``memory_peak`` is the highest sample in it; point-in-time fields
        come from the closing sample; ``uptime`` is ``end - start``.
        """
        return usage_over(self._records, start, end)

    def _first(self) -> anyio.Event:
        # Created lazily: an anyio Event must be made inside a running event loop.
        if self._first_event is None:
            self._first_event = anyio.Event()
        return self._first_event

    # The brief's interface takes a timeout; a sampler that never starts must not hang callers.
    async def wait_first(self, timeout: float = 5.0) -> ResourceUsage:  # noqa: ASYNC109
        """Wait for the first published sample.

        Raises:
            TimeoutExceeded: No sample arrived within ``timeout`` seconds.
        """
        try:
            with anyio.fail_after(timeout):
                await self._first().wait()
        except TimeoutError as exc:
            raise TimeoutExceeded(
                f"no resource-usage sample arrived within {timeout:g} s", cause=exc
            ) from exc
        assert self._latest is not None
        return self._latest

    async def sample_now(self) -> ResourceUsage:
        """Take a one-shot sample now (0.15-1.0 s: the engine waits for its next tick).

        CPU is measured against the previous sample this sampler saw, if any. The sample
        updates the peak but is not published.

        Raises:
            SandboxNotRunning: The container is not running.
        """
        raw = await self._engine.query_json(
            "read resource usage", f"containers/{self._id}/stats",
            params={"stream": "0", "one-shot": "1"}, deadline=SLOW_CALL_TIMEOUT,
        )
        usage = self._build(raw, prev=self._last_raw)
        if usage is None:
            raise SandboxNotRunning("the container is not running, so it has no resource usage")
        return usage

    async def mark(self) -> ResourceUsage:
        """Take a one-shot sample and keep it, stamped now, for `usage_between`.

        Costs what `sample_now` costs; mark at a command's start and end only when the
        command may be shorter than the sampling interval and precision matters.
        """
        usage = await self.sample_now()
        self._records.append(_Record(time.monotonic(), usage))
        return usage

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the stats stream until cancelled or the container is removed.

        A broken stream is logged and reopened with backoff; after `STREAM_RETRIES`
        consecutive failures the sampler logs and returns.
        """
        outcome = await follow_json_lines(
            self._engine, "follow the container's stats", f"containers/{self._id}/stats",
            params=lambda: {"stream": "1"}, on_record=self._record, on_end=self._gone,
            reconnect=_RECONNECT, idle_timeout=STREAM_READ_TIMEOUT, log=log,
            subject=f"stats for container {self._id[:12]}",
        )
        if outcome != GAVE_UP:
            log.debug("container %s is gone; stats sampling ends", self._id[:12])

    async def _record(self, raw: Any) -> bool:
        if isinstance(raw, Mapping):
            self._received += 1
            await self._ingest(raw)
        return False

    async def _gone(self) -> bool:
        """After the engine ended the stream: whether that is because the container is gone."""
        try:
            await self._engine.query_json("inspect the container", f"containers/{self._id}/json",
                                          deadline=SLOW_CALL_TIMEOUT)
        except EngineNotFound:
            return True
        return False

    async def _ingest(self, raw: Mapping[str, Any]) -> None:
        """Fold one streamed sample in: record it always, publish it at the interval."""
        if not sample_is_live(raw):
            return  # the container is stopped; the engine sends zero-time samples
        if self._proc_reader is not None and self._seen % PROC_EVERY == 0:
            counts = await self._slow("read process counts", self._proc_reader)
            if counts is not None:
                self._proc = counts
        if self._seen % SIZE_EVERY == 0:
            size = await self._slow("read the container's disk usage", self._read_size)
            if size is not None:
                self._disk_usage = size
        self._seen += 1
        # Stream samples carry the previous tick in precpu_stats: the docker stats baseline.
        usage = self._build(raw, prev=None)
        if usage is None:
            return
        now = time.monotonic()
        self._records.append(_Record(now, usage))
        if now - self._last_published >= self._interval - _PUBLISH_SLACK:
            self._last_published = now
            await self._publish(usage)

    def _build(self, raw: Mapping[str, Any], *, prev: Mapping[str, Any] | None) -> \
            ResourceUsage | None:
        if not sample_is_live(raw):
            return None
        if prev is not None:
            before, now = read_time(prev), read_time(raw)
            if before is None or now is None or before >= now:
                prev = None  # same or older tick: no interval to measure over
        usage = usage_from_stats(
            raw, prev, uptime=timedelta(seconds=time.monotonic() - self._started_at),
            peak=self._peak, host_mem=self._host_mem,
        )
        self._peak = usage.memory_peak
        self._last_raw = raw
        extra: dict[str, Any] = {"disk_usage": self._disk_usage}
        if self._proc is not None:
            # The exec'd count is of real processes; pids.current counts threads too.
            extra.update(process_count=self._proc[0], thread_count=self._proc[1],
                         file_handles=self._proc[2])
        return attrs.evolve(usage, **extra)

    async def _publish(self, usage: ResourceUsage) -> None:
        self._latest = usage
        self._history.append(usage)
        self._first().set()
        if self._on_sample is None:
            return
        try:
            result = self._on_sample(usage)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("the on_sample callback failed; sampling goes on")

    async def _read_size(self) -> int:
        data = await self._engine.query_json(
            "read the container's disk usage", f"containers/{self._id}/json",
            params={"size": "1"}, deadline=SLOW_CALL_TIMEOUT,
        )
        return size_rw(data)

    async def _slow(self, what: str, call: Callable[[], Awaitable[_T]]) -> _T | None:
        """Run an occasional extra read with a deadline; log failures once per streak."""
        try:
            with anyio.fail_after(SLOW_CALL_TIMEOUT):
                result = await call()
        except Exception as exc:
            streak = self._slow_failures.get(what, 0)
            self._slow_failures[what] = streak + 1
            level = logging.WARNING if streak == 0 else logging.DEBUG
            reason = str(exc) or (f"no answer within {SLOW_CALL_TIMEOUT:g} s"
                                  if isinstance(exc, TimeoutError) else type(exc).__name__)
            log.log(level, "could not %s for container %s: %s", what, self._id[:12], reason)
            return None
        self._slow_failures.pop(what, None)
        return result
