"""A pool never hands out a sandbox killed or paused a moment before the acquire, whether its
health is read from the host (the init's pidfd and the freezer: `docker._host_health`) or,
where the host cannot see the container, asked of the engine.

The event watcher would usually tell the sandbox first; here its reports are switched off, so
the health check alone stands between the dead or frozen sandbox and the next user. A spy on
the engine inspect shows which of the two ways decided.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SandboxPool
from sandbox.docker import _background, _checkpoint
from sandbox.docker._host_health import SHAPE, HostHealth
from tests.conftest import docker_cli, ours
from tests.integration.test_pool import wait_for

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

BUSYBOX = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)

#: What each way of ending or freezing the container from outside (or from inside) runs.
DISRUPT: dict[str, Callable[[str], object]] = {
    "kill": lambda cid: docker_cli("kill", cid),
    "pause": lambda cid: docker_cli("pause", cid),
    # A process inside the container (root, as `docker exec` runs) kills every process it
    # may (all but init, which a process of its own namespace cannot kill): the keepalive
    # shell dies, and docker-init exits after it (which may end the exec before it answers).
    "inside": lambda cid: docker_cli("exec", cid, "kill", "-KILL", "-1", check=False),
}


@pytest.fixture
def engine_asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Silence the event watcher's reports (so only `health` can catch a change) and record
    every engine inspect that `health` makes."""
    monkeypatch.setattr(_background.Background, "on_container_stop",
                        lambda self, *args: None)
    monkeypatch.setattr(_background.Background, "_on_pause", lambda self, paused: None)
    asked: list[str] = []
    real = _checkpoint.container_health

    async def spy(engine: Any, container_id: str) -> tuple[str, bool]:
        asked.append(container_id)
        return await real(engine, container_id)

    monkeypatch.setattr(_checkpoint, "container_health", spy)
    yield asked


async def _ready_one(pool: SandboxPool, *, host: bool, looked: list[str] | None = None
                     ) -> Sandbox:
    await wait_for(lambda: pool.stats().ready >= 1, "one sandbox ready")
    sb: Sandbox = pool._ready[0].sb  # the one the next acquire takes
    background = sb.backend._background  # type: ignore[attr-defined]
    if host:
        await wait_for(lambda: background.host_view() is not None, "the host view taken")
    else:
        # The watcher's first look has come: the host view was refused.
        assert looked is not None
        await wait_for(lambda: sb.backend.container_id in looked,  # type: ignore[attr-defined]
                       "the watcher's first look")
        assert background.host_view() is None
    return sb


async def _acquire_after(pool: SandboxPool, how: str, *, host: bool,
                         looked: list[str] | None = None) -> tuple[str, str]:
    """Disrupt the sandbox the next acquire would take, acquire at once; (its container's
    id, the container id handed out)."""
    victim = (await _ready_one(pool, host=host, looked=looked)
              ).backend.container_id  # type: ignore[attr-defined]
    DISRUPT[how](victim)
    async with pool.acquire() as sb:
        assert (await sb.execute_command("echo alive")).stdout == "alive\n"
        return victim, sb.backend.container_id  # type: ignore[attr-defined]


@pytest.mark.parametrize("how", sorted(DISRUPT))
async def test_host_health_catches_a_change_right_before_acquire(
        how: str, engine_asked: list[str]) -> None:
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=3) as pool:
        victim, got = await _acquire_after(pool, how, host=True)
        assert got != victim
        assert pool.stats().unhealthy == 1
        # Decided on the host: the victim's engine was not asked (its replacement, handed out
        # as soon as it started, may be: the watcher had not looked at it yet).
        assert victim not in engine_asked
    assert ours("container") == []


@pytest.mark.parametrize("how", ["kill", "pause"])
async def test_engine_fallback_catches_a_change_right_before_acquire(
        how: str, engine_asked: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A host that cannot see the container (remote engine, gVisor, not root): the engine
    is asked, with the same outcome."""
    looked: list[str] = []

    def hidden(cls: type[HostHealth], container_id: str, pid: int, **kwargs: Any) -> str:
        looked.append(container_id)
        return "the test hides the host"

    monkeypatch.setattr(HostHealth, "open", classmethod(hidden))
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=3) as pool:
        victim, got = await _acquire_after(pool, how, host=False, looked=looked)
        assert got != victim
        assert pool.stats().unhealthy == 1
        assert victim in engine_asked  # the engine decided
    assert ours("container") == []


async def test_a_healthy_sandbox_is_handed_out_without_asking_the_engine(
        engine_asked: list[str]) -> None:
    async with SandboxPool(BUSYBOX, min_ready=1, max_size=2) as pool:
        idle = await _ready_one(pool, host=True)
        async with pool.acquire() as sb:
            assert sb.id == idle.id
        assert pool.stats().unhealthy == 0 and engine_asked == []
    assert ours("container") == []


async def test_the_host_view_is_taken_only_of_the_containers_own_init() -> None:
    """The engine's pid is trusted only for the container its cgroup names, and only when it
    is docker-init with the keepalive as its one child (a gVisor or VM runtime's pid is not)."""
    async with Sandbox(BUSYBOX) as sb:
        background = sb.backend._background  # type: ignore[attr-defined]
        await wait_for(lambda: background.host_view() is not None, "the host view taken")
        cid = sb.backend.container_id  # type: ignore[attr-defined]
        pid = int(docker_cli("inspect", "-f", "{{.State.Pid}}", cid))
        [child] = (await anyio.Path(f"/proc/{pid}/task/{pid}/children").read_text()).split()
        found = HostHealth.open(cid, pid)
        assert isinstance(found, HostHealth), found
        assert found.check() == ("", False)
        found.close()
        assert HostHealth.open(cid, int(child)) == SHAPE
        assert "not visible" in str(HostHealth.open("f" * 64, pid))


async def test_gvisor_is_not_read_from_the_host_and_the_engine_decides(
        engine_asked: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """gVisor's processes live in its sentry: the engine's pid is runsc's, whose freezer a
    pause does not touch. The host view must refuse it; the engine then sees the pause."""
    answers: list[object] = []
    real = HostHealth.open.__func__  # type: ignore[attr-defined]

    def recording(cls: type[HostHealth], *args: Any, **kwargs: Any) -> object:
        answers.append(found := real(cls, *args, **kwargs))
        return found

    monkeypatch.setattr(HostHealth, "open", classmethod(recording))
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0,
                                     runtime="runsc")) as sb:
        backend: Any = sb.backend
        await wait_for(lambda: bool(answers), "the watcher's first look")
        assert isinstance(answers[0], str), answers
        assert await backend.health() == ""
        assert backend._background.host_health is None
        docker_cli("pause", backend.container_id)
        assert await backend.health() == "the container is paused"
        assert engine_asked.count(backend.container_id) == 2
    assert ours("container") == []
