"""The SDK's own helper commands in a sandbox (file operations, set-up), each with a deadline.

A helper is an exec like any command, but the SDK runs it: it gets no user environment (as
root not even the image's loader variables, and only the system's PATH: `_root_env`), runs
from ``/``, and is killed with everything it started when it stalls, since the tool it runs
(``tar``, ``stat``, ``sh``) may have been replaced by the code in the sandbox.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractContextManager
from typing import Any

from .._backend import ProcessSpec
from .._deadline import HelperDeadline
from .._models import CommandResult
from ._exec import ExecProcess, open_exec
from ._exec_gate import ExecGate
from ._gateway import Engine
from ._root_env import RootEnv

__all__ = ["HelperRunner", "Helpers"]

#: Runs one helper: argv, plus stdin, a stdout consumer and a user; returns its result.
HelperRunner = Callable[..., Coroutine[Any, Any, CommandResult]]


class Helpers:
    """Runs helper commands in one container, as the sandbox user unless told otherwise."""

    def __init__(self, engine: Engine, container_id: str, *, user: str,
                 ready: Callable[[], object],
                 tracked: Callable[[ExecProcess], AbstractContextManager[ExecProcess]],
                 gate: ExecGate | None = None, root_env: RootEnv | None = None) -> None:
        self._engine, self._container_id, self._user = engine, container_id, user
        self._root_env = root_env or RootEnv(sandbox_user=user)
        self._ready, self._tracked = ready, tracked
        self._gate = gate or ExecGate()

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
        on_stdout: Callable[[bytes], object] | None = None, user: str | None = None,
        what: str = "a helper command", rate: float | None = None,
        max_time: float | None = None,
    ) -> CommandResult:
        """Run a helper the SDK needs (file operation, set-up) with a deadline.

        The helper gets ``HELPER_TIMEOUT`` seconds, plus one second per ``rate`` bytes it has
        moved (stdin written and stdout read; default ``HELPER_MIN_RATE``, 1 MiB/s), up to
        ``max_time`` in all (default ``HELPER_MAX_TIME``). A big copy thus has time in
        proportion to its size, while one that stalls or trickles (a tool replaced by ``sleep``
        or by a slow writer) is killed with everything it started and raises
        `TimeoutExceeded` naming ``what``.
        """
        self._ready()
        deadline = HelperDeadline(rate=rate, max_time=max_time)
        with deadline.scope:
            spec = self._root_env.spec(ProcessSpec(
                argv=argv, env={}, workdir="/", user=self._user if user is None else user,
                stdin=deadline.counted_in(stdin),
                # A caller taking stdout through on_stdout (read_file, tar) needs the result
                # only for error text; decoding 1 MiB of binary as UTF-8 cost ~25 ms per read.
                max_output_bytes=(64 << 10) if on_stdout is not None else 1 << 20,
            ))
            async with open_exec(self._engine, self._container_id, spec,
                                 attach_stdin=stdin is not None,
                                 on_stdout=deadline.counted_out(on_stdout),
                                 gate=self._gate) as proc:
                with self._tracked(proc):
                    return await proc.wait()
        raise deadline.expired(what, argv, explain=True)

    def named(self, what: str, *, rate: float | None = None,
              max_time: float | None = None) -> HelperRunner:
        """A runner for `_files` / `Workspace` whose deadline error names ``what``."""
        async def run(argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
                      on_stdout: Callable[[bytes], object] | None = None,
                      user: str | None = None) -> CommandResult:
            return await self.run(argv, stdin=stdin, on_stdout=on_stdout, user=user,
                                  what=what, rate=rate, max_time=max_time)
        return run
