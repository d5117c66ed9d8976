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
