"""The stats sampler: a background task following a container's stats stream.

`StatsSampler` follows the engine's streaming endpoint (through `_follow.follow_json_lines`,
which reopens it with backoff), turns each sample into a `ResourceUsage` with
`_usage.usage_from_stats`, keeps a bounded history and answers per-command questions with
`StatsSampler.usage_between`. How the engine's samples behave (one a second, one-shot latency,
zero-time samples of a stopped container) is in docs/engine-notes.md, section "Stats".
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple, TypeVar

import anyio
import attrs

from .. import _sampling
from .._cgroup_usage import Counters, HostCgroup
from .._errors import SandboxError, SandboxNotRunning, TimeoutExceeded
from .._models import ResourceUsage
from ._follow import GAVE_UP, Reconnect, follow_json_lines
from ._gateway import Engine, EngineNotFound
from ._main_pid import MainPid
from ._usage import (
    PROC_SCRIPT,
    parse_proc_counts,
    read_time,
    sample_is_live,
    usage_from_stats,
    usage_over,
    window_over,
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
#: Read from the host, an idle container (its cgroup's CPU time unchanged) has its memory and
#: I/O counters read in full at least this often.
FULL_EVERY: Final = 30.0


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
        host: bool = False,
        main_pid: MainPid | None = None,
    ) -> None:
        """Prepare a sampler; nothing runs until `run` is awaited.

        Args:
            engine: The engine client.
            container_id: The container to follow.
            interval: Seconds between published samples (the engine's floor is 1 s).
            history: Published samples kept by `history`.
            on_sample: Called with each published sample, sync or async; keep it quick,
                sampling waits for it. Errors are logged.
            proc_reader: Reads (processes, threads, fds) in the sandbox, every 5th sample
                (read from the host: once usage is asked for, see `demand`).
            started_at: ``time.monotonic()`` when the sandbox started, for ``uptime``;
                defaults to now.
            host_mem: Host memory in bytes, used when a sample carries no memory limit.
            host: Read a container of a local engine from its cgroup on this host, in the
                event loop's one sampler (`_sampling`), instead of following the engine's
                stats stream (which costs the engine ~0.2 % of a core per container); the
                stream remains the way for a remote engine.
            main_pid: Where the container's main pid is read (shared with the result
                finisher, one inspect for both); a private one when not given.
        """
        self._engine = engine
        self._id = container_id
        self._main_pid = main_pid or MainPid(engine, container_id)
        self._interval = max(interval, 0.0)
        self._history = _sampling.History(history)
        self._records: collections.deque[_Record] = collections.deque(
            maxlen=max(history, WINDOW_SAMPLES)
        )
        self._on_sample = on_sample
        self._proc_reader = proc_reader
        self._started_at = time.monotonic() if started_at is None else started_at
        self._host_mem = host_mem
        self._last_raw: Mapping[str, Any] | None = None
        self._last_published = -math.inf
        self._peak = 0
        self._seen = 0
        self._received = 0
        self._proc: tuple[int, int, int] | None = None
        self._disk_usage = 0
        self._first_event: anyio.Event | None = None
        self._slow_failures: dict[str, int] = {}
        self._host = host
        self._on_host: _HostReader | None = None
        # Read from the host, the counts and the disk size cost an exec and a layer walk
        # each: made only once someone reads usage (`demand`), or every sample goes out.
        self._wanted = on_sample is not None

    # -- what callers read ------------------------------------------------------------------------

    @property
    def latest(self) -> ResourceUsage | None:
        """The most recently published sample, or None before the first."""
        return self._history.last()

    @property
    def peak_memory(self) -> int:
        """Highest memory use seen since the sampler started, in bytes."""
        return self._peak

    def history(self) -> list[ResourceUsage]:
        """Published samples, oldest first (bounded by ``history``)."""
        return self._history.samples()

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
        summary = self.window(start, end)
        if summary is None:
            return usage_over((), start, end)
        last, changes = summary
        return attrs.evolve(last, **changes)

    def window(self, start: float, end: float) -> tuple[ResourceUsage, dict[str, Any]] | None:
        """`usage_between` as the closing sample and the changes to make to it (a caller
        that changes more makes the result once); None without samples."""
        return window_over(self._records, start, end)

    def _keep(self, stamp: float, usage: ResourceUsage) -> None:
        """Keep a record; in stamp order (the windows bisect them), as they come by
        construction (each stamped when kept)."""
        records = self._records
        if records and stamp < records[-1].mono:
            self._records = collections.deque(
                sorted((*records, _Record(stamp, usage)), key=lambda r: r.mono),
                maxlen=records.maxlen)
            return
        records.append(_Record(stamp, usage))

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
        latest = self._history.last()
        assert latest is not None
        return latest

    async def sample_now(self) -> ResourceUsage:
        """Take a one-shot sample now (0.15-1.0 s: the engine waits for its next tick).

        CPU is measured against the previous sample this sampler saw, if any. The sample
        updates the peak but is not published.

        Raises:
            SandboxNotRunning: The container is not running.
        """
        if self._on_host is not None:
            reading = self._on_host.read_now()
            if reading is None:
                raise SandboxNotRunning(
                    "the container is not running, so it has no resource usage")
            return self._from_host(reading)
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
        self._keep(time.monotonic(), usage)
        return usage

    def want(self) -> None:
        """Someone reads usage: from now on the occasional process count and disk size
        reads run (every 5th and 10th sample), for a sampler reading the host too."""
        self._wanted = True

    async def demand(self) -> bool:
        """As `want`; the first time, a host sampler reads the counts and the size at once
        (True: then `sample_now` carries them). Read from the host, those are the sampler's
        only engine calls (an exec, an inspect with ``size=1``): a sandbox whose usage nobody
        reads makes none (100 sandboxes opened at once made 100 execs a second later)."""
        first = not self._wanted
        self._wanted = True
        if not first or self._on_host is None:
            return False  # not yet on the host: its first reading makes them
        await self._read_slow(time.monotonic(), want_proc=True, want_size=True)
        return True

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Follow the stats stream until cancelled or the container is removed.

        A broken stream is logged and reopened with backoff; after `STREAM_RETRIES`
        consecutive failures the sampler logs and returns. With ``host`` and the container's
        cgroup on this host, no stream: the loop's one sampler reads it until cancelled.
        """
        if self._host:
            found = await self._find_on_host()
            if found is not None:
                self._on_host = found
                hub = _sampling.hub()
                hub.add(found)
                try:
                    await anyio.sleep_forever()
                finally:
                    hub.discard(found)
        outcome = await follow_json_lines(
            self._engine, "follow the container's stats", f"containers/{self._id}/stats",
            params=lambda: {"stream": "1"}, on_record=self._record, on_end=self._gone,
            reconnect=_RECONNECT, idle_timeout=STREAM_READ_TIMEOUT, log=log,
            subject=f"stats for container {self._id[:12]}",
        )
        if outcome != GAVE_UP:
            log.debug("container %s is gone; stats sampling ends", self._id[:12])

    async def _find_on_host(self) -> _HostReader | None:
        """The container's cgroup on this host through its main process; None: not local."""
        with contextlib.suppress(SandboxError):
            pid = await self._main_pid.get(deadline=SLOW_CALL_TIMEOUT, wait_offer=True)
            cgroup = await anyio.to_thread.run_sync(HostCgroup.find, pid, self._id)
            if cgroup is not None:
                return _HostReader(self, cgroup, pid)
        return None

    def _from_host(self, reading: _HostReading) -> ResourceUsage:
        """A sample from cgroup counters, as `usage_from_stats` makes one from the engine's."""
        c = reading.counters
        used = c.memory
        limit = c.limit or self._host_mem
        self._peak = max(self._peak, used, c.high_water)
        cpu = self._host_rate(reading)
        extra: dict[str, Any] = {}
        if self._proc is not None:
            extra.update(process_count=self._proc[0], thread_count=self._proc[1],
                         file_handles=self._proc[2])
        return ResourceUsage(
            timestamp=datetime.now(UTC), cpu_usage=cpu,
            cpu_time=timedelta(microseconds=reading.cpu_ns / 1000), memory_usage=used,
            memory_percent=used / limit * 100.0 if limit > 0 else 0.0,
            memory_peak=self._peak, disk_usage=self._disk_usage, disk_reads=c.read_bytes,
            disk_writes=c.write_bytes, network_in=reading.net[0], network_out=reading.net[1],
            uptime=timedelta(seconds=max(time.monotonic() - self._started_at, 0.0)), **extra)

    def _host_rate(self, reading: _HostReading) -> float:
        """CPU use since the previous sample, in percent of one core."""
        reader = self._on_host
        assert reader is not None
        rate, last = 0.0, reader.last
        if last is not None and reading.mono > last[0]:
            rate = max(reading.cpu_ns - last[1], 0) / 1e9 / (reading.mono - last[0]) * 100.0
        reader.last = (reading.mono, reading.cpu_ns)
        return rate

    def _host_due(self, reading: _HostReading) -> Awaitable[None] | None:
        """Fold a host reading in (on the loop): record and publish it; the occasional
        process count and disk-size read first when due and the container has run since."""
        reader = self._on_host
        assert reader is not None
        if reader.settling:
            # The first reading after our own reads: what it shows is their exec ending.
            reader.settling = False
        elif reading.active:
            reader.dirty_proc = reader.dirty_size = True
        age_proc, age_size = reading.mono - reader.read_proc, reading.mono - reader.read_size
        want_proc = self._wanted and self._proc_reader is not None and \
            self._seen % PROC_EVERY == 0 and (reader.dirty_proc or age_proc >= EXEC_REFRESH)
        want_size = self._wanted and self._seen % SIZE_EVERY == 0 and \
            (reader.dirty_size or age_size >= EXEC_REFRESH)
        self._seen += 1
        if want_proc or want_size:
            return self._host_slow(reading, want_proc, want_size)
        return self._host_publish(reading)

    async def _host_slow(self, reading: _HostReading, want_proc: bool, want_size: bool) -> None:
        await self._read_slow(reading.mono, want_proc=want_proc, want_size=want_size)
        follow = self._host_publish(reading)
        if follow is not None:
            await follow

    async def _read_slow(self, mono: float, *, want_proc: bool, want_size: bool) -> None:
        """The process counts and the disk size of a container read from the host."""
        reader = self._on_host
        assert reader is not None
        if want_proc and self._proc_reader is not None:
            counts = await self._slow("read process counts", self._proc_reader)
            if counts is not None:
                self._proc = counts
        if want_size:
            size = await self._slow("read the container's disk usage", self._read_size)
            if size is not None:
                self._disk_usage = size
        # What the reads themselves use (an exec's shell, ending after its output did) is not
        # the container running: the next reading gives the quiet baseline.
        if want_proc:
            reader.dirty_proc, reader.read_proc = False, mono
        if want_size:
            reader.dirty_size, reader.read_size = False, mono
        reader.settling = True

    def _host_publish(self, reading: _HostReading) -> Awaitable[None] | None:
        reader = self._on_host
        assert reader is not None
        now = time.monotonic()
        same = (reading.counters, reading.net, self._proc, self._disk_usage)
        if reader.published is not None and reader.published[0] == same:
            # Nothing moved: the last sample restamped (made only if someone reads it).
            # The windows need no record of it: the one before stands for it.
            base = reader.published[1]
            rate = self._host_rate(reading)
            stamp, uptime = datetime.now(UTC), now - self._started_at
            if self._on_sample is None and len(self._history):
                self._history.append_idle(stamp, uptime, reading.cpu_ns, rate)
                return None
            usage = _sampling.restamped(base, stamp, uptime, reading.cpu_ns, rate)
        else:
            usage = self._from_host(reading)
            reader.published = (same, usage)
            self._keep(now, usage)
        self._last_published = now
        self._history.append(usage)
        self._first().set()
        if self._on_sample is None:
            return None
        return _sampling.run_callback(self._on_sample, usage)

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
        self._keep(now, usage)
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


class _HostReading(NamedTuple):
    mono: float
    cpu_ns: int  # read now
    counters: Counters  # read now, or at the last full read of an idle container
    net: tuple[int, int]  # bytes received, sent
    active: bool  # used more than `IDLE_SHARE` of a core since the previous reading


#: Below this share of one core between two readings a container counts as idle: docker-init
#: wakes once a second (10-50 us), and a full re-read or an exec for that would be the cost.
#: Starting a process costs more (~1 ms).
IDLE_SHARE: Final = 0.0002
#: An idle container's processes and disk usage (an exec and an engine call: ~3 ms of this
#: process's CPU) are read again at least this often.
EXEC_REFRESH: Final = 300.0


def net_bytes(pid: int) -> tuple[int, int]:
    """Bytes received and sent on every interface but ``lo`` of ``pid``'s network namespace
    (what the engine's ``networks`` add up); (0, 0) if unreadable."""
    rx = tx = 0
    try:
        with open(f"/proc/{pid}/net/dev", "rb") as f:
            lines = f.read(1 << 16).splitlines()[2:]
    except OSError:
        return 0, 0
    for line in lines:
        name, _, rest = line.partition(b":")
        fields = rest.split()
        if name.strip() == b"lo" or len(fields) < 9:
            continue
        with contextlib.suppress(ValueError):
            rx, tx = rx + int(fields[0]), tx + int(fields[8])
    return rx, tx


class _HostReader:
    """One container's member of the loop's `_sampling.Hub`: reads its cgroup on this host."""

    def __init__(self, sampler: StatsSampler, cgroup: HostCgroup, pid: int) -> None:
        self._sampler, self.cgroup, self._pid = sampler, cgroup, pid
        self._full: tuple[float, Counters] | None = None  # last full read: (monotonic, it)
        self.last: tuple[float, int] | None = None  # (monotonic, cpu ns) of the last sample
        self.prev: tuple[float, int] | None = None  # (monotonic, cpu ns) of the last reading
        self.dirty_full = True  # active since the last full read of the counters
        self.dirty_proc = self.dirty_size = True  # active since the last count / size read
        self.read_proc = self.read_size = -math.inf  # when those were read (monotonic)
        self.settling = False  # the next reading's activity is our own reads' exec
        self.published: tuple[object, ResourceUsage] | None = None  # (what it was made of, it)

    @property
    def interval(self) -> float:
        return max(self._sampler._interval, 1.0)

    def read(self) -> object:
        return self.read_now()

    def read_now(self) -> _HostReading | None:
        """Read the counters (files only); None once the container's cgroup is gone. An idle
        container's (`IDLE_SHARE`) are those of the last full read, but for CPU time."""
        mono = time.monotonic()
        cpu = self.cgroup.cpu_ns()
        if cpu is None:
            return None
        net = net_bytes(self._pid)
        prev, self.prev = self.prev, (mono, cpu)
        active = prev is None or cpu - prev[1] > IDLE_SHARE * 1e9 * max(mono - prev[0], 0.0)
        self.dirty_full = self.dirty_full or active
        full = self._full
        if full is not None and not self.dirty_full and mono - full[0] < FULL_EVERY:
            return _HostReading(mono, cpu, full[1], net, active)
        counters = self.cgroup.read()
        if counters is None:
            return None
        self._full, self.dirty_full = (mono, counters), False
        return _HostReading(mono, counters.cpu_ns, counters, net, active)

    def publish(self, reading: object) -> Awaitable[None] | None:
        assert isinstance(reading, _HostReading)
        return self._sampler._host_due(reading)
