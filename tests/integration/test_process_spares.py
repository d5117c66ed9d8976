"""Spares (`sandbox.process._spares`): process sandboxes made ahead so a create is a
hand-over. Each test first proves the sandbox it looks at came from a spare (the hand-over
count moved), then that it is a sandbox of its own: nothing of the last user's, its own
namespaces, cgroup and state, its limits held; and that spares are bounded and never outlive
their owner."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from pathlib import Path

import anyio
import pytest
import pytest_asyncio

from sandbox import IMAGE_BUSYBOX, ResourceLimits, Sandbox, SandboxConfig
from sandbox._constants import LABEL_OWNER_PID, LABEL_SANDBOX_ID
from sandbox.process import _spares
from sandbox.process._cgroup import SandboxCgroup
from sandbox.process._state import base_dir, read_owner
from tests.integration._rootfs import busybox_root_owning

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]
REPO = str(Path(__file__).resolve().parents[2])
NAMESPACES = ("pid", "mnt", "net", "ipc", "uts", "user", "cgroup")


@pytest_asyncio.fixture
async def own_root() -> AsyncIterator[Path]:
    """A busybox root whose /etc the sandbox user owns: its writes there land in the overlay."""
    async with busybox_root_owning("etc") as root:
        yield root


async def _from_spare(cfg: SandboxConfig) -> Sandbox:
    """A started sandbox that was handed over from a spare (asserted)."""
    await _spares.settled()
    taken = _spares.stats()["taken"]
    sb = Sandbox(cfg)
    await sb.initialize()
    assert _spares.stats()["taken"] == taken + 1, "the create made its own sandbox"
    return sb


async def _warm(cfg: SandboxConfig) -> None:
    """Two creates of ``cfg``: the second starts making a spare for it."""
    for _ in range(2):
        async with Sandbox(cfg):
            pass
    assert len(await _spares.settled()) >= 1


async def test_the_next_user_finds_nothing_of_the_last_one(own_root: Path) -> None:
    cfg = SandboxConfig(type="process", image=str(own_root))
    await _warm(cfg)
    a = await _from_spare(cfg)
    try:
        plant = await a.execute_command(
            "echo s > /tmp/secret && echo s > ~/secret && "
            "echo s > /etc/secret && echo s > ./secret && "
            "(setsid sleep 301 >/dev/null 2>&1 &) && "
            f"for n in {' '.join(NAMESPACES)}; do readlink /proc/self/ns/$n; done")
        assert plant.success, plant.stderr
        b = await _from_spare(cfg)
        try:
            look = await b.execute_command(
                "ls /tmp ~ /etc/secret ./secret 2>&1; ps -o args | grep -c 'sleep 30[1]'; "
                f"for n in {' '.join(NAMESPACES)}; do readlink /proc/self/ns/$n; done")
            assert "secret" not in look.stdout.replace("/etc/secret", "").replace(
                "./secret", ""), look.stdout
            assert "/etc/secret: No such file" in look.stdout
            assert "./secret: No such file" in look.stdout
            lines = look.stdout.splitlines()
            assert lines[-len(NAMESPACES) - 1] == "0"  # no sleep of A's in B
            ours, theirs = lines[-len(NAMESPACES):], plant.stdout.split()
            assert len(theirs) == len(NAMESPACES)
            assert not set(ours) & set(theirs), (ours, theirs)  # every namespace its own
            # Its own cgroup and state, under its own id; A's are A's.
            assert a.backend.cgroup is not None and b.backend.cgroup is not None
            assert b.backend.cgroup.dirs == SandboxCgroup(b.id).dirs
            assert a.backend.cgroup.dirs == SandboxCgroup(a.id).dirs
            assert all(d.is_dir() for d in b.backend.cgroup.dirs)
            assert b.backend.cgroup.procs() and not b.backend.cgroup.procs() & \
                a.backend.cgroup.procs()
            for sb in (a, b):
                owner = json.loads((base_dir() / sb.id / "owner.json").read_text())
                assert owner["id"] == sb.id and owner["labels"][LABEL_SANDBOX_ID] == sb.id
            assert (base_dir() / a.id / "overlay" / "upper" / "etc" / "secret").is_file()
            assert not (base_dir() / b.id / "overlay" / "upper" / "etc" / "secret").exists()
        finally:
            await b.cleanup()
    finally:
        await a.cleanup()
    assert not (base_dir() / a.id).exists() and not (base_dir() / b.id).exists()
    assert not any(d.exists() for d in SandboxCgroup(a.id).dirs + SandboxCgroup(b.id).dirs)


async def test_limits_hold_in_a_sandbox_from_a_spare() -> None:
    cfg = SandboxConfig(type="process", image=IMAGE_BUSYBOX,
                        resources=ResourceLimits(memory_limit=64 << 20, process_limit=20))
    await _warm(cfg)
    box = await _from_spare(cfg)
    try:
        cgroup = box.backend.cgroup
        assert cgroup is not None and cgroup.procs()  # the zygote (every command) is in it
        memory = next(d for d in cgroup.dirs if d.parent.parent.name == "memory")
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        hog = await box.execute_command("cat /dev/zero | head -c 300m | sort >/dev/null")
        assert hog.exit_code != 0 and cgroup.oom_kills() >= 1  # the OOM killer stopped it
        forks = await box.execute_command(
            "i=0; while [ $i -lt 40 ]; do sleep 5 & i=$((i+1)); done; wait")
        assert "can't fork" in forks.stderr or "Resource temporarily" in forks.stderr
    finally:
        await box.cleanup()


def _state_dirs() -> set[str]:
    """The state directories of this process's sandboxes and spares: the base directory is
    shared by every process of this user (other test runs' sandboxes come and go there)."""
    if not base_dir().is_dir():
        return set()
    return {p.name for p in base_dir().iterdir()
            if read_owner(p).get(LABEL_OWNER_PID) == str(os.getpid())}


async def test_spares_are_bounded_and_go_when_idle_or_dropped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_PROCESS_SPARES", "1")
    one = SandboxConfig(type="process", image=IMAGE_BUSYBOX, name="one")
    two = SandboxConfig(type="process", image=IMAGE_BUSYBOX, name="two")
    await _spares.drop_all()
    before = _state_dirs()
    await _warm(one)
    assert len(_state_dirs() - before) == 1  # the spare for "one"
    await _warm(two)  # replaces it: one idle spare at most; the dropped one is removed
    assert _spares.stats()["idle"] == 1
    with anyio.fail_after(10):
        while len(_state_dirs() - before) != 1:  # noqa: ASYNC110 (polls the host)
            await anyio.sleep(0.05)
    monkeypatch.setattr(_spares, "IDLE_TTL", 0.2)
    await _spares.drop_all()
    assert _state_dirs() - before == set()
    # A spare made, then gone once idle. Seen being made, not by `settled` after the creates:
    # under load the second create's cleanup can outlast the spare's 0.2 s.
    made = _record_spares(monkeypatch)
    for _ in range(2):
        async with Sandbox(one):
            pass
    with anyio.fail_after(30):
        while not made or _state_dirs() - before or _spares.stats()["idle"]:  # noqa: ASYNC110
            await anyio.sleep(0.05)
    assert not any(spare.alive() for spare in made)  # ("one" was seen: each create made one)
    monkeypatch.setenv("SANDBOX_PROCESS_SPARES", "0")
    await _warm_none(one)
    assert _state_dirs() - before == set()


def _record_spares(monkeypatch: pytest.MonkeyPatch) -> list[_spares.Spare]:
    """Every spare made from now on, as it is made."""
    made: list[_spares.Spare] = []
    offer = _spares.offer

    def recording(key: Hashable, make: Callable[[], Awaitable[_spares.Spare]]) -> None:
        async def make_and_record() -> _spares.Spare:
            spare = await make()
            made.append(spare)
            return spare

        offer(key, make_and_record)

    monkeypatch.setattr(_spares, "offer", recording)
    return made


async def _warm_none(cfg: SandboxConfig) -> None:
    for _ in range(3):
        async with Sandbox(cfg):
            pass
    assert await _spares.settled() == []


_OWNER = textwrap.dedent("""
    import asyncio, json
    from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig
    from sandbox.process import _spares

    async def main():
        cfg = SandboxConfig(type="process", image=IMAGE_BUSYBOX)
        for _ in range(2):
            async with Sandbox(cfg):
                pass
        spares = await _spares.settled()
        print(json.dumps([[s.id, s.init_pid] for s in spares]), flush=True)
        await asyncio.sleep(300)

    asyncio.run(main())
""")


def _wait_gone(pid: int, limit: float = 10.0) -> None:
    end = time.monotonic() + limit
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < end:
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}"), f"pid {pid} still runs after {limit:g} s"


async def test_a_killed_owner_leaves_no_spare_running_and_gc_takes_the_rest() -> None:
    from sandbox import gc

    owner = await anyio.open_process([sys.executable, "-c", _OWNER],
                                     env={**os.environ, "PYTHONPATH": REPO})
    try:
        assert owner.stdout is not None
        data = b""
        with anyio.fail_after(60):
            while not data.endswith(b"\n"):
                data += await owner.stdout.receive()
        spares = json.loads(data)
    finally:
        owner.kill()  # SIGKILL: no cleanup runs
        await owner.wait()
    assert len(spares) == 1
    spare_id, init = spares[0]
    assert init > 0 and (base_dir() / spare_id).is_dir()
    await anyio.to_thread.run_sync(_wait_gone, init)  # the holder died with the fork server
    report = await gc()
    assert spare_id in [item.id for item in report.removed_process]
    assert not (base_dir() / spare_id).exists()
    assert not any(d.exists() for d in SandboxCgroup(spare_id).dirs)
