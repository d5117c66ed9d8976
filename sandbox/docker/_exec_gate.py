"""Keeps a container's execs and the SDK's freezes (a checkpoint's, a kill's) apart.

An exec whose ``runc init`` is still joining the container when the engine freezes it for a
commit sleeps uninterruptibly in the frozen cgroup; the shim then blocks, the engine's unpause
never returns, and the container cannot even be inspected until someone thaws it by hand
(issue 26, item 9). So every exec of the SDK passes this gate: while a checkpoint holds it new
execs wait, and the checkpoint first waits until every exec already asked for has started
(seen running by the engine, or has produced output, or ended).

A kill from the host (`_host_kill`) freezes the container for a moment too, and runc refuses
to exec into a frozen container, so it closes the gate the same way.

The cost for an exec is a counter and a set entry: no extra engine call on the hot path.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio

from .._errors import SandboxError
from ._gateway import Engine, EngineNotFound

#: How long a checkpoint waits for execs already asked for to be seen started.
SETTLE_STARTS = 30.0


class ExecGate:
    """One per container: `enter`/`started`/`confirmed` around each exec, `closed` around a
    freeze (a checkpoint's commit, a kill from the host)."""

    def __init__(self) -> None:
        self._open: anyio.Event | None = None  # not None while a checkpoint holds the gate
        self._starting = 0  # execs between the gate and the engine's answer to start them
        self._quiet: anyio.Event | None = None  # set when _starting drops to 0
        self._unconfirmed: set[str] = set()  # started, not yet seen running

    @property
    def closed_now(self) -> bool:
        """Whether a checkpoint holds the gate."""
        return self._open is not None

    async def enter(self) -> None:
        """Wait while a checkpoint holds the gate, then count one exec as starting."""
        while self._open is not None:
            await self._open.wait()
        self._starting += 1

    def started(self, exec_id: str | None) -> None:
        """The engine answered the start (``exec_id``), or it failed (None)."""
        self._starting -= 1
        if exec_id:
            self._unconfirmed.add(exec_id)
        if self._starting == 0 and self._quiet is not None:
            self._quiet.set()

    def confirmed(self, exec_id: str) -> None:
        """The exec runs (it wrote output) or ended: a freeze can no longer catch it starting."""
        self._unconfirmed.discard(exec_id)

    async def wait_started(self, engine: Engine, exec_id: str, *,
                           settle: float = SETTLE_STARTS) -> None:
        """Until the engine shows ``exec_id`` started or ended, unless that is known already
        (at most ``settle`` seconds): a kill before then finds nothing, and the command
        starts after it."""
        if exec_id in self._unconfirmed:
            with anyio.move_on_after(settle):
                await wait_for_start(engine, exec_id)
                self._unconfirmed.discard(exec_id)

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """Keep checkpoints and kills from the host out for the block (the sweep exec)."""
        await self.enter()
        try:
            yield
        finally:
            self.started(None)

    @contextlib.asynccontextmanager
    async def closed(self, engine: Engine, *,
                     settle: float = SETTLE_STARTS) -> AsyncIterator[bool]:
        """Hold new execs for the block, once every exec already asked for has started;
        yields False if one did not within ``settle`` seconds (the caller decides)."""
        while self._open is not None:
            await self._open.wait()
        self._open = anyio.Event()
        try:
            with anyio.move_on_after(settle) as scope:
                while self._starting:
                    self._quiet = anyio.Event()
                    await self._quiet.wait()
                for exec_id in list(self._unconfirmed):
                    await wait_for_start(engine, exec_id)
                    self._unconfirmed.discard(exec_id)
            yield not scope.cancelled_caught
        finally:
            self._quiet = None
            opened, self._open = self._open, None
            opened.set()


async def wait_for_start(engine: Engine, exec_id: str) -> Mapping[str, Any] | None:
    """Until the engine reports the exec's process (``Pid``) or its end; its inspect then, or
    None when the exec is gone. Unbounded: callers set the patience."""
    pause = 0.005
    while True:
        try:
            info = await engine.inspect_exec(exec_id, deadline=10)
        except EngineNotFound:
            return None
        except SandboxError:
            await anyio.sleep(0.05)
            continue
        if info.get("Pid") or info.get("ExitCode") is not None:
            return info
        pause = min(pause * 2, 0.1)  # a start that never reached the engine never shows
        await anyio.sleep(pause)
