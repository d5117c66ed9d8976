"""A native asyncio ``Task.cancel()`` (what ``asyncio.run`` does on Ctrl-C) ends an inline
``execute_command`` at every await point it can be suspended at, with ``CancelledError``, and
leaves no process of the command in the container.

The points are reached for real: the engine's calls are wrapped to say when the task is inside
one (create, attach, the exit-code inspect, the kill), and the read is the command running.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig
from sandbox.docker import _exec, _gateway
from sandbox.docker._gateway import Engine

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: The command cancelled; its argv is what the container must not show afterwards.
LONG = ["sleep", "1000"]


def _signalling(orig: Callable[..., Awaitable[Any]], reached: asyncio.Event,
                armed: list[bool]) -> Callable[..., Awaitable[Any]]:
    """``orig``, setting ``reached`` as it starts while ``armed`` (then suspended in it: the
    canceller, woken by the event, runs before any answer of the engine can)."""

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            armed[0] = False
            reached.set()
        return await orig(*args, **kwargs)

    return wrapper


async def _left(sb: Sandbox) -> str:
    ps = await sb.execute_command("ps -o pid,args")
    return "\n".join(line for line in ps.stdout.splitlines() if "sleep 1000" in line)


async def _cancel_at(sb: Sandbox, argv: list[str], reached: asyncio.Event,
                     *, again: asyncio.Event | None = None) -> asyncio.Task[Any]:
    """Start ``execute_command(argv)`` as a task, cancel it natively once ``reached`` is set
    (and once more when ``again`` is, if given), and return it finished."""
    task = asyncio.get_running_loop().create_task(sb.execute_command(argv))
    # Woken right at the set (``wait_for`` on 3.11 is a task and loop iterations more: an
    # engine's answer, e.g. the inspect's on a kept connection, could come first).
    async with asyncio.timeout(60):
        await reached.wait()
    assert not task.done()
    task.cancel()
    if again is not None:
        await asyncio.wait_for(again.wait(), 60)
        assert not task.done()
        task.cancel()
    done, _ = await asyncio.wait([task], timeout=60)
    assert done, "the cancelled execute_command did not end within 60 s"
    return task


@pytest.mark.parametrize("point", ["create", "attach", "inspect"])
async def test_cancel_inside_an_engine_call(monkeypatch: pytest.MonkeyPatch,
                                            point: str) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        await sb.execute_command("true")  # the cgroup lookup and the like are done
        reached, armed = asyncio.Event(), [True]
        name = {"create": "create_exec", "attach": "attach_exec",
                "inspect": "inspect_exec"}[point]
        monkeypatch.setattr(Engine, name, _signalling(getattr(Engine, name), reached, armed))
        # The inspect comes after the command ended: a short one, so the read is over.
        argv = ["true"] if point == "inspect" else LONG
        task = await _cancel_at(sb, argv, reached)
        assert task.cancelled(), task
        monkeypatch.undo()
        assert await _left(sb) == ""
        assert (await sb.execute_command("echo ok")).stdout == "ok\n"


async def test_cancel_during_the_read() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        reached = asyncio.Event()
        task = asyncio.get_running_loop().create_task(sb.execute_command(LONG))
        for _ in range(600):  # until the command runs: the task then waits in the read
            if await _left(sb):
                reached.set()
                break
            await asyncio.sleep(0.05)
        assert reached.is_set() and not task.done()
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=60)
        assert done and task.cancelled(), task
        assert await _left(sb) == ""


async def test_cancel_again_during_the_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first cancel ends the read and the kill starts (shielded); a second cancel while
    the kill runs still ends the task with CancelledError, once the command is gone."""
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        killing, armed = asyncio.Event(), [True]
        monkeypatch.setattr(_exec, "kill_command",
                            _signalling(_exec.kill_command, killing, armed))
        running = asyncio.Event()
        task = asyncio.get_running_loop().create_task(sb.execute_command(LONG))
        for _ in range(600):
            if await _left(sb):
                running.set()
                break
            await asyncio.sleep(0.05)
        assert running.is_set() and not task.done()
        task.cancel()
        await asyncio.wait_for(killing.wait(), 60)
        assert not task.done()
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=60)
        assert done and task.cancelled(), task
        monkeypatch.undo()
        assert await _left(sb) == ""


async def test_a_cancel_while_attaching_kills_the_command_the_engine_started(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine has started the command when the attach is cancelled: nobody reads it, so
    the SDK must kill it, not leave it running."""
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        started = asyncio.Event()
        original = _gateway.open_hijacked

        async def slow_open(*args: Any, **kwargs: Any) -> Any:
            stream = await original(*args, **kwargs)
            try:  # started and attached: the SDK's attach has not returned yet
                started.set()
                await asyncio.sleep(30)
            except BaseException:
                stream.close_now()
                raise
            return stream

        monkeypatch.setattr(_gateway, "open_hijacked", slow_open)
        task = asyncio.ensure_future(sb.execute_command("sleep 1000"))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        monkeypatch.undo()
        await asyncio.sleep(0.5)  # a command the kill missed has started by now
        assert await _left(sb) == ""


async def test_a_cancel_before_the_command_is_running_still_kills_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelled at once after the attach (the engine answers it before the process runs):
    the kill must wait for the process, or it finds none and the command starts after it."""
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        original = Engine.attach_exec
        task: asyncio.Task[object] | None = None

        async def attach_then_cancelled(self: Engine, *args: object, **kwargs: object) -> object:
            stream = await original(self, *args, **kwargs)  # type: ignore[arg-type]
            if task is not None and asyncio.current_task() is task:
                task.cancel()  # lands at the read, the first await after this
            return stream

        monkeypatch.setattr(Engine, "attach_exec", attach_then_cancelled)
        for _ in range(10):
            task = asyncio.ensure_future(sb.execute_command("sleep 1000"))
            with pytest.raises(asyncio.CancelledError):
                await task
        task = None
        monkeypatch.undo()
        await asyncio.sleep(0.5)  # a command the kill missed has started by now
        assert await _left(sb) == ""
