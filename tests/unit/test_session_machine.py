"""The session's state machine in milliseconds: a real `Session` over a scripted `FakeProcess`
playing the shell (it answers each wrapped command line with output and the end markers the
real wrapper prints), on the in-memory backend. Timeouts, kills, a shell that exits, a shell
stuck in a builtin, a callback that raises."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterable

import pytest

from sandbox import CommandResult, Sandbox, SandboxConfig, SessionClosed
from sandbox._backend import ProcessSpec
from sandbox._session_wire import MARK
from sandbox.testing import FakeBackend, FakeProcess, Step

pytestmark = pytest.mark.asyncio

_END = re.compile(rb"\\036SBX([0-9a-f]+):o([0-9a-f]+):")
_TRAP = re.compile(rb"\\036SBX([0-9a-f]+):q%d")


class FakeShell:
    """Answers the session's lines as a shell running the wrapper would, for a few commands:
    ``echo X``, ``false``, ``cd D``, ``exit N``, ``sleep`` (silent until the kill sweep),
    ``spin`` (a builtin loop: the sweep does not end it)."""

    def __init__(self) -> None:
        self.procs: list[FakeProcess] = []
        self.trap = b""
        self.cwd = b"/workspace"
        self.pending: tuple[bytes, bytes] | None = None  # a command the sweep may end
        self.sweeps = 0

    def stdin(self, data: bytes) -> Iterable[Step]:
        if trap := _TRAP.search(data):
            self.trap = trap.group(1)
        found = _END.search(data)
        if found is None:
            return []
        nonce, token = found.groups()
        ready = [Step.out(MARK + nonce + b":r\0", "stderr")] if b":r\\000" in data else []
        cmd = data.split(b"command eval '", 1)[1].split(b"\n'", 1)[0].decode()
        word, _, arg = cmd.partition(" ")
        if cmd.startswith("printf %s:%s"):  # the session's probe: a POSIX sh, no pid
            return [Step.out("sh::"), *self.end(nonce, token, 0)]
        if word == "echo":
            return [Step.out(arg + "\n"), *self.end(nonce, token, 0)]
        if word == "false":
            return self.end(nonce, token, 1)
        if word == "cd":
            self.cwd = arg.encode()
            return self.end(nonce, token, 0)
        if word == "exit":
            return [Step.out(MARK + self.trap + b":q" + arg.encode() + b"\0"),
                    Step.out(MARK + self.trap + b":Q\0", "stderr"), Step.exit(int(arg))]
        if word == "sleep":
            self.pending = (nonce, token)
        return ready  # sleep, spin: no answer until killed (or never)

    def end(self, nonce: bytes, token: bytes, status: int) -> list[Step]:
        said = b"o" + token if status == 0 else b"x%d" % status
        return [Step.out(MARK + nonce + b":" + said + b":" + self.cwd + b"\0"),
                Step.out(MARK + nonce + b":e\0", "stderr")]

    def respond(self, spec: ProcessSpec) -> CommandResult:
        """The backend's other commands: the session's kill sweep ends a pending ``sleep``."""
        if "sandbox-session-kill" in spec.argv:
            self.sweeps += 1
            if self.pending is not None:
                nonce, token = self.pending
                self.pending = None
                self.procs[-1].play(*self.end(nonce, token, 137))
        return CommandResult(exit_code=0)


class ShellBackend(FakeBackend):
    """The in-memory backend whose processes are `FakeShell` shells."""

    def __init__(self, shell: FakeShell) -> None:
        super().__init__(SandboxConfig(), respond=shell.respond)
        self.shell = shell

    @contextlib.asynccontextmanager
    async def open_process(self, spec: ProcessSpec) -> AsyncIterator[FakeProcess]:
        self.require_running()
        proc = FakeProcess(spec.argv, script=[Step.stdin_eof()], on_stdin=self.shell.stdin)
        self.shell.procs.append(proc)
        async with proc.lifetime(spec.stdin):
            yield proc


@contextlib.asynccontextmanager
async def sandbox() -> AsyncIterator[tuple[Sandbox, FakeShell]]:
    shell = FakeShell()
    backend = ShellBackend(shell)
    async with Sandbox(backend.config, backend=backend) as sb:
        yield sb, shell


async def test_commands_run_in_one_shell_and_its_directory_carries_over() -> None:
    async with sandbox() as (sb, shell), sb.session(shell="sh") as sh:
        first = await sh.run("echo hello")
        assert (first.stdout, first.exit_code, first.success) == ("hello\n", 0, True)
        assert (await sh.run("false")).exit_code == 1
        await sh.run("cd /tmp")
        assert sh.cwd == "/tmp" and sh.shell == "sh" and sh.alive
        assert first.metadata["shell"] == "1" and len(shell.procs) == 1
    assert shell.procs[0].signals == ["KILL"]  # closing the session kills its shell


async def test_a_timeout_kills_the_command_and_the_shell_lives_on() -> None:
    async with sandbox() as (sb, shell), sb.session(shell="sh") as sh:
        result = await sh.run("sleep 9", timeout=0.01)
        assert result.timed_out and not result.success and shell.sweeps == 1
        assert (result.exit_code, result.signal) == (137, "SIGKILL")
        assert result.error == "command timed out after 0.01 s"
        again = await sh.run("echo still")
        assert again.stdout == "still\n" and again.metadata["shell"] == "1"


async def test_an_idle_command_is_killed_at_its_idle_timeout() -> None:
    async with sandbox() as (sb, _), sb.session(shell="sh") as sh:
        result = await sh.run("sleep 9", idle_timeout=0.01)
        assert result.timed_out and "idle timeout" in result.error


async def test_a_shell_that_exits_ends_its_command_and_a_new_one_starts() -> None:
    async with sandbox() as (sb, shell), sb.session(shell="sh") as sh:
        result = await sh.run("exit 3")
        assert (result.exit_code, result.success) == (3, False)
        assert result.metadata["shell_ended"] == "true"
        assert "the session's shell exited with code 3" in result.error
        after = await sh.run("echo back")
        assert after.stdout == "back\n" and after.metadata["shell"] == "2"
        assert len(shell.procs) == 2


async def test_without_restart_a_lost_shell_closes_the_session() -> None:
    async with sandbox() as (sb, _), sb.session(shell="sh", restart=False) as sh:
        await sh.run("exit 0")
        with pytest.raises(SessionClosed, match="restart=False"):
            await sh.run("echo no")


async def test_a_command_stuck_in_the_shell_replaces_the_shell(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import sandbox._session as session_module

    monkeypatch.setattr(session_module, "KILL_GRACE", 0.01)
    async with sandbox() as (sb, shell), sb.session(shell="sh") as sh:
        result = await sh.run("spin", timeout=0.01)
        assert result.timed_out and result.signal == "SIGKILL"
        assert "the shell was replaced" in result.error
        assert (await sh.run("echo new")).metadata["shell"] == "2"
        assert shell.procs[0].signals == ["KILL"]


async def test_a_callback_that_raises_fails_the_run_and_the_session_goes_on() -> None:
    def boom(data: bytes) -> None:
        raise ValueError("callback failed")

    async with sandbox() as (sb, _), sb.session(shell="sh") as sh:
        with pytest.raises(ValueError, match="callback failed"):
            await sh.run("echo x", on_stdout=boom)
        assert (await sh.run("echo y")).stdout == "y\n"


async def test_a_started_job_can_be_polled_and_killed() -> None:
    async with sandbox() as (sb, _), sb.session(shell="sh") as sh:
        job = await sh.start("sleep 9", yield_after=0.01)
        assert not isinstance(job, CommandResult) and job.running
        result = await job.kill()
        assert result.signal == "SIGKILL" and "SessionJob.kill()" in result.error
        assert (await sh.run("echo after")).stdout == "after\n"
