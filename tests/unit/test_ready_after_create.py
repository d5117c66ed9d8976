"""A sandbox is the user's only once initialize() has finished.

Backends say RUNNING when the container (pod, process) runs, before the last steps of their
create: the sandbox user's ids, /etc/hosts, the repository, the config's tools. A call from
another task in that window was let through (a command ran before /etc/hosts was written,
without the HOME the create was about to set); now it is refused as during the rest of the
create, and the status says STARTING until initialize() returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from sandbox import CommandResult, Sandbox, SandboxConfig, SandboxNotRunning, SandboxStatus
from sandbox._backend import ProcessSpec
from sandbox._lifecycle import Lifecycle
from sandbox.testing import FakeBackend

pytestmark = pytest.mark.asyncio


class LingeringCreate(FakeBackend):
    """Says RUNNING, then waits for `finish` before its create returns (a probe exec)."""

    def __init__(self, config: SandboxConfig | None = None) -> None:
        super().__init__(config, respond=self._answer)
        self.running = asyncio.Event()
        self.finish = asyncio.Event()
        self.commands: list[ProcessSpec] = []
        self.commands_during_create = 0

    def _answer(self, spec: ProcessSpec) -> CommandResult:
        self.commands.append(spec)
        # The tools check (`find_executables`) asks where ``sh`` is: one line per name.
        return CommandResult(exit_code=0, success=True, stdout="/bin/sh\n")

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        await super().create(lifecycle, config, environment=environment)
        self.running.set()
        await self.finish.wait()
        self.commands_during_create = len(self.commands)


async def test_calls_from_another_task_are_refused_until_initialize_returns() -> None:
    backend = LingeringCreate(SandboxConfig(tools=["sh"]))
    sb = Sandbox(backend=backend)
    init = asyncio.ensure_future(sb.initialize())
    await backend.running.wait()
    assert backend.lifecycle.status is SandboxStatus.RUNNING  # the backend's own view
    assert sb.status is SandboxStatus.STARTING
    assert (await sb.get_info()).status is SandboxStatus.STARTING
    not_yet = "the sandbox is starting: initialize\\(\\) has not finished"
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.execute_command("true")
    with pytest.raises(SandboxNotRunning, match=not_yet):
        async with sb.stream_command("true"):
            pass
    with pytest.raises(SandboxNotRunning, match=not_yet):
        async with sb.session():
            pass
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.write_file("f", "x")
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.read_file("/bin/sh")
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.list_files("/")
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.set_working_directory("/")
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.get_resource_usage()
    with pytest.raises(SandboxNotRunning, match=not_yet):
        await sb.fork(1)
    assert backend.commands == [] and "/workspace/f" not in backend.files
    backend.finish.set()
    await init
    # The create's own step after the backend's (the tools check) ran its command.
    assert backend.commands_during_create == 0 and len(backend.commands) == 1
    assert sb.status is SandboxStatus.RUNNING
    assert (await sb.execute_command("true")).exit_code == 0
    await sb.cleanup()
    assert sb.status is SandboxStatus.DESTROYED


async def test_a_create_that_fails_after_running_says_failed_not_starting() -> None:
    class FailsLate(FakeBackend):
        async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                         environment: Mapping[str, str] | None = None) -> None:
            await super().create(lifecycle, config, environment=environment)
            raise RuntimeError("the probe failed")

    sb = Sandbox(backend=FailsLate())
    with pytest.raises(Exception, match="could not be started"):
        await sb.initialize()
    assert sb.status is SandboxStatus.FAILED
    with pytest.raises(SandboxNotRunning, match="failed"):
        await sb.execute_command("true")
