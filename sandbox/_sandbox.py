"""The user-facing Sandbox: picks a backend by ``config.type`` and delegates to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from ._archive import check_limits
from ._backend import (
    Backend,
    Process,
    ProcessSpec,
    SupportsEgressStats,
    checkpoints_of,
)
from ._checkpoint import Checkpoint, create_checkpoint
from ._checkpoint import fork as fork_from
from ._constants import DEFAULT_COPY_MAX_BYTES, DEFAULT_COPY_MAX_ENTRIES
from ._egress_stats import EgressStats
from ._errors import (
    ConfigError,
    EngineUnavailable,
    FileOperationFailed,
    SandboxError,
    SandboxFileNotFound,
    SandboxInitFailed,
    SecurityViolation,
)
from ._lifecycle import Lifecycle
from ._models import (
    Command,
    CommandResult,
    FileInfo,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    as_config,
)
from ._models import SandboxStatus as SandboxStatus
from ._paths import parse_copy, resolve
from ._policy import merge_environment, plan_argv, plan_process
from ._protocol import CommandLike, OutputCallback, to_command
from ._provisions import Provisions, check_provisions, provision
from ._registry import backend_for, check_type
from ._session import Session, SessionHost, open_session
from ._shield import finish_despite_cancel

if TYPE_CHECKING:
    from mcp import ClientSession



#: The most read_file returns: a whole file past it is refused, and max_bytes is at most this.
MAX_READ_BYTES = 1 << 30


class Sandbox:
    """An isolated place to run commands, move files and watch resources.

    Example:
        async with Sandbox(SandboxConfig(image="sandbox-python:latest")) as sb:
            result = await sb.execute_command("python3 -c 'print(6 * 7)'")
            print(result.stdout)

    Args:
        config: What to create; the defaults describe an isolated sandbox in /workspace.
        backend: The engine to create it on, built with the config and its own options
            (``DockerBackend(config, docker=client, on_pull_progress=...)``, or
            `sandbox.testing.FakeBackend`); by default the backend that serves
            ``config.type`` (see `sandbox._registry`).
        on_sample: Called with each resource-usage sample (a callback that raises is logged);
            for the default backend only.
    """

    def __init__(
        self, config: SandboxConfig | None = None, *, backend: Backend | None = None,
        on_sample: Callable[[ResourceUsage], object] | None = None,
    ) -> None:
        if backend is not None:
            if on_sample is not None:
                raise ConfigError("on_sample is an option of the backend: give it to the "
                                  "backend's constructor, not with backend=")
            if config is not None and as_config(config) != backend.config:
                raise ConfigError("config differs from the backend's: give the config to the "
                                  "backend only")
            config = backend.config
            self._impl: Backend = backend
        config = as_config(config)
        if backend is None:
            self._impl = backend_for(config, on_sample=on_sample)
        # Owned here, not by the backend: every backend gets commands already decided, and
        # reports what happens to the sandbox through the lifecycle.
        self._life = Lifecycle()
        self._lock = anyio.Lock()
        self._cwd = config.working_dir
        self._env: dict[str, str] = dict(config.environment)
        self._provisions: Provisions | None = None
        self._cleanup_hooks: list[Callable[[], Awaitable[None]]] = []
        # Every user a command was planned to run as: a pool reuses no sandbox in which
        # anything ran as another user than the sandbox's (see `_reset`).
        self._command_users: set[str] = set()

    def after_cleanup(self, hook: Callable[[], Awaitable[None]]) -> None:
        """Run ``hook`` once this sandbox is removed (a fork's image release); its errors
        (`SandboxError`) are not cleanup's: what it leaves carries labels for gc."""
        self._cleanup_hooks.append(hook)

    async def __aenter__(self) -> Sandbox:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._life.status is not SandboxStatus.DESTROYED:
            await self.cleanup()

    @property
    def id(self) -> str:
        """The SDK's id of this sandbox (also its container label)."""
        return self._impl.id

    @property
    def status(self) -> SandboxStatus:
        """Where the sandbox is in its lifecycle (see `SandboxStatus`): STARTING until
        `initialize` has finished, RUNNING from then on."""
        return self._life.shown_status

    @property
    def config(self) -> SandboxConfig:
        """The configuration the sandbox was (or will be) created from."""
        return self._impl.config

    @property
    def backend(self) -> Backend:
        """The backend object, for backend-specific needs (e.g. the Docker container id):
        narrow it with ``isinstance`` (`DockerBackend`, a ``Supports*`` capability)."""
        return self._impl

    async def initialize(self, config: SandboxConfig | None = None) -> None:
        """Create and start the sandbox (``async with`` does this for you).

        On any failure everything made so far is removed before the error is raised.

        Raises:
            SandboxAlreadyInitialized: This object was initialized before; make a new one.
            SandboxInitFailed: The sandbox could not be created or started (the cause is
                chained); `EngineUnavailable` and `SecurityViolation` come through as such.
        """
        config = None if config is None else as_config(config)
        if config is not None:
            check_type(config.type)
        # Malformed tools or mcp_servers entries are refused before anything is made.
        servers = check_provisions(config or self._impl.config)
        async with self._lock:
            self._life.begin()
            try:
                await self._impl.create(self._life, config,
                                        environment=self._env if config is None else None)
                self._cwd, self._env = self._impl.working_dir, self._impl.environment()
                if self.config.tools or servers:
                    self._provisions = await provision(_Creating(self), servers,
                                                       self._open_service)
                # Only now other tasks' calls may use it: the last steps (ids, /etc/hosts,
                # repository, tools) are done (the backend said RUNNING before them).
                self._life.ready = True
            except BaseException as exc:
                error = await self._failed_start(exc)
                if error is exc:
                    raise
                raise error from exc

    async def _failed_start(self, exc: BaseException) -> BaseException:
        """Remove what a failed start made; return the error that says what went wrong."""
        self._life.fail(str(exc) if isinstance(exc, Exception) else type(exc).__name__)
        try:
            await finish_despite_cancel(self._impl.remove())
        except SandboxError as cleanup_exc:
            # The failure to start is the news; what was left behind is a footnote.
            exc.add_note(f"cleanup after the failure: {cleanup_exc}")
        if isinstance(exc, SecurityViolation):
            # The refusing setting leads the message: "security.x: why".
            self._impl.audit.refused(exc.message.split(":", 1)[0], "initialize", exc)
        if isinstance(exc, SandboxInitFailed | EngineUnavailable | SecurityViolation):
            self._life.reason = exc.message
            return exc
        name = self._impl.config.name or f"sandbox-{self.id}"
        if isinstance(exc, SandboxError | ConfigError):
            self._life.reason = str(exc)
            error = SandboxInitFailed(f"sandbox {name} could not be started",
                                      details=str(exc), cause=exc)
        elif isinstance(exc, Exception):
            error = SandboxInitFailed(f"sandbox {name} could not be started",
                                      details=f"{type(exc).__name__}: {exc}", cause=exc)
        else:
            return exc
        return error

    # -- commands: the policy decides, the backend runs ------------------------------------------

    def _plan(self, cmd: CommandLike) -> ProcessSpec:
        impl = self._impl
        spec = plan_argv(cmd, config=impl.config, user=impl.user, cwd=self._cwd,
                         env=self._env)
        if spec is None:
            spec = plan_process(to_command(cmd), config=impl.config, user=impl.user,
                                cwd=self._cwd, env=self._env, audit=impl.audit,
                                identity=impl.identity)
        self._command_users.add(spec.user)
        return spec

    def command_users(self) -> frozenset[str]:
        """Every user ("uid:gid" or a name) a command of this sandbox was started as,
        sessions and ``allow_write=False`` (nobody) included."""
        return frozenset(self._command_users)

    def _audit_command(self, spec: ProcessSpec, *, result: CommandResult | None = None,
                       error: BaseException | None = None) -> None:
        audit = self._impl.audit
        if audit.activity or audit.security:  # else it records nothing (the default policy)
            audit.command(spec.argv, user=spec.user, cwd=spec.workdir, env=spec.env,
                          result=result, error=error)

    async def execute_command(
        self, cmd: CommandLike, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Run a command to its end; exit codes, signals and timeouts come back as results."""
        self._life.require_ready()
        return await self._run_planned(cmd, on_stdout, on_stderr)

    async def _execute(self, cmd: CommandLike, on_stdout: OutputCallback | None = None,
                       on_stderr: OutputCallback | None = None) -> CommandResult:
        """`execute_command` as the create's own steps use it (before `Lifecycle.ready`)."""
        self._life.require_running()
        return await self._run_planned(cmd, on_stdout, on_stderr)

    async def _run_planned(self, cmd: CommandLike, on_stdout: OutputCallback | None,
                           on_stderr: OutputCallback | None) -> CommandResult:
        """Plan the command, run it to its end, audit what came of it."""
        spec = self._plan(cmd)
        try:
            result = await self._impl.run_process(spec, on_stdout=on_stdout, on_stderr=on_stderr)
        except Exception as exc:
            self._audit_command(spec, error=exc)
            raise
        self._audit_command(spec, result=result)
        return result

    @contextlib.asynccontextmanager
    async def stream_command(self, cmd: CommandLike, *,
                             tty: bool = False) -> AsyncIterator[Process]:
        """Start a command and yield its live `Process` handle (iterate it for output chunks).

        Leaving the block kills the command if it still runs, as ``await proc.aclose()`` does.
        With ``tty=True`` it runs on a pseudo-terminal, for interactive programs (a REPL, an
        editor, job control): all its output comes as stdout, with CRLF line ends, and
        ``await proc.resize(rows, cols)`` sets the terminal's size.

        Example:
            async with sb.stream_command("make test") as proc:
                async for chunk in proc:
                    print(chunk.stream, chunk.data)
                result = await proc.wait()
        """
        self._life.require_ready()
        spec = self._plan(cmd)
        if tty:
            spec = attrs.evolve(spec, tty=True)
        proc: Process | None = None
        try:
            async with self._impl.open_process(spec) as proc:
                yield proc
        except Exception as exc:
            # The block may fail after the command ended; then its result is the record.
            self._audit_command(spec, result=proc.result if proc else None, error=exc)
            raise
        self._audit_command(spec, result=proc.result)

    @contextlib.asynccontextmanager
    async def _open_service(self, cmd: Command) -> AsyncIterator[Process]:
        """`stream_command` for a process that serves for the sandbox's life (an MCP
        server): the config's default command timeout does not apply to it."""
        self._life.require_running()
        spec = attrs.evolve(self._plan(cmd), time_limit=None)
        async with self._impl.open_process(spec) as proc:
            self._audit_command(spec)
            yield proc

    def mcp_client(self, name: str, **session_options: Any) -> AbstractAsyncContextManager[
            ClientSession]:
        """Connect to the MCP server ``name`` of ``SandboxConfig.mcp_servers``, running in
        this sandbox; yield an initialized ``mcp.ClientSession`` over its stdin and stdout.

        One client at a time per server. Needs the ``mcp`` package (``sandbox[mcp]``);
        ``session_options`` go to ``ClientSession`` (e.g. ``read_timeout_seconds``).

        Raises:
            ConfigError: No server has that name.
            McpServerFailed: The server is not running (how it ended is in the message).
        """
        from ._mcp_client import open_client

        self._life.check_ready()
        if self._provisions is None:
            raise ConfigError(f"no MCP server named {name!r} in this sandbox",
                              details="SandboxConfig.mcp_servers names none, or the sandbox "
                              "was not initialized")
        return open_client(self._provisions.server(name), **session_options)

    def session(self, *, shell: str | None = None, restart: bool = True,
                usage: bool = False) -> AbstractAsyncContextManager[Session]:
        """Open a persistent shell: ``cd``, ``export`` and functions carry over between its
        commands, each costing a pipe write instead of an exec (see `Session`).

        Args:
            shell: The shell program (e.g. ``"bash"``); by default bash where the image has
                it, else ``/bin/sh``.
            restart: When the shell dies (``exit``, killed, OOM), start a fresh one for the
                next command (True), or make it raise `SessionClosed` (False).
            usage: Give each result the resource usage during its command, as
                ``execute_command`` does; it reads the container's cgroup before and after
                each command, several times the cost of a bare command.

        Example:
            async with sb.session() as sh:
                await sh.run("cd /tmp && export X=1")
                print((await sh.run("echo $PWD $X")).stdout)  # /tmp 1
        """
        return open_session(session_host(self), shell=shell, restart=restart, usage=usage)

    # -- files: paths are resolved here, the backend moves bytes ---------------------------------

    async def write_file(self, path: str, content: bytes | str, mode: int = 0o644) -> None:
        """Write a file (text is UTF-8 encoded), creating parent directories."""
        data = content.encode() if isinstance(content, str) else content
        target = resolve(self._cwd, path)
        with self._impl.audit.file_op("write", target, len(data)):
            self._life.check_ready()
            await self._impl.write_file(target, data, mode)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read a whole file (up to 1 GiB; use copy_files for larger ones), or with
        ``max_bytes`` only its first ``max_bytes`` bytes: a larger file is then no error, and
        no more than that is read inside the sandbox or held here (ask for one byte more to
        learn whether there was more)."""
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(
                max_bytes, int) or not 0 < max_bytes <= MAX_READ_BYTES):
            raise ConfigError(f"read_file: max_bytes must be a whole number of bytes from 1 "
                              f"to {MAX_READ_BYTES}, not {max_bytes!r}",
                              details="leave it out (None) to read the whole file")
        target = resolve(self._cwd, path)
        with self._impl.audit.file_op("read", target) as record:
            self._life.check_ready()
            data = await self._impl.read_file(target, max_bytes)
            record["bytes"] = len(data)
        return data

    async def list_files(self, path: str = ".") -> list[FileInfo]:
        """List a directory (or describe one file)."""
        target = resolve(self._cwd, path)
        with self._impl.audit.file_op("list", target):
            self._life.check_ready()
            return await self._impl.list_files(target)

    async def copy_files(
        self, source: str, dest: str, *, max_bytes: int = DEFAULT_COPY_MAX_BYTES,
        max_entries: int = DEFAULT_COPY_MAX_ENTRIES,
    ) -> None:
        """Copy a file or tree between host and sandbox; write the sandbox side `sandbox:/path`.

        Copies out follow the copy-out rules (README) and stop at `max_bytes` of file data or
        `max_entries` entries, leaving nothing at `dest`.
        """
        check_limits(max_bytes, max_entries)
        plan = parse_copy(self._cwd, source, dest)
        target = plan.sandbox_path
        if plan.into_sandbox:
            with self._impl.audit.file_op("copy_in", target) as record:
                record["source"] = source
                self._life.check_ready()
                await self._impl.copy_in(Path(plan.host_path), target)
        else:
            with self._impl.audit.file_op("copy_out", target) as record:
                record["dest"] = dest
                self._life.check_ready()
                await self._impl.copy_out(target, Path(plan.host_path), max_bytes=max_bytes,
                                          max_entries=max_entries)

    # -- working directory and environment: state of this object --------------------------------

    def get_working_directory(self) -> str:
        """The working directory of commands that do not set one."""
        return self._cwd

    async def set_working_directory(self, path: str) -> None:
        """Make later commands run in ``path``; it must be a directory in the sandbox.

        Raises:
            SandboxFileNotFound: Nothing is at ``path`` (also a `FileNotFoundError`).
            FileOperationFailed: Something other than a directory is there.
        """
        target = resolve(self._cwd, path)
        self._life.check_ready()
        kind = await self._impl.path_kind(target)
        if kind == "none":
            raise SandboxFileNotFound(f"cannot change to {target!r}: it does not exist",
                                      path=target)
        if kind != "dir":
            raise FileOperationFailed(f"cannot change to {target!r}: it is not a directory",
                                      path=target)
        self._cwd = target

    def get_environment(self) -> dict[str, str]:
        """A copy of the variables given to every command."""
        return dict(self._env)

    def set_environment(self, env: Mapping[str, str | None]) -> None:
        """Merge ``env`` into the environment of later commands; a value of None removes the
        variable."""
        self._env = merge_environment(self._env, env)

    async def get_resource_usage(self) -> ResourceUsage:
        """The latest resource-usage sample (one is taken now if none exists yet)."""
        self._life.require_ready()
        return await self._impl.get_resource_usage()

    def usage_history(self) -> list[ResourceUsage]:
        """Resource samples kept so far (bounded), oldest first."""
        return self._impl.usage_history()

    def egress_stats(self) -> EgressStats:
        """Counters of the sandbox's egress proxy: requests allowed, refused (per rule) and
        failed; ``enforced`` is False when the config names no hosts (or the backend has no
        proxy)."""
        if isinstance(self._impl, SupportsEgressStats):
            return self._impl.egress_stats()
        return EgressStats()

    async def get_info(self) -> SandboxInfo:
        """The sandbox's identity, state and allocated resources as the backend sees them,
        and the config's tools with their paths (`SandboxInfo.tools`)."""
        info = await self._impl.get_info()
        if not self._life.ready and info.status in (SandboxStatus.RUNNING,
                                                    SandboxStatus.PAUSED):
            info = attrs.evolve(info, status=SandboxStatus.STARTING)  # as `status` says
        return info if self._provisions is None else self._provisions.annotate(info)

    async def cleanup(self) -> None:
        """Remove the sandbox and all it created; shielded from cancellation, idempotent.

        Before `initialize` nothing exists, and it does nothing.
        """
        if not self._life.initialized:
            return  # nothing was created, so there is nothing to remove
        if self._impl.config.cleanup_delay.total_seconds() <= 0:
            # Said before the first await: background work the create started but that has
            # not run yet (cleanup right after create) stays unstarted.
            self._life.removing = True
        await finish_despite_cancel(self._cleanup())

    async def _cleanup(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._life.status is SandboxStatus.DESTROYED:
                    return
                delay = self._impl.config.cleanup_delay.total_seconds()
                if delay > 0:
                    await anyio.sleep(delay)
                self._life.advance(SandboxStatus.STOPPING)
                if self._provisions is not None:
                    await self._provisions.stop()  # MCP servers end before their sandbox
                await self._impl.remove()
                self._life.advance(SandboxStatus.DESTROYED)
                hooks, self._cleanup_hooks = self._cleanup_hooks, []
                for hook in hooks:
                    with contextlib.suppress(SandboxError):
                        await hook()

    # -- checkpoints and forks (see _checkpoint) ---------------------------------------------


    async def checkpoint(self, name: str, *, memory: bool = False) -> Checkpoint:
        """Keep the sandbox's filesystem as the local image ``sandbox-checkpoint:<name>``.

        The sandbox is frozen for the copy (a consistent instant) and runs on after; commands
        sent meanwhile fail. Start a sandbox from it with ``Sandbox(checkpoint.config)``.
        Memory and processes are not captured: ``memory=True`` raises `CheckpointFailed`.
        Nor are a bind-mounted repository, tmpfs mounts or volumes.

        Raises:
            ConfigError: ``name`` cannot name an image tag.
            CheckpointFailed: The name is taken, or the engine refused.
        """
        self._life.require_ready()
        checkpoints_of(self._impl)  # refused here, naming the backend, where it has none
        return await create_checkpoint(self, name, memory=memory)

    async def fork(self, n: int, *, name: str = "", keep: bool = False) -> list[Sandbox]:
        """Checkpoint this sandbox and start ``n`` new sandboxes from it, with its config.

        The new sandboxes are started and yours to clean up (``async with`` each, or
        ``cleanup()``); if one fails to start, the others are removed before the error is
        raised. The checkpoint (named ``name``, or ``<id>-fork-<random>``) holds this
        sandbox's files, so it goes with the last of them; if this process dies first,
        ``gc`` removes it once the process is gone. ``keep=True`` keeps it instead, listed
        by ``python -m sandbox checkpoints``, for ``gc`` to remove by age. Either way its
        labels never hold environment values (see `Checkpoint.withheld`).
        """
        self._life.require_ready()
        checkpoints_of(self._impl)  # refused here, naming the backend, where it has none
        return await fork_from(self, n, Sandbox, name=name, keep=keep)


def session_host(sb: Sandbox) -> SessionHost:
    """What a session of ``sb`` may use of it: its backend, its command plan, its working
    directory and its lifecycle check (and nothing else of its internals)."""
    return SessionHost(backend=sb._impl, plan=sb._plan,
                       working_directory=sb.get_working_directory,
                       require_running=sb._life.require_ready)


@attrs.frozen
class _Creating:
    """What the create's own provisioning (`provision`) uses of its sandbox: its config and
    commands, before the sandbox is the user's (`Lifecycle.ready`)."""

    sb: Sandbox

    @property
    def config(self) -> SandboxConfig:
        return self.sb.config

    async def execute_command(self, cmd: Command) -> CommandResult:
        return await self.sb._execute(cmd)
