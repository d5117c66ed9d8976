"""An exec run in the caller's task (no stdin, no limits, no iteration) keeps the guarantees
of the pump-and-finisher tasks: its result, the container-stopped cut of an output stream
that never ends (gVisor), and the kill when the caller is cancelled. Fake engine and stream."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sandbox._errors import SandboxNotRunning
from sandbox.docker import _exec
from sandbox.docker._exec import ExecProcess

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeStream:
    def __init__(self, messages: list[tuple[int, bytes]], *, hang: bool = False) -> None:
        self.messages, self.hang, self.closed = list(messages), hang, False
        self._gone = anyio.Event()

    async def read_out(self) -> tuple[int, bytes] | None:
        await anyio.lowlevel.checkpoint()
        if self.messages:
            return self.messages.pop(0)
        if self.hang and not self.closed:
            await self._gone.wait()  # open until closed: a dead gVisor sandbox's stream
        return None

    async def close(self) -> None:
        self.closed = True
        self._gone.set()


class FakeEngine:
    def __init__(self) -> None:
        self.inspects = 0

    async def inspect_exec(self, exec_id: str, *, deadline: float | None = None) -> Any:
        self.inspects += 1
        return {"Running": False, "ExitCode": 3, "Pid": 77}


def make(stream: FakeStream, **kw: Any) -> ExecProcess:
    return ExecProcess(engine=FakeEngine(), container_id="c" * 64, exec_id="e1",  # type: ignore[arg-type]
                       stream=stream, marker="m", user="1000:1000", argv=["cmd"],  # type: ignore[arg-type]
                       max_output_bytes=1 << 20, timeout=kw.get("timeout"), idle_timeout=None,
                       on_stdout=None, on_stderr=None, iterate=False)


async def test_the_result_comes_from_the_callers_task() -> None:
    proc = make(FakeStream([(1, b"out\n"), (2, b"err\n")]))
    tasks_before = len(anyio.get_running_tasks())  # type: ignore[attr-defined]
    async with proc.lifetime(None):
        assert proc._inline
        assert len(anyio.get_running_tasks()) == tasks_before  # type: ignore[attr-defined]
        result = await proc.wait()
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert result.process_id == 77


async def test_with_a_time_limit_the_tasks_run_it() -> None:
    proc = make(FakeStream([(1, b"x")]), timeout=30.0)
    async with proc.lifetime(None):
        assert not proc._inline
        assert (await proc.wait()).stdout == "x"


@pytest.mark.parametrize("when", ["before", "during"])
async def test_a_stopped_container_cuts_an_output_that_never_ends(
        monkeypatch: pytest.MonkeyPatch, when: str) -> None:
    monkeypatch.setattr(_exec, "STOPPED_GRACE", 0.2)
    stream = FakeStream([(1, b"partial")], hang=True)
    proc = make(stream)
    error = SandboxNotRunning("the sandbox's container stopped")

    async def stop_soon() -> None:
        await anyio.sleep(0.05)
        proc.container_stopped(error)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            if when == "before":
                proc.container_stopped(error)
            else:
                tg.start_soon(stop_soon)
            async with proc.lifetime(None):
                assert proc._inline
                with pytest.raises(SandboxNotRunning) as raised:
                    await proc.wait()
    assert raised.value is error
    assert stream.closed and proc._abandoned  # stopped reading; nothing left to kill


async def test_a_stopped_container_whose_output_ends_in_the_grace_gives_the_result(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_exec, "STOPPED_GRACE", 5.0)
    stream = FakeStream([(1, b"done")], hang=True)
    proc = make(stream)

    async def end_soon() -> None:
        await anyio.sleep(0.05)
        proc.container_stopped(SandboxNotRunning("stopped"))
        await anyio.sleep(0.05)
        await stream.close()  # the engine ended the output after all

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(end_soon)
            async with proc.lifetime(None):
                result = await proc.wait()
    assert (result.exit_code, result.stdout) == (3, "done")


async def test_cancelling_the_caller_kills_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    kills: list[str] = []

    async def kill_command(*args: Any) -> bool:
        kills.append(args[2])
        return True

    monkeypatch.setattr(_exec, "kill_command", kill_command)
    stream = FakeStream([], hang=True)
    proc = make(stream)
    with anyio.move_on_after(0.1):
        async with proc.lifetime(None):
            await proc.wait()
    assert kills == ["e1"]


async def test_a_callbacks_own_timeout_error_passes_through_an_inline_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_exec, "kill_command", _no_kill)

    def callback(data: bytes) -> None:
        raise TimeoutError("the callback's own")

    proc = ExecProcess(engine=FakeEngine(), container_id="c" * 64, exec_id="e1",  # type: ignore[arg-type]
                       stream=FakeStream([(1, b"x")]), marker="m", user="1000:1000",  # type: ignore[arg-type]
                       argv=["cmd"], max_output_bytes=1 << 20, timeout=None, idle_timeout=None,
                       on_stdout=callback, on_stderr=None, iterate=False)
    with anyio.fail_after(10), pytest.raises(TimeoutError, match="the callback's own"):
        async with proc.lifetime(None):
            assert proc._inline
            await proc.wait()


async def test_a_cancel_from_outside_passes_an_inline_read_whose_cut_also_came(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The cut and another cancel at once: the other cancel wins, as with asyncio.timeout
    (the read is not turned into the cut's SandboxNotRunning)."""
    import asyncio

    monkeypatch.setattr(_exec, "STOPPED_GRACE", 0.0)
    monkeypatch.setattr(_exec, "kill_command", _no_kill)
    stream = FakeStream([], hang=True)
    proc = make(stream)
    task = asyncio.current_task()
    assert task is not None

    async def both_soon() -> None:
        await anyio.sleep(0.05)
        proc.container_stopped(SandboxNotRunning("stopped"))  # the cut, due now
        task.cancel()  # and an outside cancel, before the cut's callback runs

    with pytest.raises(asyncio.CancelledError):
        async with proc.lifetime(None):
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(both_soon()))
            await proc.wait()
    assert task.uncancel() == 0  # one cancel counted, and it was taken back here


async def _no_kill(*args: Any) -> bool:
    return True
