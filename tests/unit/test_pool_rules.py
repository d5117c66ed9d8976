"""Pool bookkeeping, checkpoint parsing and the reset's path logic, over fakes (pure logic;
what the engine does is in tests/integration/test_pool.py and test_checkpoint.py)."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import pytest

from sandbox import (
    CheckpointFailed,
    ConfigError,
    RepositoryConfig,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SandboxNotRunning,
    SandboxPool,
    SandboxStatus,
    SecurityPolicy,
)
from sandbox._checkpoint import parse_checkpoint
from sandbox._lifecycle import Lifecycle
from sandbox._reset import _top_level
from sandbox.testing import FakeBackend


class SlowFake(FakeBackend):
    """A fake whose create takes a moment, counting how many exist at once."""

    alive = 0  # created and not yet being removed
    peak = 0
    removing = 0
    peak_total = 0  # alive and being removed
    fail = False
    hold_removal: anyio.Event | None = None  # when set, removals wait for it

    made = False

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        await anyio.sleep(0.01)
        if SlowFake.fail:
            raise SandboxInitFailed("no engine today")
        SlowFake.alive += 1
        SlowFake.peak = max(SlowFake.peak, SlowFake.alive)
        SlowFake.peak_total = max(SlowFake.peak_total, SlowFake.alive + SlowFake.removing)
        self.made = True
        await super().create(lifecycle, config, environment=environment)

    async def remove(self) -> None:
        if self.made:
            self.made = False
            SlowFake.alive -= 1  # killed first, as the engine does
            SlowFake.removing += 1
            try:
                await anyio.sleep(0.01)
                if SlowFake.hold_removal is not None:
                    await SlowFake.hold_removal.wait()
            finally:
                SlowFake.removing -= 1
        await super().remove()


def fake(config: SandboxConfig) -> Sandbox:
    return Sandbox(backend=SlowFake(config))


@pytest.fixture(autouse=True)
def reset_counts() -> None:
    SlowFake.alive = SlowFake.peak = SlowFake.removing = SlowFake.peak_total = 0
    SlowFake.fail = False
    SlowFake.hold_removal = None


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"max_size": 0}, "max_size"), ({"min_ready": -1}, "min_ready"),
    ({"min_ready": 5, "max_size": 4}, "min_ready"), ({"max_uses": 0}, "max_uses"),
    ({"max_idle": 0}, "max_idle"), ({"max_idle": "1h"}, "max_idle"),
    ({"create_concurrency": 0}, "create_concurrency"), ({"max_size": True}, "max_size"),
])
@pytest.mark.asyncio
async def test_bad_arguments_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        SandboxPool(SandboxConfig(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("config", "field"), [
    (SandboxConfig(repository=RepositoryConfig(local_path="/tmp")), "repository"),
    (SandboxConfig(security=SecurityPolicy(read_only_root=True)), "read_only_root"),
    (SandboxConfig(security=SecurityPolicy(tmpfs_paths=("/x",))), "tmpfs_paths"),
    (SandboxConfig(security=SecurityPolicy(run_as_user="root")), "run_as_user"),
    (SandboxConfig(security=SecurityPolicy(seccomp_profile="unconfined")), "seccomp_profile"),
    (SandboxConfig(security=SecurityPolicy(seccomp_profile='{"defaultAction": "SCMP_ACT_ALLOW"}')),
     "seccomp_profile"),
])
@pytest.mark.asyncio
async def test_reuse_is_refused_where_a_reset_cannot_check(config: SandboxConfig,
                                                           field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        SandboxPool(config, max_uses=2)
    SandboxPool(config, max_uses=1)  # a fresh sandbox per user is always fine


@pytest.mark.asyncio
async def test_never_more_than_max_size_and_all_removed_at_close() -> None:
    boxes: list[Sandbox] = []
    async with SandboxPool(SandboxConfig(), min_ready=3, max_size=3, factory=fake,
                           create_concurrency=3) as pool:

        live: list[int] = []

        async def user() -> None:
            async with pool.acquire() as sb:
                boxes.append(sb)
                stats = pool.stats()
                live.append(stats.ready + stats.in_use + stats.creating)
                await anyio.sleep(0.01)

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for _ in range(20):
                    tg.start_soon(user)
        assert pool.stats().acquired == 20
    # Ready, in use or being created: max_size; given back and not yet removed (the removal
    # waits for a quiet moment) or being removed: as many again.
    assert max(live) <= 3 and SlowFake.peak <= 6 and SlowFake.alive == 0
    assert SlowFake.peak_total <= 6 and SlowFake.removing == 0
    assert len({id(b) for b in boxes}) == 20  # max_uses=1: no sandbox served twice
    assert all(b.status is SandboxStatus.DESTROYED for b in boxes)


@pytest.mark.asyncio
async def test_a_slow_removal_does_not_hold_back_the_next_create() -> None:
    """max_size=1: the used sandbox's removal is stuck, yet its replacement is made and
    handed out; only when removals reach max_size beyond the live ones does creation wait."""
    SlowFake.hold_removal = hold = anyio.Event()
    async with SandboxPool(SandboxConfig(), min_ready=1, max_size=1, factory=fake) as pool:
        try:
            with anyio.fail_after(10):
                async with pool.acquire() as first:
                    # Taken, not yet released: no replacement yet (max_size 1).
                    assert pool.stats().creating == 0
                # Released: its removal is stuck, and the next one is made meanwhile.
                async with pool.acquire() as second:
                    assert second is not first
                    assert pool.stats().removing == 1
                    while SlowFake.removing < 1:  # noqa: ASYNC110 (its removal waits a moment)
                        await anyio.sleep(0.01)
                # Two removals stuck (max_size beyond the live ones): the third create waits.
                while SlowFake.removing < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                await anyio.sleep(0.05)
                assert pool.stats().creating == 0 and pool.stats().ready == 0
                hold.set()
                async with pool.acquire() as third:
                    assert third is not second
        finally:
            hold.set()  # else closing the pool waits for the stuck removals
    assert SlowFake.alive == 0 and SlowFake.removing == 0


@pytest.mark.asyncio
async def test_a_create_failure_reaches_the_waiting_acquire() -> None:
    SlowFake.fail = True
    async with SandboxPool(SandboxConfig(), min_ready=0, max_size=1, factory=fake) as pool:
        with anyio.fail_after(10), pytest.raises(SandboxInitFailed, match="could not create") \
                as info:
            async with pool.acquire():
                pass
        assert isinstance(info.value.cause, SandboxInitFailed)
        assert pool.stats().failed == 1 and "no engine today" in pool.stats().last_error


@pytest.mark.asyncio
async def test_acquire_outside_the_pool_block_is_refused() -> None:
    pool = SandboxPool(SandboxConfig(), factory=fake)
    with pytest.raises(SandboxNotRunning, match="not open"):
        async with pool.acquire():
            pass
    async with pool:
        pass
    with pytest.raises(SandboxNotRunning, match="closed"):
        async with pool.acquire():
            pass


@pytest.mark.asyncio
async def test_an_error_in_the_block_comes_out_as_itself() -> None:
    with pytest.raises(ZeroDivisionError):
        async with SandboxPool(SandboxConfig(), min_ready=1, factory=fake):
            _ = 1 / 0
    assert SlowFake.alive == 0


@pytest.mark.asyncio
async def test_a_sandbox_stopped_while_idle_is_replaced() -> None:
    async with SandboxPool(SandboxConfig(), min_ready=1, max_size=2, factory=fake) as pool:
        with anyio.fail_after(10):
            while pool.stats().ready < 1:  # noqa: ASYNC110 (counts have no event)
                await anyio.sleep(0.01)
        idle = pool._ready[0].sb
        idle.backend.lifecycle.fail("stopped from outside")
        async with pool.acquire() as sb:
            assert sb is not idle
        assert pool.stats().unhealthy == 1


@pytest.mark.asyncio
async def test_the_fake_backend_refuses_checkpoints() -> None:
    async with Sandbox(backend=FakeBackend()) as sb:
        with pytest.raises(CheckpointFailed, match="FakeBackend"):
            await sb.checkpoint("x")


def test_parse_checkpoint_trusts_only_valid_labels() -> None:
    good = {"Id": "sha256:1", "RepoTags": ["sandbox-checkpoint:a"], "Size": 5,
            "Labels": {"io.sandbox.managed-by": "sandbox-sdk", "io.sandbox.checkpoint": "a",
                       "io.sandbox.created": "2026-01-01T00:00:00+00:00",
                       "io.sandbox.checkpoint.config": "{not json"}}
    point = parse_checkpoint(good)
    assert point is not None and point.image == "sandbox-checkpoint:a" and point.size == 5
    assert point.source_config is None and point.config.image == "sandbox-checkpoint:a"
    for labels in ({**good["Labels"], "io.sandbox.checkpoint": "../x"},
                   {**good["Labels"], "io.sandbox.managed-by": "else"}, {}):
        assert parse_checkpoint({**good, "Labels": labels}) is None
    untagged = parse_checkpoint({**good, "RepoTags": ["<none>:<none>"], "Size": "big"})
    assert untagged is not None and untagged.image == "sha256:1" and untagged.size == 0


def test_only_top_level_added_paths_are_wiped() -> None:
    paths = {"/workspace/a", "/workspace/a/b", "/workspace/a/b/c", "/tmp/x", "/home/u/.s"}
    assert _top_level(paths) == ["/home/u/.s", "/tmp/x", "/workspace/a"]


@pytest.mark.asyncio
async def test_a_sandbox_idle_longer_than_max_idle_is_replaced() -> None:
    async with SandboxPool(SandboxConfig(), min_ready=1, max_size=2, max_idle=0.05,
                           factory=fake) as pool:
        with anyio.fail_after(10):
            while pool.stats().created < 3:  # noqa: ASYNC110 (counts have no event)
                await anyio.sleep(0.01)
        first_discarded = pool.stats().discarded
        assert first_discarded >= 2 and pool.stats().unhealthy == 0
        assert SlowFake.peak <= 2
    assert SlowFake.alive == 0



async def _fill(pool: SandboxPool, ready: int) -> None:
    with anyio.fail_after(10):
        while pool.stats().ready < ready or pool.stats().creating:  # noqa: ASYNC110 (the fill)
            await anyio.sleep(0.005)


@pytest.mark.asyncio
async def test_a_top_up_waits_for_the_release_or_the_delay() -> None:
    """Refilling after acquires waits for a quiet moment so it does not slow a user's first
    command, however short the pool is: a release with nothing else ready starts one create
    (the next user's), REFILL_DELAY without an acquire the rest."""
    async with SandboxPool(SandboxConfig(), min_ready=2, max_size=4, factory=fake) as pool:
        await _fill(pool, 2)
        async with pool.acquire():
            await anyio.sleep(0.002)
            assert pool.stats().creating == 0  # one short: deferred
        await anyio.sleep(0.002)
        assert pool.stats().creating == 0  # released, one still ready: still deferred
        async with pool.acquire():
            await anyio.sleep(0.002)
            assert pool.stats().creating == 0  # two short: deferred as well
        await anyio.sleep(0.002)
        assert pool.stats().creating == 1  # released, nothing ready: one for the next user
        await _fill(pool, 2)  # and the rest once no acquire came for REFILL_DELAY
        async with pool.acquire():
            pass
        async with SandboxPool(SandboxConfig(), min_ready=1, max_size=4, factory=fake) as one:
            await _fill(one, 1)
            async with one.acquire():
                await anyio.sleep(0.002)
                assert one.stats().creating == 0  # one short: deferred
            await anyio.sleep(0.002)
            assert one.stats().creating == 1  # released, nothing ready: the top-up started
        await _fill(pool, 2)
        async with pool.acquire(), pool.acquire():
            await anyio.sleep(0.002)
            assert pool.stats().creating == 0  # two short, both held: deferred
            with anyio.fail_after(5):
                while pool.stats().creating + pool.stats().ready < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.005)  # the delay runs out: both start
        await _fill(pool, 2)
        async with pool.acquire():
            with anyio.fail_after(5):
                while not pool.stats().creating:  # noqa: ASYNC110 (the delay runs out)
                    await anyio.sleep(0.005)


@pytest.mark.asyncio
async def test_acquires_back_to_back_defer_a_top_up_by_retire_limit_at_most() -> None:
    """A stream of acquires, each within REFILL_DELAY of the last, holds the top-up back for
    RETIRE_LIMIT at most: it starts while sandboxes are still ready, not once the pool ran
    dry (a busy pool that nobody waits on would otherwise never refill)."""
    from sandbox._pool import REFILL_DELAY, RETIRE_LIMIT

    count = int(4 * RETIRE_LIMIT / (REFILL_DELAY / 5))  # a stream longer than the limit
    async with SandboxPool(SandboxConfig(), min_ready=count, max_size=count,
                           factory=fake) as pool:
        await _fill(pool, count)
        acquired = 0
        with anyio.fail_after(10):
            while not pool.stats().creating:
                async with pool.acquire():
                    acquired += 1
                await anyio.sleep(REFILL_DELAY / 5)
        assert pool.stats().ready > 0 and acquired < count


@pytest.mark.asyncio
async def test_an_acquire_that_waits_gets_its_create_at_once() -> None:
    async with SandboxPool(SandboxConfig(), min_ready=0, max_size=2, factory=fake) as pool:
        with anyio.fail_after(1):  # the deferral (REFILL_DELAY) never applies to a waiter
            async with pool.acquire() as sb:
                assert sb.status is SandboxStatus.RUNNING


@pytest.mark.asyncio
async def test_a_used_sandbox_is_removed_after_the_next_users_first_moment() -> None:
    """A given-back sandbox's removal waits while acquires come back to back (it would slow
    the next user's first command), starts once no acquire came for REFILL_DELAY, and is
    never handed out again; close waits for the removals still deferred."""
    used: list[Sandbox] = []
    async with SandboxPool(SandboxConfig(), min_ready=3, max_size=4, factory=fake) as pool:
        await _fill(pool, 3)
        for _ in range(3):
            async with pool.acquire() as sb:
                assert sb not in used
                used.append(sb)
        await anyio.sleep(0.005)  # well within REFILL_DELAY of the last acquire
        # Back to back: out of service, but no removal started yet.
        assert pool.stats().removing == 3 and SlowFake.removing == 0
        assert all(sb.status is SandboxStatus.RUNNING for sb in used)
        with anyio.fail_after(5):
            while any(sb.status is not SandboxStatus.DESTROYED for sb in used):  # noqa: ASYNC110
                await anyio.sleep(0.005)
        async with pool.acquire() as sb:
            assert sb not in used
        last = sb
    assert last.status is SandboxStatus.DESTROYED  # close removed the one still deferred
    assert SlowFake.alive == 0 and SlowFake.removing == 0
