"""cleanup_on_signals in this process: SIGTERM cancels the block's task, cleanup runs, and the
block ends with SystemExit(143); outside the block the previous handler is back."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from sandbox import cleanup_on_signals


@pytest.mark.asyncio
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
async def test_signal_cancels_the_block_runs_cleanup_and_exits_128_plus(sig: int) -> None:
    before = signal.getsignal(sig)
    cleaned: list[str] = []
    with pytest.raises(SystemExit) as ei:
        async with cleanup_on_signals():
            try:
                os.kill(os.getpid(), sig)
                await asyncio.sleep(30)
            finally:
                await asyncio.sleep(0)  # cleanup may await
                cleaned.append("yes")
    assert ei.value.code == 128 + sig
    assert cleaned == ["yes"]
    assert signal.getsignal(sig) is before
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0
    await asyncio.sleep(0)  # no stray cancellation left behind


@pytest.mark.asyncio
async def test_without_a_signal_nothing_changes() -> None:
    async with cleanup_on_signals():
        await asyncio.sleep(0)
    with pytest.raises(ValueError, match="boom"):
        async with cleanup_on_signals():
            raise ValueError("boom")
