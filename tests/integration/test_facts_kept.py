"""The engine's facts kept between creates (`_facts_cache`): a create plans from them while it
reads /info again, and no container starts before its own create's read confirmed them; facts
that went out of date make the create start over from the current ones. For as long as the
daemon named with them answers, or where it cannot be named within `_facts_cache.TRUSTED_FOR`
seconds of a confirming read, a sandbox pinned to runc reads none (the tests of the read set
the window to 0, which turns both off)."""

from __future__ import annotations

import json
import time
from typing import Any

import anyio
import attrs
import pytest

from sandbox import IMAGE_BUSYBOX, ResourceLimits, Sandbox, SandboxConfig, SandboxError
from sandbox.docker import _facts_cache, _gateway
from sandbox.docker._gateway import engine_address
from tests.conftest import docker_cli, sandbox_containers

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


@pytest.fixture
def no_trust(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every create reads the facts again (no window of trust after a read)."""
    monkeypatch.setattr(_facts_cache, "TRUSTED_FOR", 0.0)


class Trace:
    """The order of the create's engine steps: each action, and when /info answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: list[str] = []
        for name in ("request", "query_json"):
            original = getattr(_gateway.Engine, name)

            async def spy(engine: Any, action: str, *args: Any, _original: Any = original,
                          **kwargs: Any) -> Any:
                self.steps.append(action)
                return await _original(engine, action, *args, **kwargs)

            monkeypatch.setattr(_gateway.Engine, name, spy)
        read = _gateway.Engine.engine_info

        async def info(engine: Any) -> dict[str, Any]:
            answer = await read(engine)
            self.steps.append("info answered")
            return answer

        monkeypatch.setattr(_gateway.Engine, "engine_info", info)


def memory_of(sb: Sandbox) -> int:
    cid = sb.backend.container_id
    return int(json.loads(docker_cli("inspect", cid))[0]["HostConfig"]["Memory"])


@pytest.mark.usefixtures("no_trust")
async def test_each_start_waits_for_its_own_read_of_the_facts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)):
        pass  # keeps the facts
    assert _facts_cache.kept(engine_address()) is not None
    for _ in range(2):
        monkeypatch.setattr(_facts_cache, "TRUSTED_FOR", 0.0)  # undone below, each round
        trace = Trace(monkeypatch)
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
            steps = list(trace.steps)
            assert (await sb.execute_command("true")).success
        assert steps.count("info answered") == 1, steps
        assert steps.index("info answered") < steps.index("start the sandbox container"), steps
        assert steps.count("create the sandbox container") == 1, steps
        monkeypatch.undo()


@pytest.mark.usefixtures("no_trust")
async def test_outdated_facts_make_the_create_start_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        expected = memory_of(sb)  # the default limit follows the host's memory
    real = _facts_cache.kept(engine_address())
    assert real is not None and real.mem_total > 0
    # What a reconfigured engine would leave: a plan from these has another default limit.
    _facts_cache.keep(engine_address(), attrs.evolve(real, mem_total=real.mem_total // 4))
    trace = Trace(monkeypatch)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        steps = list(trace.steps)
        assert memory_of(sb) == expected  # the started container is the current facts' plan
        assert sandbox_containers(sb.id) == [sb.backend.container_id[:12]], \
            "the outdated container was left behind"
    assert steps.count("create the sandbox container") == 2, steps
    assert steps.count("start the sandbox container") == 1, steps
    assert _facts_cache.kept(engine_address()) == real
    assert sandbox_containers(sb.id) == []


@pytest.mark.usefixtures("no_trust")
async def test_a_refusal_from_outdated_facts_is_checked_against_current_ones() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)):
        pass
    real = _facts_cache.kept(engine_address())
    assert real is not None
    # Kept facts claiming 64 MiB of host memory would refuse a 256 MiB limit.
    _facts_cache.keep(engine_address(), attrs.evolve(real, mem_total=64 << 20))
    config = SandboxConfig(image=IMAGE_BUSYBOX, resources=ResourceLimits(memory_limit=256 << 20))
    async with Sandbox(config) as sb:
        assert memory_of(sb) == 256 << 20
    assert _facts_cache.kept(engine_address()) == real


@pytest.mark.usefixtures("no_trust")
async def test_creates_at_once_share_one_read_and_each_starts_after_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)):
        pass  # keeps the facts
    trace = Trace(monkeypatch)
    boxes: list[Sandbox] = []

    async def one() -> None:
        sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
        await sb.__aenter__()
        boxes.append(sb)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
        steps = list(trace.steps)
        for sb in boxes:
            assert (await sb.execute_command("true")).success
    finally:
        for sb in boxes:
            await sb.cleanup()
    assert len(boxes) == 5
    # Five creates begun in one go: one read of /info, not five; and no start before it.
    assert steps.count("info answered") == 1, steps
    assert steps.count("start the sandbox container") == 5, steps
    assert steps.index("info answered") < steps.index("start the sandbox container"), steps


@pytest.mark.usefixtures("no_trust")
async def test_a_create_whose_shared_read_failed_reads_on_its_own(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)):
        pass
    read = _gateway.Engine.engine_info
    calls: list[str] = []

    async def info(engine: Any) -> dict[str, Any]:
        calls.append("read")
        if len(calls) == 1:  # the shared read: its client goes away under it
            await anyio.sleep(0.2)
            raise SandboxError("read engine info: the client was closed")
        return await read(engine)

    monkeypatch.setattr(_gateway.Engine, "engine_info", info)
    outcomes: list[str] = []

    async def one() -> None:
        try:
            async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
                assert (await sb.execute_command("true")).success
            outcomes.append("ok")
        except SandboxError as exc:
            outcomes.append(f"{exc.message}: {exc.__cause__}")

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    # The create that made the read fails with its error, as before; the two that joined
    # it read again (one read each) and start.
    assert sorted(outcomes)[:2] == ["ok", "ok"], outcomes
    assert "read engine info: the client was closed" in sorted(outcomes)[2], outcomes
    assert len(calls) == 3, calls


class PingTrace:
    """When the ping answered, and when the image's inspect went out (round 6)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, hold: float = 0.3) -> None:
        self.steps: list[str] = []
        ping = _gateway.Engine.ping

        async def slow_ping(engine: Any, **kwargs: Any) -> str:
            version = await ping(engine, **kwargs)
            await anyio.sleep(hold)  # an engine slow to answer the ping
            self.steps.append("ping answered")
            return version

        query = _gateway.Engine.query_json

        async def spy(engine: Any, action: str, path: str, *args: Any, **kwargs: Any) -> Any:
            self.steps.append(f"{action} ({engine.docker.api_version})")
            return await query(engine, action, path, *args, **kwargs)

        monkeypatch.setattr(_gateway.Engine, "ping", slow_ping)
        monkeypatch.setattr(_gateway.Engine, "query_json", spy)


async def test_the_image_inspect_goes_out_beside_the_ping_in_the_kept_version(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)):
        pass  # keeps the facts and the API version
    version = _facts_cache.kept_api(engine_address())
    assert version.startswith("v1."), version
    trace = PingTrace(monkeypatch)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        assert (await sb.execute_command("true")).success
    steps = trace.steps
    assert steps.index(f"inspect the image ({version})") < steps.index("ping answered"), steps
    assert steps.count(f"inspect the image ({version})") == 1, steps


async def test_a_kept_version_the_engine_no_longer_answers_with_is_replaced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)):
        pass
    version = _facts_cache.kept_api(engine_address())
    # What an engine replaced by one of another version leaves: the early inspect goes out
    # in a version this engine refuses, and is dropped once the ping tells the current one.
    _facts_cache.keep_api(engine_address(), "v9.99")
    trace = PingTrace(monkeypatch, hold=0.0)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        assert (await sb.execute_command("true")).success
    steps = trace.steps
    assert steps.index("inspect the image (v9.99)") < steps.index("ping answered"), steps
    assert steps.index("ping answered") < steps.index(f"inspect the image ({version})"), steps
    assert _facts_cache.kept_api(engine_address()) == version


#: A config that leaves the runtime to the engine (the default names runc itself).
ENGINE_DEFAULT = SandboxConfig(image=IMAGE_BUSYBOX, runtime="")


def pinned_runtimes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Runtime each create body names ("" for none: the engine's default)."""
    from sandbox.docker import _sandbox

    seen: list[str] = []
    create = _sandbox.create_container

    async def spy(engine: Any, name: str, params: Any, body: Any) -> str:
        seen.append(str((body.get("HostConfig") or {}).get("Runtime") or ""))
        return await create(engine, name, params, body)

    monkeypatch.setattr(_sandbox, "create_container", spy)
    return seen


async def test_a_create_moments_after_a_read_plans_from_it_and_pins_runc(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(ENGINE_DEFAULT):
        pass  # read and kept just now
    facts = _facts_cache.kept(engine_address())
    assert facts is not None and facts.default_runtime == "runc"
    trace = Trace(monkeypatch)
    runtimes = pinned_runtimes(monkeypatch)
    async with Sandbox(ENGINE_DEFAULT) as sb:
        assert (await sb.execute_command("true")).success
        info = json.loads(docker_cli("inspect", sb.backend.container_id))[0]
    assert "info answered" not in trace.steps, trace.steps
    # Named in the body: a default runtime changed by a reload since the read cannot take
    # the sandbox off the runtime its plan was made for.
    assert runtimes == ["runc"], runtimes
    assert info["HostConfig"]["Runtime"] == "runc"


async def test_once_the_window_passed_the_create_reads_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An engine whose daemon cannot be named (tcp, socket-activated, unseen): the window.
    monkeypatch.setattr(_facts_cache, "identify", lambda address: None)
    async with Sandbox(ENGINE_DEFAULT):
        pass
    first = _facts_cache._ASKED[engine_address()]
    monkeypatch.setattr(_facts_cache, "TRUSTED_FOR", 0.2)
    await anyio.sleep(0.3)
    trace = Trace(monkeypatch)
    runtimes = pinned_runtimes(monkeypatch)
    async with Sandbox(ENGINE_DEFAULT):
        pass
    assert trace.steps.count("info answered") == 1, trace.steps
    assert runtimes == [""], runtimes  # planned from facts read during its own create
    # That read confirmed the kept facts: trusted from when it was sent.
    assert _facts_cache._ASKED[engine_address()] >= first + 0.3


async def test_another_api_version_in_the_ping_makes_a_trusting_create_read_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(ENGINE_DEFAULT):
        pass
    version = _facts_cache.kept_api(engine_address())
    # What an engine restarted as another version leaves behind: a kept version it no longer
    # answers with. The create must not trust the facts kept from the old one.
    _facts_cache.keep_api(engine_address(), "v1.40")
    trace = Trace(monkeypatch)
    runtimes = pinned_runtimes(monkeypatch)
    async with Sandbox(ENGINE_DEFAULT) as sb:
        assert (await sb.execute_command("true")).success
    assert trace.steps.count("info answered") == 1, trace.steps
    assert runtimes == [""], runtimes
    assert _facts_cache.kept_api(engine_address()) == version


async def test_the_same_daemon_past_the_window_is_trusted_without_a_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_facts_cache, "TRUSTED_FOR", 0.2)
    async with Sandbox(ENGINE_DEFAULT):
        pass  # read, and kept with the daemon's name
    named = _facts_cache._BY.get(engine_address())
    if named is None:  # e.g. systemd's docker.socket: the listener is not dockerd itself
        pytest.skip("this host's engine cannot be named (`_engine_identity`)")
    assert named.pid > 1
    await anyio.sleep(0.3)  # past the window
    trace = Trace(monkeypatch)
    runtimes = pinned_runtimes(monkeypatch)
    async with Sandbox(ENGINE_DEFAULT) as sb:
        assert (await sb.execute_command("true")).success
        info = json.loads(docker_cli("inspect", sb.backend.container_id))[0]
    assert "info answered" not in trace.steps and "read engine info" not in trace.steps, \
        trace.steps
    assert runtimes == ["runc"], runtimes
    assert info["HostConfig"]["Runtime"] == "runc"


async def test_another_daemon_named_after_the_create_makes_it_read_before_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(ENGINE_DEFAULT):
        pass
    named = _facts_cache._BY[engine_address()]
    restarted = attrs.evolve(named, start_time=named.start_time + 1)  # the only fake here
    monkeypatch.setattr(_facts_cache, "identify", lambda address: restarted)
    trace = Trace(monkeypatch)
    async with Sandbox(ENGINE_DEFAULT) as sb:
        assert (await sb.execute_command("true")).success
    steps = trace.steps
    assert steps.count("info answered") == 1, steps
    assert steps.index("create the sandbox container") < steps.index("info answered") < \
        steps.index("start the sandbox container"), steps
    assert steps.count("create the sandbox container") == 1, steps  # the same facts: kept on
    assert _facts_cache._BY[engine_address()] == restarted  # confirmed, under the new name
    trace.steps.clear()
    async with Sandbox(ENGINE_DEFAULT):
        pass
    assert "info answered" not in trace.steps, trace.steps


async def test_another_daemon_with_other_facts_makes_the_trusting_create_start_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async with Sandbox(ENGINE_DEFAULT) as sb:
        expected = memory_of(sb)
    address = engine_address()
    real = _facts_cache.kept(address)
    named = _facts_cache._BY[address]
    assert real is not None
    # Facts a daemon gone since gave (another default memory limit follows from them).
    gone = attrs.evolve(named, start_time=named.start_time - 1)
    _facts_cache.keep(address, attrs.evolve(real, mem_total=real.mem_total // 4),
                      time.monotonic(), gone)
    trace = Trace(monkeypatch)
    async with Sandbox(ENGINE_DEFAULT) as sb:
        steps = list(trace.steps)
        assert memory_of(sb) == expected
        assert sandbox_containers(sb.id) == [sb.backend.container_id[:12]]
    assert steps.count("create the sandbox container") == 2, steps
    assert steps.count("start the sandbox container") == 1, steps
    assert _facts_cache.kept(address) == real and _facts_cache._BY[address] == named
