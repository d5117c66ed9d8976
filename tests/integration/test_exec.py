"""Commands in a real container: streaming, stdin, timeouts, exit codes, output limits."""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import AsyncIterator

import anyio
import anyio.lowlevel
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    CommandExecutionFailed,
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    ConfigError,
    NetworkAccessDenied,
    OutputChunk,
    Sandbox,
    SandboxConfig,
    SecurityViolation,
    StdinClosed,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def busybox(**kw: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, **kw))  # type: ignore[arg-type]


async def test_output_arrives_while_command_runs() -> None:
    async with busybox() as sb:
        arrivals: list[tuple[float, bytes]] = []
        start = time.monotonic()
        result = await sb.execute_command(
            "echo first; sleep 1.5; echo second",
            on_stdout=lambda b: arrivals.append((time.monotonic() - start, b)),
        )
        assert result.success
        assert result.stdout == "first\nsecond\n"
        assert arrivals[0][1] == b"first\n"
        # The first chunk came well before the command ended.
        assert arrivals[0][0] < result.duration.total_seconds() - 1.0


async def test_stream_command_yields_chunks_before_end() -> None:
    async with busybox() as sb, sb.stream_command("echo one; sleep 1; echo two >&2") as proc:
        chunks: list[OutputChunk] = []
        async for chunk in proc:
            chunks.append(chunk)
            if len(chunks) == 1:
                assert proc.running
        result = await proc.wait()
    assert [c.stream for c in chunks] == ["stdout", "stderr"]
    assert result.stdout == "one\n" and result.stderr == "two\n"


async def test_stdin_round_trips_and_cat_ends() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB, every byte value
    async with busybox() as sb:
        result = await sb.execute_command(Command(executable="cat", stdin=payload, timeout=30))
        assert result.success and not result.timed_out
        assert result.stdout_bytes == payload
        result = await sb.execute_command(Command(executable="wc", args=["-l"],
                                                  stdin_content="a\nb\nc\n"))
        assert result.stdout.strip() == "3"


async def test_stdin_from_async_iterator_and_interactive_handle() -> None:
    async def gen():  # type: ignore[no-untyped-def]
        for i in range(3):
            yield f"line{i}\n".encode()

    async with busybox() as sb:
        result = await sb.execute_command(Command(executable="cat", stdin=gen()))
        assert result.stdout == "line0\nline1\nline2\n"
        async with sb.stream_command(["cat"]) as proc:
            await proc.write_stdin(b"ping\n")
            await proc.close_stdin()
            result = await proc.wait()
        assert result.stdout == "ping\n" and result.success


async def test_timeout_kills_every_process() -> None:
    async with busybox() as sb:
        result = await sb.execute_command(
            Command.shell("sleep 1000 & sleep 1000", timeout=1, environment={"TAG": "victim"}))
        assert result.timed_out and not result.success
        assert result.signal == "SIGKILL"
        assert "timed out" in result.error
        assert result.duration.total_seconds() < 10
        ps = await sb.execute_command("ps -o pid,args")
        assert "sleep 1000" not in ps.stdout, ps.stdout


async def test_timeout_keeps_output_so_far_and_kills_setsid_children() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        result = await sb.execute_command(Command.shell(
            "echo started; setsid sleep 1000 >/dev/null 2>&1 & sleep 1000", timeout=1.5))
        assert result.timed_out and result.stdout == "started\n"
        ps = await sb.execute_command("ps -eo args")
        assert "sleep 1000" not in ps.stdout, ps.stdout


async def test_idle_timeout() -> None:
    async with busybox() as sb:
        # Without stdin, `read` gets EOF at once: a command that ends is not an idle one.
        result = await sb.execute_command(
            Command.shell("echo prompt; read answer; echo after", idle_timeout=1, stdin=None))
        assert not result.timed_out and result.stdout == "prompt\nafter\n", result
        result = await sb.execute_command(Command.shell("echo prompt; sleep 30", idle_timeout=1))
        assert result.timed_out and "idle" in result.error
        assert result.stdout == "prompt\n"


async def test_exit_codes_and_signals() -> None:
    async with busybox() as sb:
        r = await sb.execute_command("exit 3")
        assert (r.exit_code, r.success, r.signal) == (3, False, "")
        r = await sb.execute_command("kill -9 $$")
        assert r.exit_code == 137 and r.signal == "SIGKILL"
        r = await sb.execute_command("kill -TERM $$")
        assert r.signal == "SIGTERM"
        r = await sb.execute_command(["true"])
        assert r.success and r.exit_code == 0 and r.error == ""
        assert r.metadata["container_id"] == sb.backend.container_id
        assert r.metadata["exec_id"]
        assert r.process_id > 0
        assert r.start_time is not None and r.end_time is not None
        assert r.end_time >= r.start_time


async def test_missing_executable_raises_naming_it() -> None:
    async with busybox() as sb:
        with pytest.raises(CommandExecutionFailed, match="no-such-tool"):
            await sb.execute_command(["no-such-tool", "--help"])
        # Through a shell it is what the shell did: exit 127 and its message.
        r = await sb.execute_command("no-such-tool")
        assert r.exit_code == 127 and "not found" in r.stderr


async def test_combined_keeps_arrival_order() -> None:
    async with busybox() as sb:
        r = await sb.execute_command(
            "echo a; sleep 0.2; echo b >&2; sleep 0.2; echo c; sleep 0.2; echo d >&2")
        assert r.combined == "a\nb\nc\nd\n"
        assert r.stdout == "a\nc\n" and r.stderr == "b\nd\n"


async def test_utf8_split_across_chunks_and_invalid_bytes() -> None:
    async with busybox() as sb:
        # "é" is c3 a9: the two bytes arrive in separate writes.
        r = await sb.execute_command(r"printf '\303'; sleep 0.3; printf '\251 \377\n'")
        assert r.stdout == "é \ufffd\n"
        assert r.stdout_bytes == b"\xc3\xa9 \xff\n"


async def test_output_limit_truncates_but_command_runs_to_end() -> None:
    async with busybox() as sb:
        r = await sb.execute_command(Command.shell(
            "head -c 100000 /dev/zero; echo done >&2", max_output_bytes=1000))
        assert r.truncated and r.success
        assert len(r.stdout_bytes) == 1000
        assert r.stderr == "done\n"


async def test_async_callbacks_receive_everything() -> None:
    got: list[bytes] = []

    async def collect(b: bytes) -> None:
        await anyio.lowlevel.checkpoint()
        got.append(b)

    async with busybox() as sb:
        r = await sb.execute_command(Command.shell("head -c 50000 /dev/zero",
                                                   max_output_bytes=10), on_stdout=collect)
        assert sum(map(len, got)) == 50000 and r.truncated


async def test_working_dir_environment_and_user() -> None:
    async with busybox(environment={"BASE": "1"}) as sb:
        assert sb.get_working_directory() == "/workspace"
        r = await sb.execute_command("pwd; echo $BASE")
        assert r.stdout == "/workspace\n1\n"
        sb.set_environment({"EXTRA": "x"})
        env = sb.get_environment()
        env["MUTATED"] = "no"
        assert "MUTATED" not in sb.get_environment()
        r = await sb.execute_command(
            Command.shell("echo $BASE$EXTRA$CMD", environment={"CMD": "c"}))
        assert r.stdout == "1xc\n"
        await sb.execute_command("mkdir -p sub/dir")
        await sb.set_working_directory("sub")
        assert sb.get_working_directory() == "/workspace/sub"
        assert (await sb.execute_command("pwd")).stdout == "/workspace/sub\n"
        r = await sb.execute_command(Command(executable="pwd", working_dir="dir"))
        assert r.stdout == "/workspace/sub/dir\n"
        r = await sb.execute_command(Command(executable="id", args=["-u"], user="1000"))
        assert r.stdout == "1000\n"


async def test_bad_commands_are_refused_before_running() -> None:
    async with busybox() as sb:
        with pytest.raises(ConfigError):
            await sb.execute_command("")
        with pytest.raises(ConfigError):
            await sb.execute_command([])
        with pytest.raises(NetworkAccessDenied):
            await sb.execute_command(Command.shell("true", allow_network=True))
        with pytest.raises(SecurityViolation):
            await sb.execute_command(Command.shell("true", restrict_paths=["/workspace"]))


async def test_allow_write_false_runs_unprivileged() -> None:
    async with busybox() as sb:
        r = await sb.execute_command(Command.shell("touch /workspace/x", allow_write=False))
        assert not r.success and "Permission denied" in r.stderr
        r = await sb.execute_command("touch /workspace/x")
        assert r.success


async def test_leaving_stream_block_kills_the_command() -> None:
    async with busybox() as sb:
        async with sb.stream_command("echo go; sleep 1000") as proc:
            async for _chunk in proc:
                break
        ps = await sb.execute_command("ps -o args")
        assert "sleep 1000" not in ps.stdout


async def test_concurrent_commands_in_one_sandbox() -> None:
    async with busybox() as sb:
        results: dict[int, str] = {}

        async def one(i: int) -> None:
            results[i] = (await sb.execute_command(f"echo {i}")).stdout

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
        assert results == {i: f"{i}\n" for i in range(20)}


async def test_a_callback_that_raises_ends_the_call_and_the_command() -> None:
    def explode(_data: bytes) -> None:
        raise LookupError("callback failed")

    async def feed() -> AsyncIterator[bytes]:
        yield b"x\n"
        raise KeyError("stdin source failed")

    async with busybox() as sb:
        with anyio.fail_after(10), pytest.raises(LookupError, match="callback failed"):
            await sb.execute_command("echo go; sleep 1001", on_stdout=explode)
        with anyio.fail_after(10), pytest.raises(KeyError, match="stdin source failed"):
            await sb.execute_command(Command.shell("cat; sleep 1002", stdin=feed()))
        # Killed by the sweep; a loaded host may take a moment to reap them.
        with anyio.move_on_after(10):
            while True:
                ps = await sb.execute_command("ps -o args")
                if "sleep 100" not in ps.stdout:
                    break
                await anyio.sleep(0.2)
        assert "sleep 100" not in ps.stdout, ps.stdout


async def test_kill_takes_any_spelling_of_a_signal_and_refuses_nonsense() -> None:
    trap = "trap 'echo got-$0; exit 3' TERM INT; echo ready; while :; do sleep 0.05; done"
    async with busybox() as sb:
        for sig in (signal.SIGTERM, "TERM", "SIGINT", 15):
            async with sb.stream_command(["sh", "-c", trap, "it"]) as proc:
                async for _chunk in proc:
                    break
                await proc.kill(sig)
                r = await proc.wait()
            assert r.exit_code == 3 and "got-it" in r.stdout, (sig, r)
        async with sb.stream_command("echo ready; sleep 1003") as proc:
            async for _chunk in proc:
                break
            with pytest.raises(ValueError, match="NOPE"):
                await proc.kill("NOPE")
            await proc.kill()
            r = await proc.wait()
        assert r.signal == "SIGKILL" and not r.success


# -- stdin the command does not read ------------------------------------------------------------


async def test_unread_stdin_does_not_hold_up_the_result() -> None:
    """head reads 10 bytes and exits: the call returns then (it took 15-60 s while the
    engine's EOF waited behind the unsent stdin), and nothing is left running."""
    async with busybox() as sb:
        for size in (1 << 20, 50 << 20):
            start = time.monotonic()
            with anyio.fail_after(60):
                r = await sb.execute_command(
                    Command(executable="head", args=["-c", "10"], stdin=b"x" * size))
            assert time.monotonic() - start < 10, size
            assert r.success and r.stdout_bytes == b"x" * 10
        async with sb.stream_command(Command(executable="head", args=["-c", "10"],
                                             stdin=b"y" * (50 << 20))) as proc:
            start = time.monotonic()
            with anyio.fail_after(60):
                r = await proc.wait()
            assert time.monotonic() - start < 10
            assert r.stdout_bytes == b"y" * 10
        ps = await sb.execute_command("ps -o args")
        assert "head" not in ps.stdout, ps.stdout


async def test_timeout_is_a_timeout_whatever_stdin_does() -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"z" * (1 << 20)

    async with busybox() as sb:
        for stdin in (b"x" * (50 << 20), endless()):
            start = time.monotonic()
            with anyio.fail_after(60):
                r = await sb.execute_command(Command(executable="sleep", args=["1004"],
                                                     stdin=stdin, timeout=2))
            assert r.timed_out and not r.success, r
            assert time.monotonic() - start < 10
        ps = await sb.execute_command("ps -o args")
        assert "sleep 1004" not in ps.stdout, ps.stdout


async def test_write_to_an_exited_command_is_a_broken_pipe() -> None:
    async with busybox() as sb:
        async with sb.stream_command(["sleep", "3"]) as proc:
            start = time.monotonic()
            # 1 MiB is more than the pipe and the sockets hold: the write waits for sleep,
            # then fails because it exited (it was EngineUnavailable after 13 s).
            with anyio.fail_after(30), pytest.raises(StdinClosed, match="exited") as info:
                await proc.write_stdin(b"x" * (1 << 20))
            assert time.monotonic() - start < 10
            assert isinstance(info.value, BrokenPipeError)
            with pytest.raises(BrokenPipeError):
                await proc.write_stdin(b"again")
            r = await proc.wait()
        assert r.success
        async with sb.stream_command(["cat"]) as proc:
            await proc.close_stdin()
            with pytest.raises(StdinClosed, match="closed"):
                await proc.write_stdin(b"late")
            await proc.wait()


# -- commands that cannot start -------------------------------------------------------------------

ENGINE_TEXT = ("OCI runtime exec failed: exec failed: unable to start container process: "
               'exec: \\"x\\": executable file not found in $PATH: unknown\\r\\n')


async def run_both(sb: Sandbox, cmd: Command | list[str]) -> list[BaseException | str]:
    """Run `cmd` through execute_command and stream_command; each gives an error or stdout."""
    outcomes: list[BaseException | str] = []
    try:
        outcomes.append((await sb.execute_command(cmd)).stdout)
    except CommandExecutionFailed as exc:
        outcomes.append(exc)
    try:
        async with sb.stream_command(cmd) as proc:
            chunks = [chunk.data async for chunk in proc]
            assert (await proc.wait()).stdout_bytes == b"".join(chunks)
            outcomes.append(b"".join(chunks).decode())
    except CommandExecutionFailed as exc:
        outcomes.append(exc)
    return outcomes


async def test_every_start_failure_is_one_typed_error_naming_the_cause() -> None:
    big = "a" * 200_000
    cases: list[tuple[Command | list[str], type[BaseException], str]] = [
        (["no-such-tool"], CommandNotFound, "no-such-tool.*PATH"),
        (["/bin/no-such-tool"], CommandNotFound, "does not exist"),
        (["/workspace/plain"], CommandNotExecutable, "not executable"),
        (Command(executable="true", working_dir="/nonexistent"), CommandStartFailed,
         "working directory '/nonexistent' does not exist"),
        # Was exit 126 with the engine's message in stdout.
        (Command(executable="true", environment={"BIG": "b" * 10_000_000}), CommandStartFailed,
         r"'BIG' \(KEY=value\) is 10000004 bytes.*131071 bytes"),
        # Was exit 1 with runc's "argument list too long" on stderr.
        (["echo", big], CommandStartFailed, r"argv\[1\] is 200000 bytes"),
        (Command(executable="true", environment={f"V{i}": "v" * 100_000 for i in range(25)}),
         CommandStartFailed, "arguments and environment take .* bytes"),
    ]
    async with busybox() as sb:
        await sb.write_file("plain", "echo hi\n", mode=0o644)
        for cmd, kind, pattern in cases:
            for outcome in await run_both(sb, cmd):
                assert isinstance(outcome, kind), (cmd, outcome)
                assert isinstance(outcome, CommandStartFailed)
                assert re.search(pattern, str(outcome)), (pattern, str(outcome))
        # (an unknown per-command user is refused by policy first: test_bad_input)
        for outcome in await run_both(sb, ["no-such-tool"]):
            assert isinstance(outcome, FileNotFoundError)
        for outcome in await run_both(sb, ["/workspace/plain"]):
            assert isinstance(outcome, PermissionError)
        # A program printing the engine's text is output, not a start failure: it has a Pid.
        fake = ["sh", "-c", f"printf '{ENGINE_TEXT}'; exit 126"]
        assert all(isinstance(o, str) and o.startswith("OCI runtime exec failed")
                   for o in await run_both(sb, fake))
        r = await sb.execute_command(fake)
        assert r.exit_code == 126 and r.process_id > 0


# -- memory of big outputs ----------------------------------------------------------------------

BIG_OUTPUT_SCRIPT = """
import anyio
from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) >> 10 for line in f if line.startswith("VmHWM:"))

async def main():
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        start = hwm()
        n = 100_000_000
        r = await sb.execute_command(f"head -c {n} /dev/urandom; head -c {n} /dev/urandom >&2")
        assert r.truncated and len(r.stdout_bytes) == len(r.stderr_bytes) == 16 << 20
        print(start, hwm())

anyio.run(main)
"""


async def test_the_output_cap_bounds_the_clients_memory() -> None:
    """100 MB + 100 MB of binary output under the 16 MiB cap: the client keeps the capped
    bytes (2 x 16 MiB) and no text until it is read. It peaked 440 MiB above the start."""
    proc = await anyio.run_process([sys.executable, "-c", BIG_OUTPUT_SCRIPT], check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    start, peak = map(int, proc.stdout.split())
    assert peak - start < 120, (start, peak)
