"""The SDK's own helper commands in a process sandbox (file operations), each with a deadline.

Every backend's file operations (``sandbox._helper_files``) run POSIX tools in the sandbox
through a runner; this is that runner here, so files behave the same on both backends: the tools run
as the sandbox user, inside its mounts, and what they print is treated as hostile. A helper
gets ``HELPER_TIMEOUT`` seconds plus one per MiB it moved, since the tool it runs may have
been replaced by the code in the sandbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from .._backend import ProcessSpec
from .._deadline import HelperDeadline
from .._models import CommandResult
from ._exec import SandboxProcess

__all__ = ["HelperRunner", "helper_runner"]

HelperRunner = Callable[..., Coroutine[Any, Any, CommandResult]]
Opener = Callable[..., AbstractAsyncContextManager[SandboxProcess]]


def helper_runner(opener: Opener, what: str, *, rate: float | None = None,
                  max_time: float | None = None) -> HelperRunner:
    """A `sandbox._helper_files.Runner` over ``opener`` whose deadline error names ``what``."""
    async def run(argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
                  on_stdout: Callable[[bytes], object] | None = None,
                  user: str | None = None) -> CommandResult:
        deadline = HelperDeadline(rate=rate, max_time=max_time)
        with deadline.scope:
            spec = ProcessSpec(argv=argv, env={}, workdir="/", user=user or "",
                               stdin=deadline.counted_in(stdin),
                               max_output_bytes=(64 << 10) if on_stdout else 1 << 20)
            async with opener(spec, on_stdout=deadline.counted_out(on_stdout)) as proc:
                return await proc.wait()
        raise deadline.expired(what, argv)
    return run
