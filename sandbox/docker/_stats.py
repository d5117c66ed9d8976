"""Resource usage of a sandbox container: stats arithmetic and a background sampler.

The engine publishes a stats sample about once a second per container. `StatsSampler` follows
the engine's streaming endpoint (aiodocker's own ``stats(stream=True)`` leaks its connection,
so the response is opened and closed here), turns each sample into a `ResourceUsage` with
`usage_from_stats`, keeps a bounded history and answers per-command questions with
`StatsSampler.usage_between`.

Facts this relies on (Docker 20.10, API 1.41, cgroup v1, measured):
    * A one-shot sample (``stream=0&one-shot=1``) waits for the engine's next 1 s tick, so it
      takes 0.15-1.0 s; its ``precpu_stats`` is empty, so it has no CPU baseline of its own.
    * A stopped container's stream keeps sending samples whose ``read`` is the zero time; the
      stream ends when the container is removed.
    * ``networks`` is absent under network mode ``none``; blkio lists may be empty or null.
    * ``pids_stats.current`` counts tasks, i.e. threads, not processes (the cgroup pids
      controller limits tasks).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple, TypeVar

import aiodocker
import aiohttp
import anyio
import attrs

from .._errors import SandboxError, SandboxNotRunning, TimeoutExceeded
from .._models import ResourceUsage
from ._engine import Engine, mapped_errors

__all__ = [
    "PROC_SCRIPT",
    "ProcReader",
    "StatsSampler",
    "cpu_percent",
    "memory_used",
    "parse_proc_counts",
    "sample_is_live",
    "usage_from_stats",
]

log = logging.getLogger("sandbox.stats")

_T = TypeVar("_T")

#: Reads (processes, threads, open file handles) inside the sandbox; see `PROC_SCRIPT`.
ProcReader = Callable[[], Awaitable[tuple[int, int, int]]]
SampleCallback = Callable[[ResourceUsage], object]

#: POSIX sh (busybox ash, dash) printing "processes threads fds" for every process in the
#: sandbox except itself. It forks nothing (no pipes, no command substitution), so the only
#: process it adds is its own shell, which it skips. Only fds the running user may see count.
PROC_SCRIPT: Final = (
    'self=$$; p=0; t=0; f=0\n'
    'for d in /proc/[0-9]*; do\n'
    '  [ "${d#/proc/}" = "$self" ] && continue\n'
    '  n=0\n'
    '  { while read -r k v _; do\n'
    '      if [ "$k" = "Threads:" ]; then n=$v; break; fi\n'
    '    done < "$d/status"; } 2>/dev/null || continue\n'
    '  p=$((p + 1)); t=$((t + n))\n'
    '  set -- "$d"/fd/*\n'
    '  if [ -e "$1" ] || [ -L "$1" ]; then f=$((f + $#)); fi\n'
    'done\n'
    'echo "$p $t $f"\n'
)

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
_ZERO_TIME: Final = "0001-01-01T00:00:00Z"


# -- pure arithmetic -----------------------------------------------------------------------------


def _section(data: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    """Return a nested mapping, treating a missing or null section as empty."""
    if not data:
        return {}
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def sample_is_live(stats: Mapping[str, Any]) -> bool:
    """Tell a real sample from the zero-time placeholders sent for a stopped container."""
    read = stats.get("read")
    return bool(read) and not str(read).startswith("0001-")


def _read_time(stats: Mapping[str, Any]) -> datetime | None:
    if not sample_is_live(stats):
        return None
    with contextlib.suppress(ValueError, TypeError):
        stamp = datetime.fromisoformat(str(stats["read"]))
        return stamp if stamp.utcoffset() is not None else stamp.replace(tzinfo=UTC)
    return None


def cpu_percent(cur: Mapping[str, Any], prev: Mapping[str, Any] | None = None) -> float:
    """CPU use between two samples in percent of one core, as ``docker stats`` computes it.

    Without ``prev`` the sample's own ``precpu_stats`` is the baseline (stream samples carry
    the previous tick there); with no baseline at all the answer is 0.
    """
    cc = _section(cur, "cpu_stats")
    pc = _section(prev, "cpu_stats") if prev is not None else _section(cur, "precpu_stats")
    d_sys = _int(cc.get("system_cpu_usage")) - _int(pc.get("system_cpu_usage"))
    if not _int(pc.get("system_cpu_usage")) or d_sys <= 0:
        return 0.0
    d_cpu = _int(_section(cc, "cpu_usage").get("total_usage")) - _int(
        _section(pc, "cpu_usage").get("total_usage")
    )
    ncpu = _int(cc.get("online_cpus")) or len(_section(cc, "cpu_usage").get("percpu_usage") or ())
    # system_cpu_usage advances by wall time x online CPUs, hence the factor.
    return max(d_cpu, 0) / d_sys * (ncpu or 1) * 100.0


def memory_used(stats: Mapping[str, Any]) -> int:
    """Memory in use without reclaimable page cache, the rule of the docker CLI since 20.10."""
    mem = _section(stats, "memory_stats")
    usage = _int(mem.get("usage"))
    detail = _section(mem, "stats")
    # cgroup v1 reports total_inactive_file (hierarchical), cgroup v2 inactive_file.
    inactive = _int(detail.get("total_inactive_file", detail.get("inactive_file")))
    return usage - inactive if inactive < usage else usage


def _blkio_bytes(stats: Mapping[str, Any], op: str) -> int:
    entries = _section(stats, "blkio_stats").get("io_service_bytes_recursive") or ()
    # v1 spells the op "Read"/"Write", v2 "read"/"write"; "Total" would count both.
    return sum(
        _int(e.get("value")) for e in entries
        if isinstance(e, Mapping) and str(e.get("op", "")).lower() == op
    )


def _network_bytes(stats: Mapping[str, Any], key: str) -> int:
    networks = stats.get("networks")
    if not isinstance(networks, Mapping):
        return 0
    return sum(_int(n.get(key)) for n in networks.values() if isinstance(n, Mapping))


def usage_from_stats(
    cur: Mapping[str, Any],
    prev: Mapping[str, Any] | None = None,
    *,
    uptime: timedelta = timedelta(0),
    peak: int = 0,
    host_mem: int = 0,
) -> ResourceUsage:
    """Turn one engine stats sample into a `ResourceUsage`.

    Args:
        cur: The sample, as the engine's JSON.
        prev: An earlier sample to measure CPU against; None uses ``cur``'s ``precpu_stats``.
        uptime: Time since the sandbox started.
        peak: Highest memory use seen so far; the result's ``memory_peak`` is never lower.
        host_mem: Host memory, the denominator when the sample carries no limit.

    Fields the sample cannot tell (threads, file handles, disk usage) stay 0.
    """
    mem = _section(cur, "memory_stats")
    used = memory_used(cur)
    limit = _int(mem.get("limit")) or host_mem
    # max_usage is the cgroup's high-water mark (page cache included); cgroup v2 has none.
    peak = max(peak, used, _int(mem.get("max_usage")))
    total_ns = _int(_section(_section(cur, "cpu_stats"), "cpu_usage").get("total_usage"))
    return ResourceUsage(
        timestamp=_read_time(cur),
        cpu_usage=cpu_percent(cur, prev),
        cpu_time=timedelta(microseconds=total_ns / 1000),
        memory_usage=used,
        memory_percent=used / limit * 100.0 if limit > 0 else 0.0,
        memory_peak=peak,
        disk_reads=_blkio_bytes(cur, "read"),
        disk_writes=_blkio_bytes(cur, "write"),
        network_in=_network_bytes(cur, "rx_bytes"),
        network_out=_network_bytes(cur, "tx_bytes"),
        process_count=_int(_section(cur, "pids_stats").get("current")),
        uptime=max(uptime, timedelta(0)),
    )


def parse_proc_counts(output: bytes | str) -> tuple[int, int, int]:
    """Parse `PROC_SCRIPT`'s output into (processes, threads, file handles)."""
    text = output.decode() if isinstance(output, bytes) else output
    fields = text.split()
    if len(fields) != 3 or not all(f.isdigit() for f in fields):
        raise ValueError(f"expected 'processes threads fds', got {text.strip()[:80]!r}")
    return int(fields[0]), int(fields[1]), int(fields[2])


def _delta(a: int, b: int) -> int:
    """A counter's growth; a reset counter (engine restart) counts as no growth."""
    return b - a if b >= a else 0


def usage_over(records: Iterable[tuple[float, ResourceUsage]], start: float,
               end: float) -> ResourceUsage:
    """Summarise (monotonic stamp, sample) pairs over ``[start, end]``; see `usage_between`."""
    recs = sorted(records, key=lambda r: r[0])
    duration = timedelta(seconds=max(end - start, 0.0))
    if not recs:
        return ResourceUsage(timestamp=datetime.now(UTC), uptime=duration)
    before = [r for r in recs if r[0] <= start]
    base = before[-1] if before else recs[0]
    after = [r for r in recs if r[0] >= end]
    fin = after[0] if after else recs[-1]
    window = [u for t, u in recs if base[0] <= t <= fin[0]]
    (t0, u0), (t1, u1) = base, fin
    cpu = max(u1.cpu_time - u0.cpu_time, timedelta(0))
    span = t1 - t0
    return attrs.evolve(
        u1,
        # A rate over the sampled window, which covers the command (when samples bracket it).
        cpu_usage=cpu.total_seconds() / span * 100.0 if span > 0 else 0.0,
        cpu_time=cpu,
        memory_peak=max(u.memory_usage for u in window),
        disk_reads=_delta(u0.disk_reads, u1.disk_reads),
        disk_writes=_delta(u0.disk_writes, u1.disk_writes),
        network_in=_delta(u0.network_in, u1.network_in),
        network_out=_delta(u0.network_out, u1.network_out),
        uptime=duration,
    )


# -- the sampler ---------------------------------------------------------------------------------


class _Record(NamedTuple):
    mono: float
    usage: ResourceUsage


def _is_gone(exc: BaseException) -> bool:
    """True when the error says the container no longer exists."""
    cause = exc.cause if isinstance(exc, SandboxError) else exc
    return isinstance(cause, aiodocker.DockerError) and cause.status == 404


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
        failures = 0
        while True:
            received = self._received
            try:
                await self._follow()
                if not await self._container_exists():
                    log.debug("container %s is gone; stats sampling ends", self._id[:12])
                    return
                problem = "the engine ended the stats stream"
            except SandboxError as exc:
                if _is_gone(exc):
                    log.debug("container %s is gone; stats sampling ends", self._id[:12])
                    return
                problem = f"{exc.message}: {exc.details}" if exc.details else exc.message
            if self._received > received:
                failures = 0  # the stream worked for a while: start the backoff over
            if failures >= STREAM_RETRIES:
                log.warning("stats for container %s: %s; gave up after %d retries",
                            self._id[:12], problem, failures)
                return
            delay = STREAM_BACKOFF[min(failures, len(STREAM_BACKOFF) - 1)]
            failures += 1
            log.warning("stats for container %s: %s; reconnecting in %g s",
                        self._id[:12], problem, delay)
            await anyio.sleep(delay)

    async def _follow(self) -> None:
        """Read one stats stream to its end."""
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=STREAM_READ_TIMEOUT)
        with mapped_errors("follow the container's stats"):
            async with self._engine.docker._query(
                f"containers/{self._id}/stats", params={"stream": "1"}, timeout=timeout,
            ) as resp:
                try:
                    async for line in resp.content:
                        if not line.strip():
                            continue
                        try:
                            raw = json.loads(line)
                        except ValueError:
                            # A torn line means the stream broke mid-sample; reconnect.
                            raise SandboxError("the stats stream sent a broken line",
                                               details=line[:200].decode(errors="replace"),
                                               retryable=True) from None
                        self._received += 1
                        await self._ingest(raw)
                finally:
                    # aiodocker's _query does not release the connection; this does.
                    resp.close()

    async def _container_exists(self) -> bool:
        try:
            await self._engine.query_json("inspect the container", f"containers/{self._id}/json",
                                          deadline=SLOW_CALL_TIMEOUT)
        except SandboxError as exc:
            if _is_gone(exc):
                return False
            raise
        return True

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
            before, now = _read_time(prev), _read_time(raw)
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
        return _int(data.get("SizeRw"))

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
