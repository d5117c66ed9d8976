"""Deadlines on one timer (`sandbox._deadlines`): they fire as ``asyncio.timeout`` does, an
outer cancel is never taken for one, and many short blocks arm the loop's timer once."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from sandbox._deadlines import Deadline, DeadlineKeeper


async def _block(keeper: DeadlineKeeper, seconds: float, work: Any) -> str:
    """Run ``work`` under a deadline; say how it ended."""
    deadline = Deadline()
    deadline.start(keeper, seconds, asyncio.current_task())  # type: ignore[arg-type]
    exc: BaseException | None = None
    try:
        await work
    except BaseException as caught:
        exc = caught
    if deadline.end(exc):
        return "timeout"
    if exc is not None:
        raise exc
    return "done"


def test_a_deadline_fires_and_is_told_from_an_outer_cancel() -> None:
    async def main() -> None:
        keeper = DeadlineKeeper(asyncio.get_running_loop())
        assert await _block(keeper, 0.02, asyncio.sleep(10)) == "timeout"
        assert await _block(keeper, 10, asyncio.sleep(0)) == "done"
        assert await _block(keeper, math.inf, asyncio.sleep(0.01)) == "done"
        # The task goes on normally after a deadline's cancel (its cancel count is back at 0).
        assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
        await asyncio.sleep(0.01)

        # A cancel from outside, with a later deadline pending: a CancelledError, not a timeout.
        task = asyncio.create_task(_block(keeper, 10, asyncio.sleep(10)))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

        # An outer cancel that lands once the deadline fired is not swallowed as a timeout.
        seen: list[str] = []

        async def both() -> None:
            deadline = Deadline()
            deadline.start(keeper, 0.01, asyncio.current_task())  # type: ignore[arg-type]
            exc: BaseException | None = None
            try:
                await asyncio.sleep(0.05)
            except BaseException as caught:
                exc = caught
                asyncio.current_task().cancel()  # type: ignore[union-attr]
            seen.append("timeout" if deadline.end(exc) else "cancelled")

        with pytest.raises(asyncio.CancelledError):
            await asyncio.create_task(both())
        assert seen == ["cancelled"]

    asyncio.run(main())


def test_an_earlier_deadline_after_a_later_one_fires_on_time() -> None:
    async def main() -> None:
        keeper = DeadlineKeeper(asyncio.get_running_loop())
        slow = asyncio.create_task(_block(keeper, 30, asyncio.sleep(0.3)))
        await asyncio.sleep(0)
        t0 = asyncio.get_running_loop().time()
        assert await _block(keeper, 0.05, asyncio.sleep(10)) == "timeout"
        assert asyncio.get_running_loop().time() - t0 < 1
        assert await slow == "done"
        # Two due at once both fire.
        results = await asyncio.gather(_block(keeper, 0.02, asyncio.sleep(10)),
                                       _block(keeper, 0.03, asyncio.sleep(10)),
                                       _block(keeper, 5, asyncio.sleep(0.06)))
        assert results == ["timeout", "timeout", "done"]

    asyncio.run(main())


def test_many_short_blocks_arm_the_timer_once() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        armed: list[float] = []
        call_at = loop.call_at

        def counting(when: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            armed.append(when)
            return call_at(when, callback, *args, **kwargs)

        loop.call_at = counting  # type: ignore[method-assign]
        keeper = DeadlineKeeper(loop)
        for _ in range(100):
            assert await _block(keeper, 30, asyncio.sleep(0)) == "done"
        assert len(armed) == 1
        loop.call_at = call_at  # type: ignore[method-assign]

    asyncio.run(main())
