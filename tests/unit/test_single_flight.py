"""`SingleFlight`: concurrent askers of one key ask once; other keys never wait; a failed or
cancelled first asker hands the question to a waiter instead of leaving it waiting."""

from __future__ import annotations

import anyio
import pytest

from sandbox._single_flight import SingleFlight

pytestmark = pytest.mark.asyncio


async def test_concurrent_askers_of_one_key_ask_once() -> None:
    flight: SingleFlight[str, int] = SingleFlight(8)
    asked = 0
    release = anyio.Event()
    got: list[int] = []

    async def fetch() -> int:
        nonlocal asked
        asked += 1
        await release.wait()
        return 42

    async with anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(lambda: _append(got, flight.ask("img", fetch)))
        await anyio.sleep(0.05)
        release.set()
    assert asked == 1 and got == [42] * 10
    assert flight.get("img") == 42


async def _append(out: list[int], answer: object) -> None:
    out.append(await answer)  # type: ignore[misc]


async def test_other_keys_do_not_wait() -> None:
    flight: SingleFlight[str, int] = SingleFlight(8)
    never = anyio.Event()

    async def stuck() -> int:
        await never.wait()
        return 0

    async def quick() -> int:
        return 7

    async with anyio.create_task_group() as tg:
        tg.start_soon(flight.ask, "a", stuck)
        await anyio.sleep(0.01)
        with anyio.fail_after(2):
            assert await flight.ask("b", quick) == 7
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("how", ["cancelled", "failed"])
async def test_a_first_asker_that_does_not_answer_hands_over(how: str) -> None:
    flight: SingleFlight[str, int] = SingleFlight(8)
    started = anyio.Event()
    calls: list[str] = []

    async def first() -> int:
        calls.append("first")
        started.set()
        await anyio.sleep(0.05)
        if how == "failed":
            raise RuntimeError("the engine said no")
        await anyio.sleep(60)
        return 1

    async def second() -> int:
        calls.append("second")
        return 2

    answers: list[int] = []
    errors: list[BaseException] = []

    async def leader() -> None:
        with anyio.CancelScope() as scope:
            cancel_later.append(scope)
            try:
                await flight.ask("k", first)
            except RuntimeError as exc:
                errors.append(exc)

    cancel_later: list[anyio.CancelScope] = []
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(leader)
            await started.wait()
            tg.start_soon(lambda: _append(answers, flight.ask("k", second)))
            await anyio.sleep(0.01)
            assert answers == []  # waiting on the first asker, not asking
            if how == "cancelled":
                cancel_later[0].cancel()
    assert calls == ["first", "second"] and answers == [2]
    assert len(errors) == (1 if how == "failed" else 0)
    assert flight.get("k") == 2


async def test_bounded() -> None:
    flight: SingleFlight[int, int] = SingleFlight(3)
    for i in range(4):
        async def fetch(i: int = i) -> int:
            return i
        await flight.ask(i, fetch)
    assert len(flight) == 1 and flight.get(3) == 3


async def test_in_flight_while_fetched_and_not_after() -> None:
    flight: SingleFlight[str, int] = SingleFlight(8)
    release = anyio.Event()

    async def fetch() -> int:
        await release.wait()
        return 1

    assert not flight.in_flight("img")
    async with anyio.create_task_group() as tg:
        tg.start_soon(flight.ask, "img", fetch)
        await anyio.sleep(0.01)
        assert flight.in_flight("img") and not flight.in_flight("other")
        release.set()
    assert not flight.in_flight("img") and flight.get("img") == 1
