"""StatsSampler and watch_container against real containers on the engine."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import aiodocker
import anyio
import pytest

from sandbox._constants import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
)
from sandbox._models import ResourceUsage
from sandbox.docker._gateway import Engine, new_client
from sandbox.docker._health import watch_container
from sandbox.docker._stats import PROC_SCRIPT, StatsSampler, parse_proc_counts

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

MiB = 2**20
ALLOC_100 = "b=bytearray(100*2**20); import time; time.sleep(5)"


@contextlib.asynccontextmanager
async def container(image: str = IMAGE_PYTHON, cmd: Sequence[str] = ("sleep", "600"),
                    **host: Any) -> AsyncIterator[tuple[Engine, aiodocker.docker.DockerContainer]]:
    """A labelled, started container and an Engine; both gone afterwards."""
    docker = new_client()
    c = None
    try:
        c = await docker.containers.create({
            "Image": image, "Cmd": list(cmd),
            "Labels": {LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE},
            "HostConfig": {"NetworkMode": "none", "Init": True, **host},
        })
        await c.start()
        yield Engine(docker), c
    finally:
        with anyio.CancelScope(shield=True):
            if c is not None:
                with contextlib.suppress(aiodocker.DockerError):
                    await c.delete(force=True)
            await docker.close()


async def run_in(c: aiodocker.docker.DockerContainer, argv: Sequence[str]) -> bytes:
    """Run a command in the container and return its stdout."""
    exe = await c.exec(list(argv), stdout=True, stderr=True)
    out: list[bytes] = []
    async with exe.start(detach=False) as stream:
        while (msg := await stream.read_out()) is not None:
            if msg.stream == 1:
                out.append(msg.data)
    return b"".join(out)


async def start_in_background(c: aiodocker.docker.DockerContainer, argv: Sequence[str]) -> None:
    exe = await c.exec(list(argv), stdout=False, stderr=False)
    await exe.start(detach=True)


def connections_in_use(engine: Engine) -> int:
    """Connections aiohttp has handed out and not yet got back (a leak keeps them here)."""
    connector = engine.docker.session.connector
    assert connector is not None
    return len(connector._acquired)


@contextlib.asynccontextmanager
async def running(sampler: StatsSampler) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.ensure_future(sampler.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_for_sample(sampler: StatsSampler, check: Any, within: float) -> ResourceUsage:
    with anyio.fail_after(within):
        while True:
            latest = sampler.latest
            if latest is not None and check(latest):
                return latest
            await anyio.sleep(0.1)


async def test_busy_loop_shows_over_half_a_core_with_fresh_timestamp() -> None:
    busy = ("python3", "-c", "while True: pass")
    async with container(cmd=busy) as (engine, c):
        before = connections_in_use(engine)
        sampler = StatsSampler(engine, c.id, interval=1.0)
        async with running(sampler):
            first = await sampler.wait_first(5)
            assert first.timestamp is not None
            sample = await wait_for_sample(sampler, lambda u: u.cpu_usage > 50, 6)
            assert sample.timestamp is not None
            age = (datetime.now(UTC) - sample.timestamp).total_seconds()
            assert -1 < age < 2.5, age
            assert sample.cpu_time.total_seconds() > 0.5
            assert sample.process_count >= 2  # docker-init and python
            assert sample.uptime.total_seconds() > 0
            assert connections_in_use(engine) == before + 1  # the stream itself
        assert connections_in_use(engine) == before
        assert 1 <= len(sampler.history()) <= 10


async def test_memory_rises_after_allocating_100_mib_and_proc_fields_fill() -> None:
    async with container() as (engine, c):
        await run_in(c, ["sh", "-c", "head -c 3000000 /dev/zero > /tmp/three-mb"])

        async def proc_reader() -> tuple[int, int, int]:
            return parse_proc_counts(await run_in(c, ["/bin/sh", "-c", PROC_SCRIPT]))

        sampler = StatsSampler(engine, c.id, interval=1.0, proc_reader=proc_reader)
        async with running(sampler):
            base = await sampler.wait_first(5)
            # PID 1 (docker-init) and sleep; the script skips its own shell.
            assert base.process_count == 2 and base.thread_count == 2
            assert base.file_handles >= 3
            assert base.disk_usage >= 3_000_000
            await start_in_background(c, ["python3", "-c", ALLOC_100])
            high = await wait_for_sample(
                sampler, lambda u: u.memory_usage > base.memory_usage + 90 * MiB, 8
            )
            assert high.memory_peak >= high.memory_usage
            assert high.memory_percent > 0
            assert sampler.peak_memory >= base.memory_usage + 90 * MiB
            # After python exits the use drops, the peak stays.
            low = await wait_for_sample(sampler, lambda u: u.memory_usage < 50 * MiB, 10)
            assert low.memory_peak >= base.memory_usage + 90 * MiB


async def test_cancel_is_clean_and_stream_ends_when_container_is_removed() -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        before = connections_in_use(engine)
        for _ in range(3):
            sampler = StatsSampler(engine, c.id, interval=1.0)
            async with running(sampler):
                await sampler.wait_first(5)
        assert connections_in_use(engine) == before
        sampler = StatsSampler(engine, c.id, interval=1.0)
        task = asyncio.ensure_future(sampler.run())
        await sampler.wait_first(5)
        await c.delete(force=True)
        with anyio.fail_after(5):
            await task  # returns by itself: the engine ends the stream on removal
        assert connections_in_use(engine) == before


async def test_interval_above_engine_tick_publishes_less_often() -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        seen: list[float] = []

        async def on_sample(_: ResourceUsage) -> None:
            seen.append(time.monotonic())

        sampler = StatsSampler(engine, c.id, interval=2.0, on_sample=on_sample)
        async with running(sampler):
            await anyio.sleep(5.5)
        gaps = [b - a for a, b in itertools.pairwise(seen)]
        assert 2 <= len(seen) <= 4 and all(g > 1.5 for g in gaps), gaps
        # Every engine sample was kept for windows, published or not.
        assert len(sampler._records) >= 5


async def test_failing_callback_is_logged_and_sampling_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        def on_sample(_: ResourceUsage) -> None:
            raise RuntimeError("callback broke")

        sampler = StatsSampler(engine, c.id, interval=1.0, on_sample=on_sample)
        with caplog.at_level(logging.ERROR, logger="sandbox.stats"):
            async with running(sampler):
                await sampler.wait_first(5)
                await anyio.sleep(1.5)
        assert len(sampler.history()) >= 2
        assert "on_sample callback failed" in caplog.text


async def test_marks_bracket_a_short_busy_command() -> None:
    async with container() as (engine, c):
        sampler = StatsSampler(engine, c.id, interval=1.0)
        async with running(sampler):
            await sampler.wait_first(5)
            t = time.monotonic()
            await sampler.mark()
            mark_cost = time.monotonic() - t
            start = time.monotonic()
            await run_in(c, ["python3", "-c",
                             "import time\nt=time.process_time()\n"
                             "while time.process_time()-t < 1.5: pass"])
            end = time.monotonic()
            await sampler.mark()
            usage = sampler.usage_between(start, end)
        assert mark_cost < 1.5
        assert 1.2 <= usage.cpu_time.total_seconds() <= 2.5, usage.cpu_time
        assert usage.uptime.total_seconds() == pytest.approx(end - start)


async def test_sample_now_without_stream() -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        sampler = StatsSampler(engine, c.id, interval=1.0)
        t = time.monotonic()
        usage = await sampler.sample_now()
        assert time.monotonic() - t < 1.5
        assert usage.memory_usage > 0 and usage.cpu_usage == 0.0  # no baseline yet
        assert sampler.latest is None


class Stops:
    """Collects watch_container callbacks with arrival times."""

    def __init__(self) -> None:
        self.stops: list[tuple[float, str, int | None, bool]] = []
        self.ooms: list[float] = []
        self.pauses: list[bool] = []

    def on_stop(self, reason: str, code: int | None, oom: bool) -> None:
        self.stops.append((time.monotonic(), reason, code, oom))

    async def on_oom(self) -> None:
        self.ooms.append(time.monotonic())

    def on_pause(self, paused: bool) -> None:
        self.pauses.append(paused)


async def _until(check: Any, within: float) -> None:
    with anyio.fail_after(within):
        while True:
            if check():
                return
            await anyio.sleep(0.05)


async def test_kill_from_outside_is_noticed_within_a_second() -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        seen = Stops()
        task = asyncio.ensure_future(watch_container(engine, c.id, seen.on_stop,
                                                     on_oom=seen.on_oom, on_pause=seen.on_pause))
        await anyio.sleep(0.3)
        before = connections_in_use(engine)
        killed_at = time.monotonic()
        await c.kill()
        with anyio.fail_after(3):
            await task  # returns after reporting the stop
        assert len(seen.stops) == 1
        at, reason, code, oom = seen.stops[0]
        assert at - killed_at < 1.0
        assert code == 137 and not oom
        assert "SIGKILL" in reason and "137" in reason
        assert connections_in_use(engine) == before - 1  # the event stream was released


async def test_exec_oom_calls_on_oom_and_container_keeps_running() -> None:
    async with container(Memory=64 * MiB, MemorySwap=64 * MiB) as (engine, c):
        seen = Stops()
        task = asyncio.ensure_future(watch_container(engine, c.id, seen.on_stop,
                                                     on_oom=seen.on_oom, on_pause=seen.on_pause))
        try:
            await anyio.sleep(0.3)
            await run_in(c, ["python3", "-c", "b=bytearray(300*2**20)"])
            await _until(lambda: seen.ooms, 3)
            await anyio.sleep(0.5)
            assert not seen.stops and not task.done()
            assert (await c.show())["State"]["Running"]
            # The engine now reports OOMKilled forever; a later kill must not be blamed on it.
            await c.kill()
            with anyio.fail_after(3):
                await task
            _, reason, code, oom = seen.stops[0]
            assert code == 137 and not oom and "SIGKILL" in reason
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_pause_unpause_and_cancel() -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        before = connections_in_use(engine)
        seen = Stops()
        task = asyncio.ensure_future(watch_container(engine, c.id, seen.on_stop,
                                                     on_pause=seen.on_pause))
        await anyio.sleep(0.3)
        await c.pause()
        await _until(lambda: seen.pauses == [True], 3)
        await c.unpause()
        await _until(lambda: seen.pauses == [True, False], 3)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert not seen.stops
        assert connections_in_use(engine) == before


async def test_watch_reports_a_container_that_already_exited() -> None:
    async with container(IMAGE_BUSYBOX, cmd=("sh", "-c", "exit 3")) as (engine, c):
        await c.wait()
        seen = Stops()
        with anyio.fail_after(3):
            await watch_container(engine, c.id, seen.on_stop)
        _, reason, code, oom = seen.stops[0]
        assert code == 3 and not oom and reason == "the container's main process exited with code 3"


async def test_watch_reports_removal() -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        await c.delete(force=True)
        seen = Stops()
        with anyio.fail_after(3):
            await watch_container(engine, c.id, seen.on_stop)  # the first inspect gets 404
        assert seen.stops[0][1:] == ("the container was removed from outside", None, False)


async def test_destroy_event_of_a_container_never_started() -> None:
    docker = new_client()
    engine = Engine(docker)
    c = await docker.containers.create({
        "Image": IMAGE_BUSYBOX, "Cmd": ["sleep", "600"],
        "Labels": {LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE},
        "HostConfig": {"NetworkMode": "none"},
    })
    try:
        seen = Stops()
        task = asyncio.ensure_future(watch_container(engine, c.id, seen.on_stop))
        await anyio.sleep(0.3)
        assert not task.done()
        await c.delete(force=True)
        with anyio.fail_after(3):
            await task
        assert seen.stops[0][1:] == ("the container was removed from outside", None, False)
    finally:
        with contextlib.suppress(aiodocker.DockerError):
            await c.delete(force=True)
        await docker.close()


class Breakable:
    """Wraps the client's streaming queries (stats, events) so a test can cut them."""

    def __init__(self, engine: Engine, *, refuse_first: bool = False) -> None:
        self.original = engine.docker._query
        self.responses: list[Any] = []
        self.refuse_first = refuse_first
        self.calls = 0

    @contextlib.asynccontextmanager
    async def __call__(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        path = str(args[0])
        if not (path == "events" or path.endswith("/stats")):
            async with self.original(*args, **kwargs) as resp:
                yield resp
            return
        self.calls += 1
        if self.refuse_first and self.calls == 1:
            raise ConnectionResetError("connection refused by the test")
        async with self.original(*args, **kwargs) as resp:
            self.responses.append(resp)
            yield resp

    def cut(self) -> None:
        for resp in self.responses:
            if resp.connection is not None:
                resp.connection.transport.abort()


async def test_sampler_reconnects_after_refusal_and_cut(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        before = connections_in_use(engine)
        streams = Breakable(engine, refuse_first=True)
        monkeypatch.setattr(engine.docker, "_query", streams)
        sampler = StatsSampler(engine, c.id, interval=1.0)
        with caplog.at_level(logging.WARNING, logger="sandbox.stats"):
            async with running(sampler) as task:
                await sampler.wait_first(5)
                streams.cut()
                count = len(sampler.history())
                await wait_for_sample(sampler, lambda _: len(sampler.history()) > count + 1, 6)
                assert not task.done()
        assert streams.calls == 3
        assert caplog.text.count("reconnecting") == 2
        assert connections_in_use(engine) == before


async def test_watch_reconnects_and_replays_missed_events(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    async with container(IMAGE_BUSYBOX) as (engine, c):
        streams = Breakable(engine, refuse_first=True)
        monkeypatch.setattr(engine.docker, "_query", streams)
        seen = Stops()
        with caplog.at_level(logging.WARNING, logger="sandbox.health"):
            task = asyncio.ensure_future(watch_container(engine, c.id, seen.on_stop,
                                                         on_pause=seen.on_pause))
            try:
                await _until(lambda: streams.responses, 3)
                await c.pause()
                await _until(lambda: seen.pauses == [True], 3)
                streams.cut()
                await c.unpause()  # happens while the watcher waits to reconnect
                await _until(lambda: seen.pauses == [True, False], 5)
                await c.kill()
                with anyio.fail_after(3):
                    await task
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        assert streams.calls == 3
        assert seen.pauses == [True, False]  # the replay did not repeat the pause
        assert len(seen.stops) == 1 and seen.stops[0][2] == 137
        assert caplog.text.count("reconnecting") == 2
