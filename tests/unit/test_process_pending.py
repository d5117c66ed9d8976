"""`sandbox.process._channel.Pending.settled`: a command's replies, waited for like
``asyncio.shield`` (a cancelled waiter leaves the shared future alone) and delivered to the
waiter in the same loop iteration."""

from __future__ import annotations

import asyncio
import os

import pytest

from sandbox.process._channel import Pending


@pytest.mark.asyncio
async def test_a_cancelled_waiter_leaves_the_reply_to_the_others() -> None:
    pending = Pending(asyncio.get_running_loop())
    first = asyncio.ensure_future(pending.settled(pending.status))
    second = asyncio.ensure_future(pending.settled(pending.status))
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert not pending.status.cancelled()
    pending.deliver({"status": 9 << 8}, [])
    assert await second == 9 << 8
    assert await pending.settled(pending.status) == 9 << 8  # already there


@pytest.mark.asyncio
async def test_the_pid_wakes_a_waiter_in_one_step_and_an_error_reaches_it() -> None:
    pending = Pending(asyncio.get_running_loop())
    waiter = asyncio.ensure_future(pending.settled(pending.pidfd))
    await asyncio.sleep(0)
    read_end, write_end = os.pipe()
    os.close(write_end)
    pending.deliver({"pid": 42, "exec": 0}, [read_end])
    await asyncio.sleep(0)  # one iteration: asyncio.shield needed two
    assert waiter.done() and waiter.result() == (42, read_end)
    os.close(read_end)
    assert await pending.settled(pending.started) == (0, "")
    waiter = asyncio.ensure_future(pending.settled(pending.status))
    await asyncio.sleep(0)
    pending.deliver({"error": "gone"}, [])
    with pytest.raises(Exception, match="could not start"):
        await waiter


@pytest.mark.asyncio
async def test_a_spawn_reply_that_says_the_end_too_settles_all_three() -> None:
    """A command that had ended when posix_spawn returned: pid, start and end in one
    message; the pidfd is the caller's (not closed), the end wakes its waiter."""
    pending = Pending(asyncio.get_running_loop())
    waiter = asyncio.ensure_future(pending.settled(pending.status))
    await asyncio.sleep(0)
    read_end, write_end = os.pipe()
    os.close(write_end)
    pending.deliver({"pid": 42, "exec": 0, "status": 3 << 8}, [read_end])
    await asyncio.sleep(0)
    assert waiter.done() and waiter.result() == 3 << 8
    assert await pending.settled(pending.pidfd) == (42, read_end)
    assert await pending.settled(pending.started) == (0, "")
    os.fstat(read_end)  # still open: it was handed over, not closed
    os.close(read_end)
