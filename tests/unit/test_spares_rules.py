"""The spares registry's rules (`sandbox.process._spares`), with stand-in spares: a key gets a
spare only once it is seen twice, at most `limit` are idle, a dropped, idle or cancelled spare
is removed, a taken one is not, and a dead one is never handed over."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from sandbox.process import _spares


class Fake:
    made: ClassVar[list[Fake]] = []

    def __init__(self) -> None:
        self.removed = False
        self.live = True
        Fake.made.append(self)

    def alive(self) -> bool:
        return self.live

    async def remove(self) -> None:
        self.removed = True


async def make() -> Fake:
    return Fake()


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    Fake.made = []
    monkeypatch.delenv("SANDBOX_PROCESS_SPARES", raising=False)
    monkeypatch.setattr(_spares, "START_DELAY", 0.0)


def test_seen_twice_then_taken_and_made_again() -> None:
    async def main() -> None:
        _spares.offer("k", make)
        assert await _spares.settled() == []  # seen once: nothing made
        _spares.offer("k", make)
        spare = await _spares.take("k")
        assert isinstance(spare, Fake) and not spare.removed
        assert await _spares.take("k") is None  # one per key
        assert _spares.stats()["taken"] == 1
        _spares.offer("k", make)  # the create that took it asks for the next
        assert len(await _spares.settled()) == 1
    asyncio.run(main())
    assert [f.removed for f in Fake.made] == [False, True]  # the idle one went with the loop


def test_bounded_the_oldest_key_dropped_and_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_PROCESS_SPARES", "1")

    async def main() -> None:
        for key in ("a", "a", "b", "b"):
            _spares.offer(key, make)
            await _spares.settled()
        await asyncio.sleep(0.01)
        assert _spares.stats() == {"idle": 1, "made": 2, "taken": 0, "dropped": 1}
        assert [f.removed for f in Fake.made] == [True, False]
        assert await _spares.take("a") is None
    asyncio.run(main())


def test_idle_too_long_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_spares, "IDLE_TTL", 0.05)

    async def main() -> None:
        for _ in range(2):
            _spares.offer("k", make)
        await _spares.settled()
        await asyncio.sleep(0.2)
        assert Fake.made[0].removed and _spares.stats()["idle"] == 0
    asyncio.run(main())


def test_a_dead_spare_is_not_handed_over_and_is_removed() -> None:
    async def main() -> None:
        for _ in range(2):
            _spares.offer("k", make)
        (spare,) = await _spares.settled()
        assert isinstance(spare, Fake)
        spare.live = False
        assert await _spares.take("k") is None
        await asyncio.sleep(0.01)
        assert spare.removed
    asyncio.run(main())


def test_zero_turns_them_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_PROCESS_SPARES", "0")

    async def main() -> None:
        for _ in range(3):
            _spares.offer("k", make)
        assert await _spares.settled() == [] and Fake.made == []
    asyncio.run(main())


def test_a_failed_making_is_no_spare() -> None:
    async def broken() -> Fake:
        raise OSError("no")

    async def main() -> None:
        for _ in range(2):
            _spares.offer("k", broken)
        assert await _spares.take("k") is None
    asyncio.run(main())
