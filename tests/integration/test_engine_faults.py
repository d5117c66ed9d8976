"""The engine missing, dying or dropping connections: clear, bounded, retryable errors.

The shared engine is never touched: the SDK talks to a proxy socket the test can cut.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiodocker
import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    EngineUnavailable,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxNotRunning,
    SandboxStatus,
    TimeoutExceeded,
)
from sandbox._backend import ProcessSpec
from sandbox.docker._exec import open_exec
from sandbox.docker._gateway import Engine
from tests.conftest import LABEL, docker_cli
from tests.integration._proxy import ENGINE_SOCKET, EngineProxy, engine_proxy

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: unix socket paths are limited to 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="sbx-", dir="/tmp") as d:
        yield Path(d)


@contextlib.contextmanager
def via_proxy(short_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineProxy]:
    with engine_proxy(short_dir) as proxy:
        monkeypatch.setenv("DOCKER_HOST", proxy.url)
        yield proxy


def exists(container_id: str) -> bool:
    """Ask the real engine, whatever DOCKER_HOST says."""
    out = docker_cli("-H", f"unix://{ENGINE_SOCKET}", "ps", "-aq", "--no-trunc",
                     "--filter", f"id={container_id}")
    return bool(out.strip())


async def test_no_engine_at_initialize_says_where_and_how(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A path with nothing at it, and a socket file nobody listens on (a dead engine's).
    dead = short_dir / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(dead))
    s.close()
    for path in (short_dir / "missing.sock", dead):
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
        t0 = time.monotonic()
        with pytest.raises(EngineUnavailable) as ei:
            await sb.initialize()
        assert time.monotonic() - t0 < 5
        msg = str(ei.value)
        assert f"unix://{path}" in msg
        assert "Docker installed and running" in msg and "DOCKER_HOST" in msg
        assert "make " not in msg  # pip users have no Makefile
        assert "lost the connection" not in msg  # it never had one
        assert ei.value.retryable and isinstance(ei.value, ConnectionError)
        assert sb.status is SandboxStatus.FAILED
        with pytest.raises(SandboxNotRunning):
            await sb.execute_command("true")


async def test_engine_dies_mid_command(short_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.CRITICAL, logger="sandbox")
    with via_proxy(short_dir, monkeypatch) as proxy:
        sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
        await sb.initialize()
        cid = sb.backend.container_id or ""
        try:
            async def kill_engine() -> None:
                await anyio.sleep(0.5)
                proxy.kill()

            t0 = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(kill_engine)
                with pytest.raises(SandboxError) as ei:
                    await sb.execute_command("sleep 30")
            assert time.monotonic() - t0 < 10
            assert ei.value.retryable, ei.value
            assert proxy.url in str(ei.value)
            # Cleanup cannot reach the engine: it says so, quickly, and names the container.
            t0 = time.monotonic()
            with pytest.raises(SandboxError) as ci:
                await sb.cleanup()
            assert time.monotonic() - t0 < 10
            assert "could not remove" in str(ci.value) and cid[:12] in str(ci.value)
            assert ci.value.retryable
            # The engine is back: a retried cleanup finishes the job.
            proxy.start()
            await sb.cleanup()
            assert sb.status is SandboxStatus.DESTROYED
            assert not exists(cid)
        finally:
            if exists(cid):
                docker_cli("-H", f"unix://{ENGINE_SOCKET}", "rm", "-f", cid)
                raise AssertionError("the container was left behind")


async def test_engine_drops_connections_mid_command(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Like an engine restart that keeps containers: the stream breaks, the engine answers."""
    caplog.set_level(logging.CRITICAL, logger="sandbox")
    with via_proxy(short_dir, monkeypatch) as proxy:
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
            async def cut() -> None:
                await anyio.sleep(0.5)
                proxy.cut_connections()

            t0 = time.monotonic()
            async with anyio.create_task_group() as tg:
                tg.start_soon(cut)
                with pytest.raises(SandboxError) as ei:
                    await sb.execute_command("sleep 30; echo done")
            assert time.monotonic() - t0 < 10
            assert ei.value.retryable and "connection" in str(ei.value)
            # The sandbox still works, and the interrupted command was not left running.
            r = await sb.execute_command("ps -o args")
            assert r.success and "sleep 30" not in r.stdout
            cid = sb.backend.container_id or ""
        assert not exists(cid)


async def test_every_engine_call_has_a_deadline(short_dir: Path) -> None:
    with engine_proxy(short_dir) as proxy:
        proxy.freeze()  # accepts connections, never answers
        docker = aiodocker.Docker(url=proxy.url)
        try:
            engine = Engine(docker, timeout=0.5)
            t0 = time.monotonic()
            with pytest.raises(EngineUnavailable, match=r"did not answer within 0\.5 s") as ei:
                await engine.info()
            # A deadline the SDK enforces: also a TimeoutExceeded (and so a TimeoutError).
            assert isinstance(ei.value, TimeoutExceeded)
            assert time.monotonic() - t0 < 3
            # A missed deadline is also a timeout, for `except TimeoutError` callers.
            assert isinstance(ei.value, TimeoutExceeded) and isinstance(ei.value, TimeoutError)
        finally:
            await docker.close()


async def test_streams_have_a_deadline_for_their_answer(short_dir: Path) -> None:
    """A stats, events or pull stream whose answer never comes ends in a timeout, not a hang."""
    with engine_proxy(short_dir) as proxy:
        proxy.freeze()
        docker = aiodocker.Docker(url=proxy.url)
        try:
            engine = Engine(docker, timeout=0.5)
            t0 = time.monotonic()
            with pytest.raises(TimeoutExceeded, match=r"did not answer within 0\.5 s"):
                async with engine.json_lines("watch the events", "events") as lines:
                    async for _ in lines:
                        pass
            assert time.monotonic() - t0 < 5
        finally:
            await docker.close()


async def test_an_attach_that_never_answers_is_an_engine_timeout(short_dir: Path) -> None:
    """The attach has the same deadline as every call, and says so as a TimeoutExceeded."""
    cid = docker_cli("-H", f"unix://{ENGINE_SOCKET}", "run", "-d", "--label", LABEL,
                     IMAGE_BUSYBOX, "sleep", "60").strip()
    try:
        with engine_proxy(short_dir) as proxy:
            docker = aiodocker.Docker(url=proxy.url)
            try:
                engine = Engine(docker, timeout=0.5)
                query_json = engine.query_json

                async def freeze_after(*args: Any, **kwargs: Any) -> Any:
                    answer = await query_json(*args, **kwargs)
                    proxy.freeze()  # the exec is created; its attach gets no answer
                    return answer

                engine.query_json = freeze_after  # type: ignore[method-assign]
                t0 = time.monotonic()
                with pytest.raises(TimeoutExceeded, match=r"^attach to the command: .* 0\.5 s"):
                    async with open_exec(
                        engine, cid, ProcessSpec(argv=["true"], max_output_bytes=1024),
                        attach_stdin=False,
                    ):
                        pass
                assert time.monotonic() - t0 < 5
            finally:
                await docker.close()
    finally:
        docker_cli("-H", f"unix://{ENGINE_SOCKET}", "rm", "-f", cid, check=False)
