"""The in-memory fake: scripted results and failures, recorded commands."""

from __future__ import annotations

import pytest

from sandbox import Command, CommandResult, SandboxFileNotFound, TimeoutExceeded
from sandbox.testing import FakeSandbox

pytestmark = pytest.mark.asyncio


async def test_scripted_results_first_match_wins_and_commands_recorded() -> None:
    fake = FakeSandbox()
    fake.on_command(r"^pytest", CommandResult(exit_code=1, stdout="1 failed\n"))
    fake.on_command(r"pytest|ls", CommandResult(exit_code=0, stdout="never for pytest\n"))
    fake.on_command(r"echo (\w+)", lambda c: CommandResult(stdout=c.args[1][5:] + "\n"))
    seen: list[bytes] = []
    async with fake:
        r = await fake.execute_command("pytest -q", on_stdout=seen.append)
        assert (r.exit_code, r.success, r.stdout, r.combined) == (1, False, "1 failed\n",
                                                                    "1 failed\n")
        assert (await fake.execute_command("echo hello")).stdout == "hello\n"
        assert (await fake.execute_command(["ls", "-l"])).success
        assert (await fake.execute_command(Command(executable="true"))).success
    assert seen == [b"1 failed\n"]
    assert [c.args for c in fake.commands][:2] == [("-c", "pytest -q"), ("-c", "echo hello")]


async def test_scripted_failures() -> None:
    fake = FakeSandbox()
    fake.on_command("slow", TimeoutExceeded("took too long"))
    fake.fail_next("read_file", SandboxFileNotFound("gone", path="/x"))
    async with fake:
        await fake.write_file("/x", b"1")
        with pytest.raises(SandboxFileNotFound):
            await fake.read_file("/x")
        assert await fake.read_file("/x") == b"1"
        with pytest.raises(TimeoutExceeded):
            await fake.execute_command("slow thing")


async def test_the_fake_shares_the_sandbox_policy_and_lifecycle_rules() -> None:
    from sandbox import NetworkAccessDenied, SandboxAlreadyInitialized, SecurityViolation

    fake = FakeSandbox()
    await fake.cleanup()  # before initialize: a no-op
    async with fake:
        with pytest.raises(SandboxAlreadyInitialized):
            await fake.initialize()
        with pytest.raises(NetworkAccessDenied):
            await fake.execute_command(Command(executable="wget", allow_network=True))
        with pytest.raises(SecurityViolation, match=r"uid 0 \(root\)"):
            await fake.execute_command(Command(executable="id", user="root"))
        with pytest.raises(FileNotFoundError):
            await fake.set_working_directory("/missing")
    assert fake.commands == []


async def test_the_fake_streams_a_process_handle() -> None:
    from sandbox import OutputChunk, Process, StdinClosed

    fake = FakeSandbox()
    fake.on_command("cat", CommandResult(exit_code=0, stdout="out", stderr="err"))
    async with fake:
        async with fake.stream_command("cat") as proc:
            handle: Process = proc  # the fake's handle is a Process to mypy, too
            assert isinstance(handle, Process) and proc.running and proc.result is None
            await proc.write_stdin("in")
            await proc.close_stdin()
            with pytest.raises(StdinClosed):
                await proc.write_stdin(b"more")
            assert [c async for c in proc] == [OutputChunk(stream="stdout", data=b"out"),
                                               OutputChunk(stream="stderr", data=b"err")]
            assert (await proc.wait()).stdout == "out" and proc.stdin == b"in"
        async with fake.stream_command("sleep 9") as proc:
            await proc.aclose()
            await proc.aclose()
            result = await proc.wait()
        assert (result.signal, result.exit_code, result.success) == ("SIGKILL", 137, False)
        async with fake.stream_command("sleep 9") as proc:
            pass
        assert proc.result is not None and proc.result.signal == "SIGKILL"
    assert len(fake.commands) == 3


async def test_sandbox_runs_over_the_in_memory_backend() -> None:
    from sandbox import ConfigError, Sandbox, SandboxConfig, SandboxStatus
    from sandbox.testing import FakeBackend

    seen: list[tuple[str, ...]] = []

    def respond(spec: object) -> CommandResult:
        from sandbox._backend import ProcessSpec

        assert isinstance(spec, ProcessSpec)
        seen.append(spec.argv)
        return CommandResult(exit_code=0, stdout=f"{spec.workdir} {spec.env['K']} {spec.user}")

    backend = FakeBackend(SandboxConfig(environment={"K": "v"}), respond=respond)
    async with Sandbox(backend.config, backend=backend) as sb:
        assert sb.backend is backend and sb.status is SandboxStatus.RUNNING
        await sb.write_file("sub/f", "x")
        await sb.set_working_directory("sub")
        result = await sb.execute_command(["ls", "-l"])
        assert result.stdout == "/workspace/sub v 1000:1000"
        assert backend.files["/workspace/sub/f"] == (b"x", 0o644)
    assert seen == [("ls", "-l")] and backend.lifecycle.status is SandboxStatus.DESTROYED
    with pytest.raises(ConfigError, match="option of the backend"):
        Sandbox(backend=FakeBackend(), on_sample=print)


async def test_the_registry_names_the_types_it_serves() -> None:
    from sandbox import SandboxConfig, SandboxInitFailed
    from sandbox._registry import BACKENDS, backend_for
    from sandbox.docker import DockerBackend

    assert isinstance(backend_for(SandboxConfig()), DockerBackend)
    with pytest.raises(SandboxInitFailed, match="unknown sandbox type 'nope'") as info:
        backend_for(SandboxConfig(type="nope"))
    assert all(kind in (info.value.details or "") for kind in BACKENDS)
