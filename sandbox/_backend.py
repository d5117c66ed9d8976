"""What the backend-neutral `Sandbox` hands a backend: frozen specs and the process handle.

`ProcessSpec` is the whole of a command as the policy in ``_policy`` decided it (argv,
environment, working directory, user, stdin, limits); a backend runs it as given and decides
nothing. `Process` is the live handle `Sandbox.stream_command` yields, whatever the backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Mapping
from typing import Protocol, runtime_checkable

import attrs

from ._models import CommandResult, OutputChunk

__all__ = ["Process", "ProcessSpec"]


def _argv(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class ProcessSpec:
    """One process to start in a sandbox, fully decided by the policy.

    Attributes:
        argv: Program and arguments, run without a shell.
        env: The complete environment of the process.
        workdir: Absolute working directory in the sandbox.
        user: ``"uid:gid"`` or a name to run as; "" for the sandbox's default.
        stdin: Bytes (or a stream of them) fed to stdin, then closed; None for no input.
        max_output_bytes: Output kept per stream; more is dropped and marked truncated.
        time_limit: Seconds before the process and all it started are killed; None: no limit.
        idle_timeout: Seconds without output before it is killed; None: no limit.
    """

    argv: tuple[str, ...] = attrs.field(converter=_argv)
    env: Mapping[str, str] = attrs.field(factory=dict)
    workdir: str = "/"
    user: str = ""
    stdin: bytes | AsyncIterable[bytes] | None = None
    max_output_bytes: int = 1 << 20
    time_limit: float | None = None
    idle_timeout: float | None = None


@runtime_checkable
class Process(Protocol):
    """A command running in the sandbox, as `Sandbox.stream_command` yields it.

    Iterate it for `OutputChunk` values as they come, write to its stdin, send it signals,
    and ``await wait()`` for its `CommandResult`. ``aclose()`` kills it if it still runs and
    releases what it holds; leaving the ``stream_command`` block does the same.
    """

    argv: tuple[str, ...]

    def __aiter__(self) -> AsyncIterator[OutputChunk]:
        """Yield output chunks in the order they arrived, until the command ends."""
        ...

    @property
    def running(self) -> bool:
        """True until the command has ended."""
        ...

    @property
    def result(self) -> CommandResult | None:
        """The result once the command has ended, else None."""
        ...

    async def write_stdin(self, data: bytes | str) -> None:
        """Write to the command's stdin (text is UTF-8 encoded)."""
        ...

    async def close_stdin(self) -> None:
        """Close the command's stdin, so it sees end of input."""
        ...

    async def kill(self, signal: int | str = "KILL") -> None:
        """Send ``signal`` to the command and everything it started."""
        ...

    async def wait(self) -> CommandResult:
        """Wait for the command to end and return its result."""
        ...

    async def aclose(self) -> None:
        """Kill the command if it still runs and drop output nobody read; idempotent."""
        ...
