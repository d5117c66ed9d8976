"""The `ExecutionSandbox` protocol: what every sandbox implementation offers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol, TypeAlias, runtime_checkable

from ._backend import OutputCallback as OutputCallback
from ._backend import Process
from ._constants import DEFAULT_COPY_MAX_BYTES, DEFAULT_COPY_MAX_ENTRIES
from ._errors import ConfigError
from ._models import Command, CommandResult, FileInfo, ResourceUsage, SandboxConfig, SandboxInfo

__all__ = ["CommandLike", "ExecutionSandbox", "OutputCallback"]

#: A command: a `Command`, a shell script string (run with ``/bin/sh -c``), or an argv sequence.
CommandLike: TypeAlias = Command | str | Sequence[str]


def to_command(cmd: CommandLike) -> Command:
    """Accept a Command, a shell string or an argv sequence; refuse an empty one."""
    if isinstance(cmd, Command):
        if not cmd.executable:
            raise ConfigError("Command.executable is empty: say what to run")
        return cmd
    if isinstance(cmd, str):
        if not cmd.strip():
            raise ConfigError("the command string is empty: say what to run")
        return Command.shell(cmd)
    return Command.argv(list(cmd))


@runtime_checkable
class ExecutionSandbox(Protocol):
    """An isolated environment that runs commands and holds files.

    Only operations that talk to the engine are async; the working directory and the
    environment are local state and are read and replaced synchronously.
    """

    async def initialize(self, config: SandboxConfig | None = None) -> None:
        """Create and start the sandbox, using `config` or the one given at construction.

        A second call raises `SandboxAlreadyInitialized`: one object, one sandbox.
        """
        ...

    async def execute_command(
        self,
        cmd: CommandLike,
        *,
        on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Run `cmd` to completion and collect its result, streaming output to the callbacks."""
        ...

    def stream_command(self, cmd: CommandLike, *,
                       tty: bool = False) -> AbstractAsyncContextManager[Process]:
        """Start `cmd` and yield its live `Process` handle; leaving the block kills it if it
        still runs (as ``await proc.aclose()`` does). ``tty=True`` runs it on a terminal."""
        ...

    async def copy_files(
        self, source: str, dest: str, *, max_bytes: int = DEFAULT_COPY_MAX_BYTES,
        max_entries: int = DEFAULT_COPY_MAX_ENTRIES,
    ) -> None:
        """Copy a file or directory between host and sandbox (the sandbox side `sandbox:/path`).

        A copy out of the sandbox writes at most `max_bytes` of file data and `max_entries`
        entries, and follows the copy-out rules (raising `UnsafeArchive` or
        `CopyLimitExceeded`, with nothing left at `dest`).
        """
        ...

    async def write_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        """Write `content` (text is UTF-8 encoded) to `path` in the sandbox."""
        ...

    async def read_file(self, path: str) -> bytes:
        """Return the contents of the file at `path` in the sandbox."""
        ...

    async def list_files(self, path: str) -> list[FileInfo]:
        """List the entries of the directory at `path` in the sandbox."""
        ...

    def get_working_directory(self) -> str:
        """Return the working directory used for commands that do not set one."""
        ...

    async def set_working_directory(self, path: str) -> None:
        """Use `path` as working directory after checking it is a directory in the sandbox.

        Raises `SandboxFileNotFound` (a `FileNotFoundError`) when it does not exist.
        """
        ...

    def get_environment(self) -> dict[str, str]:
        """Return a copy of the environment applied to every command."""
        ...

    def set_environment(self, env: Mapping[str, str | None]) -> None:
        """Merge `env` into the environment of every later command; None removes a variable."""
        ...

    async def get_resource_usage(self) -> ResourceUsage:
        """Return a current resource-usage sample of the sandbox."""
        ...

    async def cleanup(self) -> None:
        """Stop and remove the sandbox; safe to call more than once, and before `initialize`
        (then it does nothing)."""
        ...

    async def get_info(self) -> SandboxInfo:
        """Return the sandbox's identity and current state."""
        ...
