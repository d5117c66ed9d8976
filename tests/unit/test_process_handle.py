"""The shared exec handle (`ProcessBase`) in milliseconds, on the scripted `FakeProcess`:
deadlines, truncation, callbacks, stdin, kill and cancellation, as every backend has them."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from sandbox import CommandResult, KillFailed, OutputChunk, StdinClosed
from sandbox.testing import FakeProcess, Step

pytestmark = pytest.mark.asyncio


async def run(proc: FakeProcess, stdin: bytes | None = None) -> CommandResult:
    async with proc.lifetime(stdin):
        return await proc.wait()


async def test_output_over_time_and_the_exit_code() -> None:
    proc = FakeProcess(("build",), script=[
        Step.out("compiling\n"), Step.sleep(0.005), Step.out("warning\n", "stderr"),
        Step.out("done\n"), Step.exit(2)])
    async with proc.lifetime(None):
        chunks = [c async for c in proc]
        result = await proc.wait()
    assert chunks == [OutputChunk(stream="stdout", data=b"compiling\n"),
                      OutputChunk(stream="stderr", data=b"warning\n"),
                      OutputChunk(stream="stdout", data=b"done\n")]
    assert (result.exit_code, result.success, result.signal) == (2, False, "")
    assert result.stdout == "compiling\ndone\n" and result.stderr == "warning\n"
    assert result.combined == "compiling\nwarning\ndone\n" and not proc.running
    assert proc.signals == []


async def test_a_hang_is_killed_at_its_timeout() -> None:
    proc = FakeProcess(("sleep",), script=[Step.out("started\n"), Step.hang()], timeout=0.02)
    result = await run(proc)
    assert result.timed_out and not result.success
    assert (result.exit_code, result.signal) == (137, "SIGKILL")
    assert result.error == "command timed out after 0.02 s"
    assert result.stdout == "started\n" and proc.signals == ["KILL"]


async def test_silence_is_killed_at_the_idle_timeout_and_output_resets_it() -> None:
    # Output keeps coming far more often than the idle limit: never killed.
    busy = FakeProcess(("tick",), script=[*[Step.out("."), Step.sleep(0.001)] * 20],
                       idle_timeout=5)
    assert (await run(busy)).success and busy.signals == []
    quiet = FakeProcess(("tick",), script=[Step.out("."), Step.hang()], idle_timeout=0.02)
    result = await run(quiet)
    assert result.timed_out and result.signal == "SIGKILL" and result.stdout == "."
    assert result.error == "command produced no output for 0.02 s (idle timeout)"


async def test_output_past_the_cap_is_dropped_and_flagged() -> None:
    proc = FakeProcess(("yes",), script=[Step.out("hello world"), Step.out("err", "stderr")],
                       max_output_bytes=4)
    result = await run(proc)
    assert result.truncated and result.stdout == "hell" and result.stderr == "err"
    assert result.error == "output truncated at max_output_bytes" and result.success


async def test_callbacks_see_each_chunk_sync_and_async() -> None:
    seen: list[tuple[str, bytes]] = []

    async def on_err(data: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        seen.append(("err", data))

    proc = FakeProcess(("x",), script=[Step.out("a"), Step.out("b", "stderr"), Step.out("c")],
                       on_stdout=lambda d: seen.append(("out", d)), on_stderr=on_err,
                       iterate=False)
    assert (await run(proc)).success
    assert seen == [("out", b"a"), ("err", b"b"), ("out", b"c")]


async def test_a_callback_that_raises_kills_the_command() -> None:
    def boom(data: bytes) -> None:
        raise ValueError("callback failed")

    proc = FakeProcess(("x",), script=[Step.out("a"), Step.hang()], on_stdout=boom)
    with pytest.raises(ValueError, match="callback failed"):
        await run(proc)
    assert proc.signals == ["KILL"] and not proc.running


async def test_cancellation_kills_the_command_shielded() -> None:
    proc = FakeProcess(("sleep",), script=[Step.hang()])
    with anyio.move_on_after(0.01) as scope:
        await run(proc)
    assert scope.cancelled_caught
    assert proc.signals == ["KILL"] and proc.result is None and not proc.running


async def test_leaving_the_block_early_kills_and_the_result_says_so() -> None:
    proc = FakeProcess(("sleep",), script=[Step.hang()])
    async with proc.lifetime(None):
        assert proc.running
    result = await proc.wait()
    assert (result.signal, result.exit_code, result.success) == ("SIGKILL", 137, False)
    await proc.aclose()  # idempotent
    assert proc.signals == ["KILL"]


async def test_kill_sends_the_signal_and_a_trapped_one_is_survived() -> None:
    proc = FakeProcess(("server",), script=[Step.hang()], ignore=["TERM"])
    async with proc.lifetime(None):
        await proc.kill("TERM")
        assert proc.running
        await proc.kill("SIGINT")
        result = await proc.wait()
    assert (result.exit_code, result.signal) == (130, "SIGINT")
    assert proc.signals == ["TERM", "INT"]
    with pytest.raises(ValueError):
        await proc.kill("NOPE")


async def test_a_kill_that_is_not_seen_to_work_is_reported_not_claimed() -> None:
    # The sweep saw survivors, and the command then ended by itself: never a SIGKILL.
    proc = FakeProcess(("bomb",), script=[Step.stdin_eof(), Step.exit(0)], unkillable=True,
                       timeout=0.01)
    with pytest.raises(KillFailed, match="could not be confirmed") as caught:
        async with proc.lifetime(None):
            await proc.wait_signalled()
            await proc.close_stdin()  # now it ends by itself
            await proc.wait()
    assert "timed out" in caught.value.message
    assert "exit code 0" in caught.value.details


async def test_stdin_is_a_pipe_with_a_real_eof() -> None:
    cat = FakeProcess(("cat",), script=[Step.stdin_eof()], echo_stdin=True)
    result = await run(cat, b"hello")
    assert result.stdout == "hello" and cat.stdin == b"hello"

    cat = FakeProcess(("cat",), script=[Step.stdin_eof()], echo_stdin=True)
    async with cat.lifetime(None):
        await cat.write_stdin("a")
        await cat.write_stdin(b"b")
        await cat.close_stdin()
        with pytest.raises(StdinClosed, match="already closed"):
            await cat.write_stdin("c")
        assert (await cat.wait()).stdout == "ab"
    true = FakeProcess(("true",), script=[Step.exit(0)])
    async with true.lifetime(None):
        await true.wait()
        with pytest.raises(StdinClosed, match="has exited"):
            await true.write_stdin("late")


async def test_stdin_a_command_never_reads_is_dropped_when_it_exits() -> None:
    async def endless() -> object:
        while True:
            yield b"x" * 10
            await anyio.sleep(0.001)

    proc = FakeProcess(("true",), script=[Step.sleep(0.01), Step.exit(0)])
    async with proc.lifetime(endless()):  # type: ignore[arg-type]
        result = await proc.wait()
    assert result.success and len(proc.stdin) > 0


async def test_the_finalizer_adds_to_the_result() -> None:
    import attrs

    async def finalize(result: CommandResult) -> CommandResult:
        return attrs.evolve(result, metadata={**result.metadata, "seen": "yes"})

    proc = FakeProcess(("x",), script=[Step.exit(0)], finalize=finalize)
    assert (await run(proc)).metadata["seen"] == "yes"


async def test_a_replayed_result_ends_once_its_output_was_read() -> None:
    scripted = CommandResult(exit_code=3, stdout="out")
    proc = FakeProcess(("x",), scripted)
    async with proc.lifetime(None):
        assert proc.running
        assert [c.data async for c in proc] == [b"out"]
        assert await proc.wait() is scripted
