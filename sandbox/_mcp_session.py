"""The MCP server's persistent session tools: ``session_run``, ``session_poll``,
``session_write`` and ``session_kill``.

One `Session` per server, opened on the first ``session_run`` and closed with the server. A
command gets ``yield_after`` seconds: if it ended, the tool returns its exit code and output;
else a job id and what it printed so far, to come back to. Output handed to the model is
bounded (head and tail kept, the middle replaced by a note), as `SessionJob.output` is.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ._errors import ConfigError
from ._models import CommandResult
from ._session import DEFAULT_KEEP_CHARS, Session, SessionJob, head_tail

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from ._sandbox import Sandbox

__all__ = ["DEFAULT_YIELD_AFTER", "SessionTools", "add_session_tools"]

#: How long session_run and session_poll wait for the command when the client does not say.
DEFAULT_YIELD_AFTER = 10.0


class SessionTools:
    """The server's one session, opened lazily in a task of its own (a task group's scope
    must be left by the task that entered it), and its unfinished jobs by id."""

    def __init__(self, sb: Sandbox, tg: TaskGroup) -> None:
        self._sb = sb
        self._tg = tg
        self._session: Session | None = None
        self._opening = anyio.Lock()
        self._stop = anyio.Event()
        self._jobs: dict[str, SessionJob] = {}
        self._ids = itertools.count(1)
        #: session_run calls one at a time: a second would otherwise pass `busy` and then
        #: wait inside the session for the first one's job to end.
        self.starting = anyio.Lock()

    async def _hold(self, *, task_status: TaskStatus[Session]) -> None:
        async with self._sb.session() as session:
            task_status.started(session)
            await self._stop.wait()

    async def session(self) -> Session:
        async with self._opening:
            if self._session is None:
                self._session = await self._tg.start(self._hold)
            return self._session

    def stop(self) -> None:
        self._stop.set()

    def job(self, job_id: str) -> SessionJob:
        try:
            return self._jobs[job_id]
        except KeyError:
            known = ", ".join(self._jobs) or "none"
            raise ConfigError(f"no running session job {job_id!r} (running: {known})",
                              details="session_run returns a job id while its command "
                                      "runs; a finished job's id is gone") from None

    def report(self, outcome: CommandResult | SessionJob, job_id: str = "") -> dict[str, Any]:
        """What the model sees: the result of a finished command, or the job to come back
        to with the output since the last look."""
        if isinstance(outcome, SessionJob):
            if not job_id:
                job_id = str(next(self._ids))
                self._jobs[job_id] = outcome
            return {"status": "running", "job_id": job_id, "output": outcome.output}
        self._jobs.pop(job_id, None)
        return {"status": "exited", "exit_code": outcome.exit_code,
                "stdout": head_tail(str(outcome.stdout), DEFAULT_KEEP_CHARS),
                "stderr": head_tail(str(outcome.stderr), DEFAULT_KEEP_CHARS),
                "timed_out": outcome.timed_out, "error": outcome.error,
                "cwd": self._session.cwd if self._session else ""}

    def busy(self) -> None:
        """Refuse a new command while a job holds the session (it would wait for it)."""
        running = [job_id for job_id, job in self._jobs.items() if job.running]
        if running:
            raise ConfigError(f"session job {', '.join(running)} still runs",
                              details="session_poll it until it exits, or session_kill it, "
                                      "before the next session_run (or use run_command)")


@contextlib.asynccontextmanager
async def session_tools(sb: Sandbox) -> AsyncIterator[SessionTools]:
    """A `SessionTools` whose session (if one was opened) is closed on leaving."""
    async with anyio.create_task_group() as tg:
        tools = SessionTools(sb, tg)
        try:
            yield tools
        finally:
            tools.stop()


def add_session_tools(server: MCPServer[Any], tools: SessionTools,
                      reported: Callable[[], AbstractContextManager[None]]) -> None:
    """Register the session tools on ``server``; ``reported`` turns SDK errors into tool
    errors."""

    def check_wait(yield_after: float) -> None:
        if not yield_after >= 0:
            raise ConfigError(f"yield_after must be a number of seconds >= 0, "
                              f"not {yield_after!r}")

    @server.tool()
    async def session_run(command: str,
                          yield_after: float = DEFAULT_YIELD_AFTER) -> dict[str, Any]:
        """Run a shell command in the persistent session (cd, export and functions carry
        over between calls). Waits up to `yield_after` seconds: if it ended, returns
        status "exited" with exit_code, stdout and stderr; else status "running" with a
        job_id and the output so far: use session_poll, session_write or session_kill."""
        with reported():
            check_wait(yield_after)
            async with tools.starting:
                tools.busy()
                session = await tools.session()
                return tools.report(await session.start(command, yield_after=yield_after))

    @server.tool()
    async def session_poll(job_id: str,
                           yield_after: float = DEFAULT_YIELD_AFTER) -> dict[str, Any]:
        """Wait up to `yield_after` seconds more for a running session job: its result if it
        ended, else the output it printed since the last look."""
        with reported():
            check_wait(yield_after)
            job = tools.job(job_id)
            return tools.report(await job.poll(yield_after), job_id)

    @server.tool()
    async def session_write(job_id: str, text: str) -> str:
        """Send text to a running session job's stdin (add "\\n" to end a line)."""
        with reported():
            await tools.job(job_id).write(text)
            return f"wrote {len(text.encode())} bytes to job {job_id}"

    @server.tool()
    async def session_kill(job_id: str) -> dict[str, Any]:
        """Kill a running session job and everything it started; returns its result."""
        with reported():
            job = tools.job(job_id)
            return tools.report(await job.kill(), job_id)
