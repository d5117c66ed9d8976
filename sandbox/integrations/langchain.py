"""LangChain deep agents backend: `DeepAgentsSandbox`, a deepagents `BaseSandbox` on our sandbox.

Installed with ``pip install 'sandbox[langchain]'``:

    from deepagents import create_deep_agent
    from sandbox.integrations.langchain import DeepAgentsSandbox

    with DeepAgentsSandbox() as backend:          # the default SandboxConfig
        agent = create_deep_agent(model=..., backend=backend)
        agent.invoke({"messages": [("user", "run the tests")]})

The sandbox lives in its own event loop on a helper (daemon) thread, reached through an anyio
blocking portal, so the synchronous methods deepagents calls from anywhere block only their
caller, and the asynchronous ones await the portal's task from the caller's asyncio loop
without a thread (cancelling the caller cancels the command). ``close()`` or leaving the
``with`` block removes the sandbox; so does dropping the object, or the interpreter's exit.

deepagents' file tools are Python scripts run with ``python3`` in the sandbox, so the image
needs it (the default image has it). Agents also type ``python``: where the image has only
``python3``, the backend puts a ``python`` link to it first on the commands' PATH.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal

from .._extras import missing_extra

try:
    from deepagents.backends.protocol import (
        ExecuteResponse,
        FileDownloadResponse,
        FileOperationError,
        FileUploadResponse,
    )
    from deepagents.backends.sandbox import BaseSandbox
except ImportError as exc:
    raise missing_extra("langchain", "sandbox.integrations.langchain (deep agents)",
                        exc) from exc

from .._errors import (
    CommandStartFailed,
    FileOperationFailed,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPermissionDenied,
)
from .._models import Command, SandboxConfig, as_config
from .._sandbox import Sandbox

__all__ = ["DEFAULT_TIMEOUT", "DeepAgentsSandbox"]

T = TypeVar("T")

#: Seconds close() waits for the helper thread once its loop was told to stop.
_JOIN_TIMEOUT = 10.0

#: Seconds a command may run when neither the call nor the config gives a timeout (as
#: deepagents' own local shell backend).
DEFAULT_TIMEOUT = 120

#: Run once at start: where the image has python3 but no python, link one into a directory
#: of the sandbox user's and print that directory (to be put first on PATH).
_PYTHON_ALIAS = (
    'if ! command -v python >/dev/null 2>&1 && p=$(command -v python3); then '
    'd="${HOME:-/tmp}/.local/bin"; mkdir -p "$d" && ln -sf "$p" "$d/python" && '
    'printf "%s\\n%s" "$d" "$PATH"; fi'
)


def _start_portal() -> tuple[BlockingPortal, threading.Thread]:
    """An event loop in a daemon thread, and the portal that runs coroutines in it."""
    ready: concurrent.futures.Future[BlockingPortal] = concurrent.futures.Future()

    async def serve() -> None:
        async with BlockingPortal() as portal:
            ready.set_result(portal)
            await portal.sleep_until_stopped()

    def run() -> None:
        try:
            anyio.run(serve)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)

    thread = threading.Thread(target=run, name="DeepAgentsSandbox", daemon=True)
    thread.start()
    return ready.result(), thread


def _shutdown(portal: BlockingPortal, sandbox: Sandbox, thread: threading.Thread) -> None:
    """Remove the sandbox (shielded in the SDK), then stop the loop and its thread."""
    try:
        with contextlib.suppress(RuntimeError):  # the loop already stopped
            portal.call(sandbox.cleanup)
    finally:
        with contextlib.suppress(RuntimeError):
            portal.call(portal.stop)
        thread.join(_JOIN_TIMEOUT)


def _error(exc: FileOperationFailed) -> FileOperationError:
    """deepagents' code for why a file operation failed."""
    if isinstance(exc, SandboxFileNotFound):
        return "file_not_found"
    if isinstance(exc, SandboxPermissionDenied):
        return "permission_denied"
    if isinstance(exc, SandboxIsADirectory):
        return "is_directory"
    return "invalid_path"


class DeepAgentsSandbox(BaseSandbox):
    """A deepagents sandbox backend running every command and file operation in our sandbox.

    Args:
        config: The sandbox to create; by default `SandboxConfig()` (isolated, non-root).
        timeout: Seconds a command may run when the call gives none; by default the config's
            ``timeout``, else `DEFAULT_TIMEOUT`.

    Raises:
        SandboxError: The sandbox could not be created (nothing is left behind).
    """

    def __init__(self, config: SandboxConfig | None = None, *,
                 timeout: float | None = None) -> None:
        config = as_config(config)
        self._timeout = timeout or config.timeout.total_seconds() or DEFAULT_TIMEOUT
        self._sandbox = Sandbox(config)
        self._portal, thread = _start_portal()
        # close(), garbage collection or interpreter exit (whichever comes first) removes the
        # sandbox and stops the loop; the thread is a daemon, so a forgotten close() never
        # holds the interpreter open.
        self._close = weakref.finalize(self, _shutdown, self._portal, self._sandbox, thread)
        try:
            self._portal.call(self._start)
        except BaseException:
            self._close()
            raise

    async def _start(self) -> None:
        try:
            await self._sandbox.initialize()
            alias = await self._sandbox.execute_command(_PYTHON_ALIAS)
            if alias.success and "\n" in alias.stdout:
                directory, path = alias.stdout.split("\n", 1)
                self._sandbox.set_environment({"PATH": f"{directory}:{path}"})
        except BaseException:
            await self._sandbox.cleanup()
            raise

    @property
    def id(self) -> str:
        """The SDK's id of the sandbox."""
        return self._sandbox.id

    @property
    def sandbox(self) -> Sandbox:
        """The underlying sandbox; its methods must be awaited in the backend's own loop."""
        return self._sandbox

    # -- bridging: everything runs in the portal's loop ------------------------------------------

    def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        return self._portal.call(fn, *args)

    async def _acall(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        # The caller's loop awaits the portal's future; cancelling it cancels the task there.
        return await asyncio.wrap_future(self._portal.start_task_soon(fn, *args))

    # -- commands -------------------------------------------------------------------------------

    async def _execute(self, command: str, seconds: float | None) -> ExecuteResponse:
        limit = seconds or self._timeout
        try:
            result = await self._sandbox.execute_command(Command.shell(command, timeout=limit))
        except CommandStartFailed as exc:
            return ExecuteResponse(output=f"Error: {exc}", exit_code=126)
        if result.timed_out:
            return ExecuteResponse(
                output=f"{result.combined}\nError: Command timed out after {limit:g} seconds.",
                exit_code=124, truncated=result.truncated)
        return ExecuteResponse(output=result.combined, exit_code=result.exit_code,
                               truncated=result.truncated)

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run a shell command (``/bin/sh -c``); its output is stdout and stderr interleaved.

        A timeout comes back as exit code 124 with a note, as deepagents' own backends do.
        """
        return self._call(self._execute, command, timeout)

    async def aexecute(self, command: str, *,
                       timeout: int | None = None  # noqa: ASYNC109 - deepagents' signature
                       ) -> ExecuteResponse:
        """`execute`, awaited."""
        return await self._acall(self._execute, command, timeout)

    # -- files ----------------------------------------------------------------------------------

    async def _upload(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        out: list[FileUploadResponse] = []
        for path, content in files:
            if not path.startswith("/"):
                out.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                await self._sandbox.write_file(path, content)
            except FileOperationFailed as exc:
                out.append(FileUploadResponse(path=path, error=_error(exc)))
            else:
                out.append(FileUploadResponse(path=path, error=None))
        return out

    async def _download(self, paths: list[str]) -> list[FileDownloadResponse]:
        out: list[FileDownloadResponse] = []
        for path in paths:
            if not path.startswith("/"):
                out.append(FileDownloadResponse(path=path, content=None, error="invalid_path"))
                continue
            try:
                data = await self._sandbox.read_file(path)
            except FileOperationFailed as exc:
                out.append(FileDownloadResponse(path=path, content=None, error=_error(exc)))
            else:
                out.append(FileDownloadResponse(path=path, content=data, error=None))
        return out

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write files at absolute paths (parents created); a relative path is
        ``invalid_path``. Each file succeeds or fails on its own, in order."""
        return self._call(self._upload, files)

    async def aupload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """`upload_files`, awaited."""
        return await self._acall(self._upload, files)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read files at absolute paths; a relative path is ``invalid_path``. Each file
        succeeds or fails on its own, in order."""
        return self._call(self._download, paths)

    async def adownload_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """`download_files`, awaited."""
        return await self._acall(self._download, paths)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove the sandbox and stop the helper thread; idempotent."""
        self._close()

    def __enter__(self) -> DeepAgentsSandbox:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
