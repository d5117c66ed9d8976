"""Exit status helpers: a process killed by signal N reports 128+N through the engine."""

from __future__ import annotations

import asyncio
import contextlib
import signal as _signal
import threading
from collections.abc import AsyncIterator, Sequence


def signal_name(exit_code: int) -> str:
    """Return "SIGKILL" for 137 and the like, "" when the code is not a signal death.

    The engine reports a signal death as 128+N, which a shell's ``exit 137`` imitates; the two
    cannot be told apart, so the name is a reading of the convention, not a proof.
    """
    if 128 < exit_code < 128 + 65:
        try:
            return _signal.Signals(exit_code - 128).name
        except ValueError:
            return f"SIG{exit_code - 128}"
    return ""


def parse_signal(sig: int | str) -> int:
    """Turn 9, "9", "KILL" or "SIGKILL" into a signal number; ValueError otherwise."""
    if isinstance(sig, int):
        return int(_signal.Signals(sig))
    text = sig.strip().upper()
    if text.isdigit():
        return int(_signal.Signals(int(text)))
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(_signal.Signals[text])
    except KeyError:
        raise ValueError(f"unknown signal {sig!r}") from None


@contextlib.asynccontextmanager
async def cleanup_on_signals(
    signals: Sequence[int] = (_signal.SIGTERM, _signal.SIGHUP),
) -> AsyncIterator[None]:
    """Turn SIGTERM and SIGHUP into the cleanup Ctrl-C gets, then exit with 128+signal.

    Python's default for SIGTERM and SIGHUP ends the process at once: no ``finally`` and no
    ``async with`` exit runs, so a sandbox's container keeps running until ``sandbox gc``.
    Inside this block the first such signal cancels the task that entered it, as
    ``asyncio.run`` does for Ctrl-C; the sandboxes' shielded cleanup runs, and the block then
    raises ``SystemExit(128 + signum)`` (143 for SIGTERM, what the default would have
    reported). Further signals while cleanup runs are ignored; SIGKILL stays the hard stop.
    If cleanup itself fails, that error propagates instead. Put it outermost::

        async def main() -> None:
            async with sandbox.cleanup_on_signals(), sandbox.Sandbox(config) as sb:
                ...

        asyncio.run(main())

    Must be entered in the main thread (only it receives signals); the previous handlers
    are restored on exit.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is None:
        raise RuntimeError("cleanup_on_signals() must be used inside an asyncio task")
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("cleanup_on_signals() must be entered in the main thread: "
                           "only it receives signals")
    received: list[int] = []  # the first signal, set by the handler itself
    state = {"active": True, "cancelled": False}

    def fire(signum: int) -> None:
        if state["active"]:
            state["cancelled"] = True
            task.cancel(f"received {_signal.Signals(signum).name}")

    def handler(signum: int, frame: object) -> None:
        # Like asyncio.Runner's SIGINT handler: record it, and hand the cancel to the loop.
        if not received:
            received.append(signum)
            loop.call_soon_threadsafe(fire, signum)

    # signal.signal rather than loop.add_signal_handler: it returns the previous handler, so
    # leaving the block restores exactly what was there (remove_signal_handler resets to SIG_DFL).
    previous = {sig: _signal.signal(sig, handler) for sig in signals}
    try:
        try:
            yield
        finally:
            state["active"] = False
            for sig, old in previous.items():
                _signal.signal(sig, old)
    except asyncio.CancelledError:
        if not received or not state["cancelled"]:
            raise
        task.uncancel()
        raise SystemExit(128 + received[0]) from None
    if received:
        # The signal came as the block ended; a cancel it asked for was not delivered.
        if state["cancelled"]:
            task.uncancel()
        raise SystemExit(128 + received[0])
