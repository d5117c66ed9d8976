"""FakeSandbox.session(): agent code using a session is testable without an engine."""

from __future__ import annotations

import pytest

from sandbox import CommandResult, ConfigError, SandboxError, Session
from sandbox.testing import FakeSandbox

pytestmark = pytest.mark.asyncio


async def test_fake_session_answers_from_the_rules() -> None:
    fake = FakeSandbox()
    fake.on_command("pytest", CommandResult(exit_code=1, stdout="1 failed"))
    seen: list[bytes] = []
    async with fake, fake.session() as sh:
        assert isinstance(sh, Session) and sh.shell == "sh"
        r = await sh.run("pytest -q", timeout=5, on_stdout=seen.append)
        assert r.exit_code == 1 and r.stdout == "1 failed" and seen == [b"1 failed"]
        done = await sh.start("ls", yield_after=1)
        assert isinstance(done, CommandResult) and done.success
        with pytest.raises(ConfigError, match="non-empty"):
            await sh.run(" ")
    assert [c.args for c in fake.commands] == [("-c", "pytest -q"), ("-c", "ls")]


async def test_fake_session_failure_can_be_scripted() -> None:
    fake = FakeSandbox()
    fake.fail_next("session", SandboxError("no shell"))
    async with fake:
        with pytest.raises(SandboxError, match="no shell"):
            async with fake.session():
                pass
