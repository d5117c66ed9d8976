"""What the backend-neutral `Sandbox` hands a backend: frozen specs and the process handle.

`ProcessSpec` is the whole of a command as the policy in ``_policy`` decided it (argv,
environment, working directory, user, stdin, limits); a backend runs it as given and decides
nothing. `Process` is the live handle `Sandbox.stream_command` yields, whatever the backend.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, TypeAlias, runtime_checkable

import attrs

from ._audit import Auditor
from ._egress_stats import EgressStats
from ._errors import CheckpointFailed
from ._hostview import HostInspector
from ._ids import Identity
from ._lifecycle import Lifecycle
from ._models import (
    CommandResult,
    FileInfo,
    OutputChunk,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    slot_setters,
)

__all__ = [
    "CAPABILITIES",
    "Backend",
    "BackendFactory",
    "Capability",
    "CheckpointStore",
    "ImageStore",
    "Process",
    "ProcessSpec",
    "SupportsCheckpoints",
    "SupportsCommandFinalizer",
    "SupportsEgressStats",
    "SupportsFilesystemChanges",
    "SupportsHealth",
    "SupportsHostInspector",
    "SupportsKillMarked",
    "backend_name",
    "checkpoints_of",
    "plain_spec",
    "supports",
]

#: Called with each chunk of output as it arrives; may be a plain function or a coroutine.
OutputCallback: TypeAlias = Callable[[bytes], object] | Callable[[bytes], Awaitable[object]]


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
        tty: Run it on a pseudo-terminal (its output all comes as stdout, with CRLF line
            ends), for interactive programs; see `Process.resize`.
        sealed: A session's shell, whose channels must be the SDK's alone: no other
            process holds its stdin (so its input goes to it directly, never through a
            helper such as Kubernetes v4's stdin decoder, and it needs no end of input: it
            is only ever closed whole), and its stdout and stderr, which a child a command
            leaves holds, must not be reopened through ``/proc/<pid>/fd`` by other processes
            of the sandbox user, whatever mode they set: backends whose pipes that user
            owns give sockets (``open`` of one there is ENXIO, for anyone).
    """

    argv: tuple[str, ...] = attrs.field(converter=_argv)
    env: Mapping[str, str] = attrs.field(factory=dict)
    workdir: str = "/"
    user: str = ""
    stdin: bytes | AsyncIterable[bytes] | None = None
    max_output_bytes: int = 1 << 20
    time_limit: float | None = None
    idle_timeout: float | None = None
    tty: bool = False
    sealed: bool = False


_SPEC_SETTERS = slot_setters(ProcessSpec, (
    "argv", "env", "workdir", "user", "stdin", "max_output_bytes", "time_limit",
    "idle_timeout", "tty", "sealed"), "plain_spec")


def plain_spec(argv: tuple[str, ...], env: dict[str, str], workdir: str, user: str,
               max_output_bytes: int, time_limit: float | None) -> ProcessSpec:
    """A `ProcessSpec` with no stdin, idle timeout or terminal, built field by field
    through its slots (see `_models.slot_setters`): the policy's plan of a plain argv
    (`_policy.plan_argv`), once per command, whose values are its own and of their types
    already (``argv`` a tuple); attrs' generated ``__init__`` cost more than the plan."""
    spec = object.__new__(ProcessSpec)
    s_argv, s_env, s_workdir, s_user, s_stdin, s_max, s_limit, s_idle, s_tty, s_seal = \
        _SPEC_SETTERS
    s_argv(spec, argv)
    s_env(spec, env)
    s_workdir(spec, workdir)
    s_user(spec, user)
    s_stdin(spec, None)
    s_max(spec, max_output_bytes)
    s_limit(spec, time_limit)
    s_idle(spec, None)
    s_tty(spec, False)
    s_seal(spec, False)
    return spec


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

    async def resize(self, rows: int, cols: int) -> None:
        """Set the size of the command's terminal (``tty=True``); ignored without one."""
        ...

    async def wait(self) -> CommandResult:
        """Wait for the command to end and return its result."""
        ...

    async def aclose(self) -> None:
        """Kill the command if it still runs and drop output nobody read; idempotent."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What `Sandbox` needs from an engine: a handful of primitives, no policy.

    `Sandbox` owns command policy (``_policy``), the working directory and environment, path
    resolution and ``copy_files`` arguments (``_paths``), and the audit of commands and file
    operations, and the lifecycle state machine (`Lifecycle`): a backend gets only decided
    `ProcessSpec` values and absolute paths, and reports what only the engine knows (the
    sandbox stopped, was removed, was paused) through the `Lifecycle` it is given at create.

    What only some backends can do is a capability of its own (`SupportsHealth`,
    `SupportsCheckpoints`, ...): `Sandbox` asks ``isinstance(backend, SupportsX)`` and answers
    a missing one with a typed refusal naming the backend (`CAPABILITIES` lists them all).
    """

    #: The SDK's id of this sandbox.
    id: str

    @property
    def config(self) -> SandboxConfig:
        """The configuration the sandbox was (or will be) created from."""
        ...

    @property
    def user(self) -> str:
        """The user commands run as ("uid:gid" or a name); "" before initialize."""
        ...

    @property
    def identity(self) -> Identity | None:
        """The user's real ids (and names at create), once known: what a per-command user
        is compared with; None before initialize or where the backend cannot tell."""
        ...

    @property
    def audit(self) -> Auditor:
        """Where this sandbox's audit events go."""
        ...

    @property
    def working_dir(self) -> str:
        """The working directory the set-up prepared."""
        ...

    def environment(self) -> dict[str, str]:
        """The environment as the set-up left it."""
        ...

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        """Create and start the sandbox, moving ``lifecycle`` to RUNNING.

        ``config`` replaces the backend's own; ``environment`` (what `Sandbox` holds) is where
        the set-up adds its variables (read them back from `environment`). On failure it
        raises, and `Sandbox` calls `remove` for what was made.
        """
        ...

    async def run_process(
        self, spec: ProcessSpec, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Run ``spec`` to its end and return its result."""
        ...

    def open_process(self, spec: ProcessSpec) -> AbstractAsyncContextManager[Process]:
        """Start ``spec`` and yield its live handle; leaving kills it if it still runs."""
        ...

    async def write_file(self, target: str, content: bytes, mode: int = 0o644) -> None:
        """Write a file at an absolute path, creating parent directories."""
        ...

    async def read_file(self, target: str, max_bytes: int | None = None) -> bytes:
        """Read a whole file at an absolute path, or (``max_bytes``) at most its first
        ``max_bytes`` bytes, reading no more than that inside the sandbox."""
        ...

    async def list_files(self, target: str) -> list[FileInfo]:
        """List a directory (or describe one file) at an absolute path."""
        ...

    async def copy_in(self, source: Path, target: str) -> None:
        """Copy a host file or tree into the sandbox."""
        ...

    async def copy_out(self, target: str, dest: Path, *, max_bytes: int,
                       max_entries: int) -> None:
        """Copy a sandbox file or tree to the host, by the copy-out rules."""
        ...

    async def path_kind(self, target: str) -> str:
        """What is at an absolute path: "dir", "none", or another kind."""
        ...

    async def get_resource_usage(self) -> ResourceUsage:
        """A current resource-usage sample."""
        ...

    def usage_history(self) -> list[ResourceUsage]:
        """The samples kept so far, oldest first."""
        ...

    async def get_info(self) -> SandboxInfo:
        """The sandbox's identity and state."""
        ...

    async def remove(self) -> None:
        """Remove the sandbox and all it made, even after a partial create; idempotent.

        `Sandbox` calls it shielded from cancellation and moves the lifecycle around it.
        """
        ...


class BackendFactory(Protocol):
    """How the registry builds a backend: ``cls(config, on_sample=...)``; its own options
    stay on its constructor."""

    def __call__(self, config: SandboxConfig | None = None, *,
                 on_sample: Callable[[ResourceUsage], object] | None = None) -> Backend: ...


class CheckpointStore(Protocol):
    """Where checkpoints are kept as images (the Docker engine's image store): what
    `sandbox.checkpoints`, `sandbox.remove_checkpoint` and a fork's release ask of it.
    ``docker`` is a client to use (the caller's), or None to open one."""

    async def list_entries(self, docker: Any) -> list[Mapping[str, Any]]:
        """The image list entries labelled as checkpoints."""
        ...

    async def remove_entry(self, ref: str, docker: Any) -> None:
        """Remove one checkpoint image; `CheckpointFailed` if it is none or in use."""
        ...

    async def remove_if_same(self, image: str, image_id: str) -> None:
        """Remove ``image`` if it is still the image ``image_id``."""
        ...


class ImageStore(Protocol):
    """Local images another backend can build a root filesystem from (the Docker engine's
    store; the process backend exports from it). ``docker`` is a client to use, or None to
    open one. No engine answering: `EngineUnavailable`."""

    async def inspect(self, name: str) -> Mapping[str, Any] | None:
        """The engine's inspect of image ``name`` ("Id", "Config"...), None if it lacks it."""
        ...

    async def export(self, name: str, write: Callable[[bytes], object]) -> None:
        """Stream the filesystem of image ``name`` as a tar archive to ``write``."""
        ...

    async def image_ids(self, docker: Any) -> set[str]:
        """The ids (``sha256:...``) of every image the engine has."""
        ...


# -- capabilities: what some backends can do ---------------------------------------------------


@runtime_checkable
class SupportsHealth(Protocol):
    """The backend can ask its engine (not cached state) whether commands can run now."""

    async def health(self) -> str:
        """"" if commands can run now, else why not. Cheap: a pool calls it on every
        acquire."""
        ...


@runtime_checkable
class SupportsFilesystemChanges(Protocol):
    """The backend keeps an image to compare the sandbox's filesystem with."""

    async def filesystem_changes(self) -> list[tuple[str, str]]:
        """(kind, path) for each path of the sandbox's own filesystem that differs from its
        image: "A" added, "C" changed, "D" deleted; mounts are not part of it."""
        ...


@runtime_checkable
class SupportsCheckpoints(Protocol):
    """The backend can keep a sandbox's filesystem as an image (checkpoints and forks)."""

    async def checkpoint(self, image: str, labels: Mapping[str, str], *,
                         memory: bool = False) -> str:
        """Capture the sandbox as the local image ``image`` with ``labels``; its id.

        Consistent (the sandbox is frozen for the copy); ``memory`` asks for processes and
        memory too, which a backend that cannot do it refuses with `CheckpointFailed`.
        """
        ...


@runtime_checkable
class SupportsHostInspector(Protocol):
    """The backend can show the sandbox from outside (what a pool's reset verifies with)."""

    async def host_inspector(self) -> HostInspector | str:
        """The sandbox seen from the host, or why it cannot be seen so."""
        ...


@runtime_checkable
class SupportsEgressStats(Protocol):
    """The backend runs an egress proxy and counts what it decided."""

    def egress_stats(self) -> EgressStats:
        """The proxy's counters so far (``enforced=False`` without a proxy)."""
        ...


@runtime_checkable
class SupportsKillMarked(Protocol):
    """The backend can kill a session's command from outside the sandbox."""

    async def kill_marked(self, entry: str, shell: int = 0, since: int = 0,
                          spare: tuple[str, ...] = ()) -> bool | None:
        """SIGKILL every process whose environment holds ``entry`` and all below them, the
        subshells between those and the session's ``shell`` (its pid in the sandbox, 0:
        unknown), and the shell's children that started at or after ``since`` (the boot-clock
        tick the command was sent, 0: unknown), but for one started in that very tick with a
        process holding one of ``spare`` (the markers of commands that ended in it) at or
        below it (`._below_shell`): True when none is left, None where it cannot (the session
        then sweeps from inside)."""
        ...


@runtime_checkable
class SupportsCommandFinalizer(Protocol):
    """The backend completes a session's results (resource usage, OOM) as its own."""

    async def command_finalizer(self) -> Callable[[CommandResult], Awaitable[CommandResult]]:
        """A function that completes one command's result."""
        ...


@attrs.frozen
class Capability:
    """One optional capability: its name in the README's backend table, its protocol, and
    what `Sandbox` (or a pool, or a session) does for a backend without it."""

    name: str
    protocol: type
    without: str


#: Every optional capability, in the order of the README's backend table.
CAPABILITIES: tuple[Capability, ...] = (
    Capability("health (asked on every pool acquire)", SupportsHealth,
               "judged by its lifecycle state alone"),
    Capability("filesystem changes (pool reuse, `max_uses > 1`)", SupportsFilesystemChanges,
               "not reused between users"),
    Capability("host inspector (pool reset checked from outside)", SupportsHostInspector,
               "not reused between users"),
    Capability("checkpoints and forks", SupportsCheckpoints,
               "`CheckpointFailed` naming the backend"),
    Capability("egress proxy counters", SupportsEgressStats,
               "`EgressStats(enforced=False)`"),
    Capability("session command killed from outside", SupportsKillMarked,
               "killed by a sweep from inside the sandbox"),
    Capability("session results with usage and OOM", SupportsCommandFinalizer,
               "session results without usage"),
)


def supports(factory: object, capability: type) -> bool:
    """Whether the backend class ``factory`` has ``capability`` (a ``Supports*`` protocol),
    asked of the class, before any backend is made."""
    return isinstance(factory, type) and issubclass(factory, capability)


def backend_name(backend: Backend) -> str:
    """How a refusal names a backend: its config's type and its class."""
    return f"type={backend.config.type!r} ({type(backend).__name__})"


def checkpoints_of(backend: Backend) -> SupportsCheckpoints:
    """``backend`` as one that keeps images of its sandboxes, or `CheckpointFailed` naming
    it."""
    if not isinstance(backend, SupportsCheckpoints):
        raise CheckpointFailed(
            f"{backend_name(backend)} cannot checkpoint or fork a sandbox",
            details="checkpoints and forks are images of the Docker engine: use "
                    "type='docker' for them")
    return backend
