"""The user-facing Sandbox: picks a backend by ``config.type`` and delegates to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._constants import DEFAULT_COPY_MAX_BYTES, DEFAULT_COPY_MAX_ENTRIES
from ._errors import SandboxInitFailed
from ._models import CommandResult, FileInfo, ResourceUsage, SandboxConfig, SandboxInfo, as_config
from ._models import SandboxStatus as SandboxStatus
from ._protocol import CommandLike, OutputCallback

if TYPE_CHECKING:
    from .docker._exec import ExecProcess
    from .docker._gateway import DockerClient
    from .docker._sandbox import DockerSandbox

BACKENDS = ("docker",)


class Sandbox:
    """An isolated place to run commands, move files and watch resources.

    Example:
        async with Sandbox(SandboxConfig(image="sandbox-python:latest")) as sb:
            result = await sb.execute_command("python3 -c 'print(6 * 7)'")
            print(result.stdout)

    Args:
        config: What to create; the defaults describe an isolated sandbox in /workspace.
        docker: An aiodocker client to use (yours to close); by default one is opened to
            DOCKER_HOST or the default socket and closed at cleanup.
        on_pull_progress: Called with each progress record while an image is pulled.
        on_sample: Called with each resource-usage sample (a callback that raises is logged).
    """

    def __init__(
        self, config: SandboxConfig | None = None, *, docker: DockerClient | None = None,
        on_pull_progress: Callable[[Mapping[str, Any]], object] | None = None,
        on_sample: Callable[[ResourceUsage], object] | None = None,
    ) -> None:
        config = as_config(config)
        if config.type not in BACKENDS:
            raise SandboxInitFailed(
                f"unknown sandbox type {config.type!r}",
                details=f"available types: {', '.join(BACKENDS)}",
            )
        from .docker._sandbox import DockerSandbox

        self._impl: DockerSandbox = DockerSandbox(
            config, docker=docker, on_pull_progress=on_pull_progress, on_sample=on_sample
        )

    async def __aenter__(self) -> Sandbox:
        await self._impl.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._impl.status is not SandboxStatus.DESTROYED:
            await self._impl.cleanup()

    @property
    def id(self) -> str:
        """The SDK's id of this sandbox (also its container label)."""
        return self._impl.id

    @property
    def status(self) -> SandboxStatus:
        return self._impl.status

    @property
    def config(self) -> SandboxConfig:
        return self._impl.config

    @property
    def backend(self) -> DockerSandbox:
        """The backend object, for backend-specific needs (e.g. the container id)."""
        return self._impl

    async def initialize(self, config: SandboxConfig | None = None) -> None:
        """Create and start the sandbox (``async with`` does this for you)."""
        if config is not None and config.type not in BACKENDS:
            raise SandboxInitFailed(f"unknown sandbox type {config.type!r}",
                                    details=f"available types: {', '.join(BACKENDS)}")
        await self._impl.initialize(config)

    async def execute_command(
        self, cmd: CommandLike, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Run a command to its end; exit codes, signals and timeouts come back as results."""
        return await self._impl.execute_command(cmd, on_stdout=on_stdout, on_stderr=on_stderr)

    @contextlib.asynccontextmanager
    async def stream_command(self, cmd: CommandLike) -> AsyncIterator[ExecProcess]:
        """Start a command and yield its live handle (iterate it for output chunks)."""
        async with self._impl.stream_command(cmd) as proc:
            yield proc

    async def write_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        await self._impl.write_file(path, content, mode)

    async def read_file(self, path: str) -> bytes:
        return await self._impl.read_file(path)

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        return await self._impl.list_files(path)

    async def copy_files(
        self, source: str, dest: str, *, max_bytes: int = DEFAULT_COPY_MAX_BYTES,
        max_entries: int = DEFAULT_COPY_MAX_ENTRIES,
    ) -> None:
        await self._impl.copy_files(source, dest, max_bytes=max_bytes, max_entries=max_entries)

    def get_working_directory(self) -> str:
        return self._impl.get_working_directory()

    async def set_working_directory(self, path: str) -> None:
        await self._impl.set_working_directory(path)

    def get_environment(self) -> dict[str, str]:
        return self._impl.get_environment()

    def set_environment(self, env: Mapping[str, str]) -> None:
        self._impl.set_environment(env)

    async def get_resource_usage(self) -> ResourceUsage:
        return await self._impl.get_resource_usage()

    def usage_history(self) -> list[ResourceUsage]:
        """Resource samples kept so far (bounded), oldest first."""
        return self._impl.usage_history()

    async def get_info(self) -> SandboxInfo:
        return await self._impl.get_info()

    async def cleanup(self) -> None:
        """Remove the sandbox and all it created; shielded from cancellation, idempotent."""
        await self._impl.cleanup()
