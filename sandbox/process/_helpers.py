"""The SDK's own helper commands in a process sandbox (file operations), each with a deadline.

The Docker backend's file operations (``docker._files``) run POSIX tools in the sandbox through
a runner; this is that runner here, so files behave the same on both backends: the tools run
as the sandbox user, inside its mounts, and what they print is treated as hostile. A helper
gets ``HELPER_TIMEOUT`` seconds plus one per MiB it moved, since the tool it runs may have
been replaced by the code in the sandbox.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio

from .. import _constants
from .._backend import ProcessSpec
from .._errors import TimeoutExceeded
from .._models import CommandResult
from ._exec import SandboxProcess

__all__ = ["HelperRunner", "helper_runner"]

HelperRunner = Callable[..., Coroutine[Any, Any, CommandResult]]
Opener = Callable[..., AbstractAsyncContextManager[SandboxProcess]]


def helper_runner(opener: Opener, what: str, *, rate: float | None = None,
                  max_time: float | None = None) -> HelperRunner:
    """A `docker._files.Runner` over ``opener`` whose deadline error names ``what``."""
    fixed = _constants.HELPER_TIMEOUT
    per_byte = 1.0 / (rate or _constants.HELPER_MIN_RATE)
    ceiling = max(fixed, max_time or _constants.HELPER_MAX_TIME)

    async def run(argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
                  on_stdout: Callable[[bytes], object] | None = None,
                  user: str | None = None) -> CommandResult:
        start = time.monotonic()
        moved = 0
        scope = anyio.CancelScope(deadline=start + fixed)

        def credit(n: int) -> None:
            nonlocal moved
            moved += n
            scope.deadline = start + min(fixed + moved * per_byte, ceiling)

        def counted_out(data: bytes) -> object:
            credit(len(data))
            return on_stdout(data) if on_stdout is not None else None

        async def counted_in(src: bytes | AsyncIterator[bytes]) -> AsyncIterator[bytes]:
            if isinstance(src, bytes):
                for off in range(0, len(src), 1 << 20):
                    credit(len(src[off:off + (1 << 20)]))
                    yield src[off:off + (1 << 20)]
            else:
                async for piece in src:
                    credit(len(piece))
                    yield piece

        with scope:
            spec = ProcessSpec(argv=argv, env={}, workdir="/", user=user or "",
                               stdin=None if stdin is None else counted_in(stdin),
                               max_output_bytes=(64 << 10) if on_stdout else 1 << 20)
            async with opener(spec, on_stdout=counted_out) as proc:
                return await proc.wait()
        raise TimeoutExceeded(
            f"{what} did not finish within {scope.deadline - start:.0f} s (has a tool in the "
            "sandbox been replaced?)",
            details=f"the helper {argv[0]!r} was killed after moving {moved} bytes")
    return run
