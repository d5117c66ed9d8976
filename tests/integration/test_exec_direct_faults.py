"""An exec's three engine calls under a frozen, killed or cutting engine, on the direct path
(`sandbox.docker._direct`, a local engine's) and on aiodocker's (a remote engine's): the same
typed errors with the same words. test_engine_faults' clients have no API version, so they
take aiodocker's path; these pin one, as the SDK's own clients do after their ping."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import aiodocker
import pytest

from sandbox import IMAGE_BUSYBOX, EngineUnavailable, TimeoutExceeded
from sandbox.docker import _direct
from sandbox.docker._gateway import START_HINT, Engine, EngineNotFound
from tests.conftest import LABEL, docker_cli
from tests.integration._proxy import ENGINE_SOCKET, EngineProxy, engine_proxy

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

BODY = {"Cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"], "AttachStdout": True,
        "AttachStderr": True}


@pytest.fixture
def container() -> Iterator[str]:
    cid = docker_cli("-H", f"unix://{ENGINE_SOCKET}", "run", "-d", "--label", LABEL,
                     IMAGE_BUSYBOX, "sleep", "120").strip()
    try:
        yield cid
    finally:
        docker_cli("-H", f"unix://{ENGINE_SOCKET}", "rm", "-f", cid, check=False)


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineProxy]:
    with tempfile.TemporaryDirectory(prefix="sbx-", dir="/tmp") as d, \
            engine_proxy(Path(d)) as proxy:
        monkeypatch.setenv("DOCKER_HOST", proxy.url)  # the address the errors name
        yield proxy


@pytest.fixture(params=["direct", "aiodocker"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    calls: list[str] = []
    for name in ("call_json", "open_hijacked"):
        original = getattr(_direct, name)

        def spy(*args: object, _original: object = original, _name: str = name,
                **kwargs: object) -> object:
            calls.append(_name)
            return _original(*args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(_direct, name, spy)
    monkeypatch.setattr("sandbox.docker._gateway.open_hijacked", _direct.open_hijacked)
    if request.param == "aiodocker":  # as for a remote engine
        monkeypatch.setattr(Engine, "_local", lambda self: None)
    request.node.direct_calls = calls
    return str(request.param)


def unfreeze(proxy: EngineProxy) -> None:
    proxy._frozen = False  # new connections are forwarded again (frozen ones stay so)


async def test_frozen_at_each_call_is_an_engine_timeout(proxy: EngineProxy, container: str,
                                                        path: str,
                                                        request: pytest.FixtureRequest) -> None:
    docker = aiodocker.Docker(url=proxy.url, api_version="v1.41" if path == "direct" else "auto")
    try:
        engine = Engine(docker, timeout=0.5)
        await engine.info()  # aiodocker's path learns its version here
        assert (engine._local() is not None) is (path == "direct")
        proxy.freeze()
        with pytest.raises(TimeoutExceeded, match=r"^start a command: the engine at "
                           rf"{proxy.url} did not answer within 0\.5 s") as raised:
            await engine.create_exec("start a command", container, BODY)
        assert isinstance(raised.value, EngineUnavailable) and raised.value.retryable

        unfreeze(proxy)
        exec_id = await engine.create_exec("start a command", container, BODY)
        proxy.freeze()
        with pytest.raises(TimeoutExceeded, match=r"^attach to the command: .* 0\.5 s"):
            await engine.attach_exec("attach to the command", exec_id)

        unfreeze(proxy)
        exec_id = await engine.create_exec("start a command", container, BODY)
        async with await engine.attach_exec("attach", exec_id, stdin=False) as stream:
            got = []
            while (piece := await stream.read_out()) is not None:
                got.append(piece)
        assert sorted(got) == [(1, b"out\n"), (2, b"err\n")]
        proxy.freeze()
        with pytest.raises(TimeoutExceeded, match=r"^inspect the command: .* 0\.5 s"):
            await engine.inspect_exec(exec_id)
        unfreeze(proxy)
        assert (await engine.inspect_exec(exec_id))["ExitCode"] == 3
    finally:
        await docker.close()
    direct_calls = request.node.direct_calls
    assert bool(direct_calls) is (path == "direct"), direct_calls


async def test_killed_cut_and_gone_are_the_same_typed_errors(
        proxy: EngineProxy, container: str, path: str, request: pytest.FixtureRequest) -> None:
    docker = aiodocker.Docker(url=proxy.url, api_version="v1.41" if path == "direct" else "auto")
    try:
        engine = Engine(docker, timeout=5)
        await engine.info()
        # The engine drops its connections mid-stream: on a Unix socket the output just ends
        # (the exec's inspect then shows it running: `ExecProcess._conclude` says it broke).
        exec_id = await engine.create_exec(
            "start a command", container, {**BODY, "Cmd": ["sh", "-c", "echo a; sleep 30"]})
        stream = await engine.attach_exec("attach", exec_id, stdin=False)
        try:
            assert await stream.read_out() == (1, b"a\n")
            proxy.cut_connections()
            assert await stream.read_out() is None
        finally:
            stream.close_now()
        assert (await engine.inspect_exec(exec_id))["Running"]
        # No engine at the address: says so, and how to start one.
        proxy.kill()
        with pytest.raises(EngineUnavailable) as raised:
            await engine.create_exec("start a command", container, BODY)
        assert str(raised.value).startswith(
            f"start a command: no Docker engine answers at {proxy.url}; {START_HINT}")
        assert not isinstance(raised.value, TimeoutExceeded) and raised.value.retryable
        proxy.start()
        # The container removed: the engine's 404, typed.
        docker_cli("-H", f"unix://{ENGINE_SOCKET}", "rm", "-f", container)
        with pytest.raises(EngineNotFound) as gone:
            await engine.create_exec("start a command", container, BODY)
        assert gone.value.status == 404 and container in str(gone.value.details)
    finally:
        await docker.close()
    assert bool(request.node.direct_calls) is (path == "direct")
