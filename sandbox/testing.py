"""An in-memory sandbox for unit-testing agent code without an engine.

`FakeSandbox` implements `ExecutionSandbox`: files, working directory and environment live in
memory, and commands answer from results you script. Nothing runs.

Example:
    fake = FakeSandbox()
    fake.on_command("pytest", CommandResult(exit_code=1, stdout="1 failed"))
    fake.fail_next("read_file", SandboxFileNotFound("gone", path="/x"))
    async with fake:
        result = await fake.execute_command("pytest -q")
    assert fake.commands[0].args == ("-c", "pytest -q")
"""

from __future__ import annotations

import contextlib
import posixpath
import re
import stat
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime

import attrs

from ._archive import check_limits
from ._audit import Auditor
from ._constants import DEFAULT_COPY_MAX_BYTES, DEFAULT_COPY_MAX_ENTRIES, DEFAULT_USER
from ._errors import (
    FileOperationFailed,
    SandboxAlreadyInitialized,
    SandboxError,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxNotRunning,
    StdinClosed,
)
from ._models import (
    Command,
    CommandResult,
    FileInfo,
    OutputChunk,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SandboxStatus,
    as_config,
)
from ._paths import parse_copy, resolve
from ._policy import merge_environment, plan_process
from ._protocol import CommandLike, OutputCallback, to_command
from ._signals import parse_signal, signal_name

__all__ = ["FakeProcess", "FakeSandbox"]

Responder = CommandResult | SandboxError | Callable[[Command], CommandResult]


class FakeProcess:
    """The fake's `Process`: replays a scripted result's output; nothing runs.

    What is written to its stdin is kept in `stdin`. `kill` before the end (or leaving the
    block early, or `aclose`) ends it as killed by that signal, like the real handle.
    """

    def __init__(self, argv: tuple[str, ...], result: CommandResult) -> None:
        self.argv = argv
        self.stdin = bytearray()
        self._scripted = result
        self._stdin_closed = False
        self._result: CommandResult | None = None

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[OutputChunk]:
        for stream, data in (("stdout", self._scripted.stdout_bytes
                              or self._scripted.stdout.encode()),
                             ("stderr", self._scripted.stderr_bytes
                              or self._scripted.stderr.encode())):
            if data and self._result is None:
                yield OutputChunk(stream=stream, data=data)  # type: ignore[arg-type]
        self._end(self._scripted)

    def _end(self, result: CommandResult) -> None:
        if self._result is None:
            self._result = result

    @property
    def running(self) -> bool:
        """True until the scripted command has ended (or was killed)."""
        return self._result is None

    @property
    def result(self) -> CommandResult | None:
        """The result once ended, else None."""
        return self._result

    async def write_stdin(self, data: bytes | str) -> None:
        """Keep ``data`` in `stdin`; raises `StdinClosed` after `close_stdin` or the end."""
        if self._stdin_closed or self._result is not None:
            raise StdinClosed("the command's stdin is closed")
        self.stdin += data.encode() if isinstance(data, str) else data

    async def close_stdin(self) -> None:
        """Close stdin; later writes raise `StdinClosed`."""
        self._stdin_closed = True

    async def kill(self, signal: int | str = "KILL") -> None:
        """End the command, if still running, as killed by ``signal``."""
        number = parse_signal(signal)
        self._end(attrs.evolve(self._scripted, exit_code=128 + number, success=False,
                               signal=signal_name(128 + number)))

    async def wait(self) -> CommandResult:
        """Return the result (the scripted one, unless killed first)."""
        self._end(self._scripted)
        assert self._result is not None
        return self._result

    async def aclose(self) -> None:
        """Kill the command if it has not ended; idempotent."""
        if self._result is None:
            await self.kill()


def _text(command: Command) -> str:
    """What a rule's pattern is matched against: the script of a shell command, else argv."""
    if command.executable == "/bin/sh" and command.args[:1] == ("-c",) and len(command.args) > 1:
        return command.args[1]
    return " ".join((command.executable, *command.args))


class FakeSandbox:
    """A scriptable, engine-free `ExecutionSandbox` (like the design's mock sandbox).

    Commands answer from rules added with `on_command` (first match wins, a regex searched in
    the shell script or the joined argv), else `default_result`. `fail_next(method, error)`
    makes the next call of a method raise. Every command run is kept in `commands`.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = as_config(config)
        self.status = SandboxStatus.CREATING
        self.commands: list[Command] = []
        self.files: dict[str, tuple[bytes, int]] = {}
        self.dirs: set[str] = {"/", self.config.working_dir}
        self.default_result = CommandResult(exit_code=0, success=True)
        self.usage = ResourceUsage()
        self._rules: list[tuple[re.Pattern[str], Responder]] = []
        self._failures: dict[str, list[SandboxError]] = {}
        self._cwd = self.config.working_dir
        self._env = dict(self.config.environment)
        self._initialized = False
        self._created_at: datetime | None = None

    # -- scripting ------------------------------------------------------------------------------

    def on_command(self, pattern: str, response: Responder) -> None:
        """Answer commands matching ``pattern`` with a result, an error, or a function."""
        self._rules.append((re.compile(pattern), response))

    def fail_next(self, method: str, error: SandboxError) -> None:
        """Make the next call of ``method`` (e.g. "read_file") raise ``error``."""
        self._failures.setdefault(method, []).append(error)

    def _check(self, method: str, *, running: bool = True) -> None:
        queued = self._failures.get(method)
        if queued:
            raise queued.pop(0)
        if running and self.status is not SandboxStatus.RUNNING:
            raise SandboxNotRunning(f"the sandbox is {self.status.value}")

    # -- lifecycle ------------------------------------------------------------------------------

    async def __aenter__(self) -> FakeSandbox:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.status is not SandboxStatus.DESTROYED:
            await self.cleanup()

    async def initialize(self, config: SandboxConfig | None = None) -> None:
        self._check("initialize", running=False)
        if self._initialized:
            raise SandboxAlreadyInitialized("this sandbox was already initialized; create a "
                                            "new FakeSandbox for another one")
        if config is not None:
            self.config = config = as_config(config)
            self._cwd = config.working_dir
            self._env = dict(config.environment)
            self.dirs.add(config.working_dir)
        self._initialized = True
        self._created_at = datetime.now(UTC)
        self.status = SandboxStatus.RUNNING

    async def cleanup(self) -> None:
        self._check("cleanup", running=False)
        if not self._initialized:
            return  # nothing was created, so there is nothing to remove
        self.status = SandboxStatus.DESTROYED

    # -- commands -------------------------------------------------------------------------------

    async def execute_command(
        self, cmd: CommandLike, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        self._check("execute_command")
        result = self._respond(to_command(cmd))
        for callback, text in ((on_stdout, result.stdout), (on_stderr, result.stderr)):
            if callback is not None and text:
                outcome = callback(text.encode())
                if hasattr(outcome, "__await__"):
                    await outcome
        return result

    def _respond(self, command: Command) -> CommandResult:
        """Check ``command`` against the policy, record it, and return its scripted result."""
        # The same policy as the real sandbox: what it refuses, the fake refuses.
        plan_process(command, config=self.config, user=self._user(), cwd=self._cwd,
                     env=self._env, audit=Auditor("fake", self.config.security))
        self.commands.append(command)
        response: Responder = self.default_result
        for pattern, candidate in self._rules:
            if pattern.search(_text(command)):
                response = candidate
                break
        if isinstance(response, SandboxError):
            raise response
        result = response(command) if callable(response) else response
        now = datetime.now(UTC)
        return attrs.evolve(result, start_time=result.start_time or now,
                            end_time=result.end_time or now,
                            success=result.exit_code == 0 and not result.timed_out,
                            combined=result.combined or result.stdout + result.stderr)

    @contextlib.asynccontextmanager
    async def stream_command(self, cmd: CommandLike) -> AsyncIterator[FakeProcess]:
        """Yield a `FakeProcess` replaying the scripted result; leaving kills it if unfinished."""
        self._check("stream_command")
        command = to_command(cmd)
        proc = FakeProcess((command.executable, *command.args), self._respond(command))
        try:
            yield proc
        finally:
            await proc.aclose()

    def _user(self) -> str:
        """The user commands run as: ``run_as_user`` (and group), else the default user."""
        user, group = self.config.security.run_as_user, self.config.security.run_as_group
        if not user:
            user, _, default_group = DEFAULT_USER.partition(":")
            group = group or default_group
        return f"{user}:{group or user}" if group or user.isdigit() else user

    # -- files ----------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        return resolve(self._cwd, path)

    async def write_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        self._check("write_file")
        full = self._path(path)
        if full in self.dirs:
            raise SandboxIsADirectory(f"write {full!r} failed: it is a directory", path=full)
        data = content.encode() if isinstance(content, str) else content
        self.files[full] = (data, mode)
        parent = posixpath.dirname(full)
        while parent not in self.dirs:
            self.dirs.add(parent)
            parent = posixpath.dirname(parent)

    async def read_file(self, path: str) -> bytes:
        self._check("read_file")
        full = self._path(path)
        if full in self.dirs:
            raise SandboxIsADirectory(f"read {full!r} failed: it is a directory", path=full)
        if full not in self.files:
            raise SandboxFileNotFound(f"read {full!r} failed: no such file or directory",
                                      path=full)
        return self.files[full][0]

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        self._check("list_files")
        full = self._path(path)
        now = datetime.now(UTC)
        if full in self.files:
            data, mode = self.files[full]
            return [self._info(full, len(data), stat.S_IFREG | mode, now)]
        if full not in self.dirs:
            raise SandboxFileNotFound(f"list {full!r} failed: no such file or directory",
                                      path=full)
        entries = [self._info(d, 0, stat.S_IFDIR | 0o755, now)
                   for d in sorted(self.dirs) if d != full and posixpath.dirname(d) == full]
        entries += [self._info(f, len(d), stat.S_IFREG | m, now)
                    for f, (d, m) in sorted(self.files.items()) if posixpath.dirname(f) == full]
        return entries

    @staticmethod
    def _info(path: str, size: int, mode: int, when: datetime) -> FileInfo:
        return FileInfo(name=posixpath.basename(path), path=path, size=size,
                        mode=stat.S_IMODE(mode), mod_time=when, is_dir=stat.S_ISDIR(mode),
                        owner="root", group="root", permissions=stat.filemode(mode))

    async def copy_files(
        self, source: str, dest: str, *, max_bytes: int = DEFAULT_COPY_MAX_BYTES,
        max_entries: int = DEFAULT_COPY_MAX_ENTRIES,
    ) -> None:
        """Record-only: the fake has no host side; scripted failures still apply."""
        check_limits(max_bytes, max_entries)
        self._check("copy_files")
        parse_copy(self._cwd, source, dest)

    # -- working directory and environment ---------------------------------------------------

    def get_working_directory(self) -> str:
        return self._cwd

    async def set_working_directory(self, path: str) -> None:
        self._check("set_working_directory")
        full = self._path(path)
        if full in self.files:
            raise FileOperationFailed(f"cannot change to {full!r}: it is not a directory",
                                      path=full)
        if full not in self.dirs:
            raise SandboxFileNotFound(f"cannot change to {full!r}: it does not exist",
                                      path=full)
        self._cwd = full

    def get_environment(self) -> dict[str, str]:
        return dict(self._env)

    def set_environment(self, env: Mapping[str, str | None]) -> None:
        """Merge ``env`` into the environment; a value of None removes the variable."""
        self._env = merge_environment(self._env, env)

    # -- info -----------------------------------------------------------------------------------

    async def get_resource_usage(self) -> ResourceUsage:
        self._check("get_resource_usage")
        return self.usage

    async def get_info(self) -> SandboxInfo:
        self._check("get_info", running=False)
        return SandboxInfo(id="fake", name="fake", type=self.config.type, status=self.status,
                           created_at=self._created_at, started_at=self._created_at,
                           image=self.config.image, config=self.config,
                           allocated_resources=self.config.resources,
                           labels=dict(self.config.labels),
                           annotations=dict(self.config.annotations))


