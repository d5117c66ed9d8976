"""The helper deadline every backend shares: credit per byte moved, a ceiling, the error text."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sandbox import _constants
from sandbox._deadline import HelperDeadline
from sandbox._errors import TimeoutExceeded

pytestmark = pytest.mark.asyncio


async def test_bytes_moved_push_the_deadline_out_up_to_the_ceiling() -> None:
    d = HelperDeadline(rate=100.0, max_time=_constants.HELPER_TIMEOUT + 5)
    assert d.scope.deadline == pytest.approx(d.start + _constants.HELPER_TIMEOUT)
    d.credit(200)  # 2 s at 100 B/s
    assert d.scope.deadline == pytest.approx(d.start + _constants.HELPER_TIMEOUT + 2)
    d.credit(10_000)  # far past the ceiling
    assert d.scope.deadline == pytest.approx(d.start + _constants.HELPER_TIMEOUT + 5)
    assert d.moved == 10_200


async def test_a_ceiling_below_the_fixed_time_still_gives_the_fixed_time() -> None:
    d = HelperDeadline(max_time=1.0)
    assert d.ceiling == _constants.HELPER_TIMEOUT


async def test_counted_out_credits_and_passes_chunks_on() -> None:
    d = HelperDeadline()
    seen: list[bytes] = []
    d.counted_out(seen.append)(b"abc")
    d.counted_out(None)(b"de")
    assert seen == [b"abc"] and d.moved == 5


async def test_counted_in_splits_bytes_into_mib_pieces_and_credits_iterables() -> None:
    d = HelperDeadline()
    assert d.counted_in(None) is None
    data = b"x" * ((1 << 20) + 3)
    gen = d.counted_in(data)
    assert gen is not None
    assert [len(p) async for p in gen] == [1 << 20, 3]

    async def chunks() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"c"
    gen = d.counted_in(chunks())
    assert gen is not None
    assert [p async for p in gen] == [b"ab", b"c"]
    assert d.moved == len(data) + 3


async def test_expired_names_what_and_the_helper_and_explains_on_request() -> None:
    d = HelperDeadline()
    d.credit(7)
    short = d.expired("read '/x'", ["cat", "/x"])
    assert isinstance(short, TimeoutExceeded)
    assert str(short).startswith("read '/x' did not finish within 60 s")
    assert short.details == "the helper 'cat' was killed after moving 7 bytes"
    long = d.expired("read '/x'", ["cat"], explain=True)
    assert long.details is not None
    assert "helpers get 60 s plus 1 s per 1048576 bytes" in long.details
