"""Inspect AI sandbox environment ``"sandbox-docker"``: Inspect's tools run in our sandbox.

Installed with ``pip install 'sandbox[inspect]'``; Inspect finds it through its ``inspect_ai``
entry point, so a task only names it:

    Task(dataset=..., solver=..., sandbox="sandbox-docker")
    Task(..., sandbox=("sandbox-docker", "sandbox.json"))  # a SandboxConfig as JSON

Each sample gets its own sandbox (the default `SandboxConfig`: no network, a non-root user,
limits) created in ``sample_init`` and removed in ``sample_cleanup``; ``task_cleanup`` removes
any a cancelled run left, and ``inspect sandbox cleanup sandbox-docker`` runs our `gc`.

The sandbox's policy holds under Inspect too: a per-command ``user="root"`` in a sandbox whose
user is not root raises Inspect's `SandboxUserUnsupportedError` (the sandbox was configured
without root), rather than running as root.
"""

from __future__ import annotations

import os
from typing import Any, Literal, overload

from .._extras import missing_extra

try:
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxConnection,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
        SandboxUnavailableError,
        SandboxUserUnsupportedError,
        sandboxenv,
    )
except ImportError as exc:
    raise missing_extra("inspect", "sandbox.integrations.inspect (Inspect AI)", exc) from exc

from .._errors import (
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    ConfigError,
    EngineUnavailable,
    SandboxNotRunning,
    SecurityViolation,
)
from .._gc import gc
from .._json import from_json
from .._models import Command, SandboxConfig
from .._paths import resolve
from .._sandbox import Sandbox

__all__ = ["NAME", "SandboxDockerEnvironment", "load_config"]

#: The name a Task gives as ``sandbox=``.
NAME = "sandbox-docker"


def load_config(config: SandboxEnvironmentConfigType | None) -> SandboxConfig:
    """The `SandboxConfig` an Inspect sandbox spec names: the default for None, else a JSON file.

    Raises:
        ConfigError: The config is not a path to a JSON `SandboxConfig` (the message says
            which file and what is wrong in it).
    """
    if config is None:
        return SandboxConfig()
    if not isinstance(config, str):
        raise ConfigError(
            f"the {NAME!r} sandbox takes a path to a JSON SandboxConfig, got "
            f"{type(config).__name__}", details=f"write ({NAME!r}, 'sandbox.json')")
    try:
        with open(config, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the {NAME!r} sandbox config {config!r}: "
                          f"{exc.strerror or exc}",
                          details=f"relative paths are read from {os.getcwd()!r}") from None
    try:
        return from_json(text, SandboxConfig)
    except ConfigError as exc:
        raise ConfigError(f"the {NAME!r} sandbox config {config!r} is not a valid "
                          f"SandboxConfig: {exc}") from None


@sandboxenv(name=NAME)
class SandboxDockerEnvironment(SandboxEnvironment):
    """One sample's sandbox, seen through Inspect's `SandboxEnvironment` interface."""

    #: Configs read by task_init (which Inspect runs in the task's directory), by spec string,
    #: so sample_init resolves a relative path the same way wherever it runs.
    _configs: dict[str, SandboxConfig] = {}  # noqa: RUF012 - shared by design
    #: Environments created and not yet cleaned up, for task_cleanup after an interruption.
    _live: set[SandboxDockerEnvironment] = set()  # noqa: RUF012 - shared by design

    def __init__(self, sandbox: Sandbox) -> None:
        super().__init__()
        self.sandbox = sandbox

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None
                        ) -> None:
        """Read the config once, in the task's directory, so a bad one fails the task early."""
        if isinstance(config, str):
            cls._configs[config] = load_config(config)

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        """Create and start this sample's sandbox (removed again if starting fails)."""
        cfg = cls._configs.get(config) if isinstance(config, str) else None
        sb = Sandbox(cfg or load_config(config))
        await sb.initialize()
        env = cls(sb)
        cls._live.add(env)
        return {"default": env}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool
                             ) -> None:
        """Remove the sample's sandboxes (our cleanup is shielded from cancellation)."""
        for env in environments.values():
            if isinstance(env, SandboxDockerEnvironment):
                await env.close()

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                           cleanup: bool) -> None:
        """Remove every sandbox a sample left (an interrupted run), unless told not to."""
        if cleanup:
            for env in list(cls._live):
                await env.close()
        if isinstance(config, str):
            cls._configs.pop(config, None)

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        """``inspect sandbox cleanup sandbox-docker``: our `gc`, which removes the sandboxes
        of owner processes that are gone (a live run's are kept; ``id`` is not needed)."""
        report = await gc()
        for item in report.removed:
            print(f"removed {item.kind} {item.name}: {item.reason}")
        for item in report.failed:
            print(f"could not remove {item.kind} {item.name}: {item.reason}")
        print(f"{NAME}: removed {len(report.removed)}, kept {len(report.kept)} (owners alive)")

    async def close(self) -> None:
        """Remove this sandbox; idempotent."""
        try:
            await self.sandbox.cleanup()
        finally:
            self._live.discard(self)

    # -- commands -------------------------------------------------------------------------------

    async def exec(
        self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
        env: dict[str, str] | None = None, user: str | None = None,
        timeout: int | None = None,  # noqa: ASYNC109 - Inspect's signature
        timeout_retry: bool = True, concurrency: bool = True,
    ) -> ExecResult[str]:
        """Run ``cmd`` (no shell) in the sandbox; see `SandboxEnvironment.exec`.

        A command the sandbox cannot find comes back as a failed result (exit 127), as a
        shell would say it, and one that cannot start for another reason (a user the image
        lacks) as exit 126; one it cannot execute raises `PermissionError`. Output beyond
        Inspect's limit raises `OutputLimitExceededError`, a timeout `TimeoutError`.
        ``timeout_retry`` is not needed: a local engine does not drop commands.
        """
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        command = Command.argv(
            cmd, stdin=input, working_dir=cwd or "", environment=env or {}, user=user or "",
            timeout=timeout or 0, max_output_bytes=limit)
        try:
            result = await self.sandbox.execute_command(command)
        except CommandNotFound as exc:
            return ExecResult(success=False, returncode=127, stdout="", stderr=f"{exc}\n")
        except CommandNotExecutable:
            raise  # a PermissionError, as Inspect asks
        except CommandStartFailed as exc:
            # e.g. a user the image does not define: failed as `docker exec` fails (126).
            return ExecResult(success=False, returncode=126, stdout="", stderr=f"{exc}\n")
        except SecurityViolation as exc:
            if user:  # the policy refused the user (the only refusal these commands can meet)
                raise SandboxUserUnsupportedError(str(exc)) from exc
            raise
        except (SandboxNotRunning, EngineUnavailable) as exc:
            raise SandboxUnavailableError(str(exc)) from exc
        if result.timed_out:
            raise TimeoutError(f"the command {cmd[:1]} timed out after {timeout} s")
        if result.truncated:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                                           truncated_output=result.stdout)
        return ExecResult(success=result.success, returncode=result.exit_code,
                          stdout=result.stdout, stderr=result.stderr)

    # -- files ----------------------------------------------------------------------------------

    async def write_file(self, file: str, contents: str | bytes) -> None:
        """Write a file (relative to the working directory), creating parent directories."""
        await self.sandbox.write_file(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        """Read a file; larger than Inspect's read limit raises `OutputLimitExceededError`.

        The size is checked before anything is read, and again after (the file may grow).
        Text is decoded as strict UTF-8 with newlines kept as they are.
        """
        limit = SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
        target = resolve(self.sandbox.get_working_directory(), file)
        info = await self.sandbox.list_files(target)
        if len(info) == 1 and info[0].path == target and info[0].size > limit:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
                                           truncated_output=None)
        data = await self.sandbox.read_file(file)
        if len(data) > limit:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
                                           truncated_output=None)
        return data.decode("utf-8") if text else data

    # -- connection -----------------------------------------------------------------------------

    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        """How to open a shell in this sandbox from the host."""
        info = await self.sandbox.get_info()
        as_user = f"--user {user} " if user else ""
        return SandboxConnection(type=NAME, container=info.name,
                                 command=f"docker exec -it {as_user}{info.name} sh")

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> Any:
        """Inspect's hook for dict configs; we take a JSON file path instead."""
        raise NotImplementedError(f"the {NAME!r} sandbox takes a path to a JSON SandboxConfig")
