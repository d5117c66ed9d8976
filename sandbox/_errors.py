"""Exceptions raised by the SDK, all rooted at `SandboxError`.

Each class also derives from the builtin exception with the same meaning, so existing
``except LookupError`` / ``except TimeoutError`` / ``except FileNotFoundError`` clauses work::

    SandboxError (Exception)
    ├── SandboxAlreadyInitialized (RuntimeError)
    ├── SandboxNotRunning
    │   └── SandboxNotFound (LookupError)
    ├── SandboxInitFailed
    │   └── SandboxAlreadyExists
    ├── SessionClosed
    ├── CommandExecutionFailed
    │   ├── StdinClosed (BrokenPipeError)
    │   └── CommandStartFailed
    │       ├── CommandNotFound (FileNotFoundError)
    │       └── CommandNotExecutable (PermissionError)
    ├── ResourceLimitExceeded
    ├── CheckpointFailed
    ├── CleanupIncomplete
    ├── SecurityViolation (PermissionError)
    │   └── NetworkAccessDenied
    ├── FileOperationFailed
    │   ├── SandboxFileNotFound (FileNotFoundError)
    │   ├── SandboxIsADirectory (IsADirectoryError)
    │   ├── SandboxPermissionDenied (PermissionError)
    │   ├── UnsafeArchive
    │   └── CopyLimitExceeded (also ResourceLimitExceeded)
    ├── TimeoutExceeded (TimeoutError)
    │   └── EngineTimeout (also EngineUnavailable)
    ├── EngineUnavailable (ConnectionError), retryable by default
    ├── McpServerFailed
    └── ConfigError (ValueError)
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar, TypedDict, Unpack

if TYPE_CHECKING:
    from ._models import CommandResult

__all__ = [
    "CheckpointFailed",
    "CleanupIncomplete",
    "CommandExecutionFailed",
    "CommandNotExecutable",
    "CommandNotFound",
    "CommandStartFailed",
    "ConfigError",
    "CopyLimitExceeded",
    "EngineTimeout",
    "EngineUnavailable",
    "FileOperationFailed",
    "KillFailed",
    "LimitNotEnforceable",
    "McpServerFailed",
    "NetworkAccessDenied",
    "ResourceLimitExceeded",
    "SandboxAlreadyExists",
    "SandboxAlreadyInitialized",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxInitFailed",
    "SandboxIsADirectory",
    "SandboxNotFound",
    "SandboxNotRunning",
    "SandboxPermissionDenied",
    "SecurityViolation",
    "SessionClosed",
    "StdinClosed",
    "TimeoutExceeded",
    "UnsafeArchive",
]


class _ErrorOptions(TypedDict, total=False):
    """The keyword options every `SandboxError` takes, for subclasses that add their own."""

    details: str
    retryable: bool | None
    cause: BaseException | None


class SandboxError(Exception):
    """Base class of every error raised by the SDK.

    Attributes:
        code: Stable machine-readable error code, e.g. ``"SANDBOX_NOT_FOUND"``.
        message: Short human-readable summary.
        details: Extra context (engine message, offending value); may be empty.
        retryable: Whether repeating the same call may succeed.
        cause: The underlying exception, also available as ``__cause__``.
    """

    code: ClassVar[str] = "SANDBOX_ERROR"
    #: Class-level default for ``retryable``; instances may override it.
    retryable: bool = False
    #: errno reported by the subclasses that are also OSErrors.
    _os_errno: ClassVar[int | None] = None

    def __init__(
        self,
        message: str,
        *,
        details: str = "",
        retryable: bool | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.details = details
        if retryable is not None:
            self.retryable = retryable
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause
        if isinstance(self, OSError):
            _fill_os_error(self, self._os_errno, message)

    def __str__(self) -> str:
        # Listed before OSError in every subclass's MRO, so this wins over OSError.__str__.
        return f"{self.message}: {self.details}" if self.details else self.message


def _fill_os_error(
    err: OSError, code: int | None, message: str, filename: str | None = None
) -> None:
    """Set the OSError slots that code catching the builtin error may inspect."""
    # OSError.__new__ skips argument parsing when a subclass overrides __init__.
    err.errno = code
    err.strerror = message
    err.filename = filename


class SandboxAlreadyInitialized(SandboxError, RuntimeError):
    """Raised when `initialize` is called on a sandbox that was already initialized."""

    code = "SANDBOX_ALREADY_INITIALIZED"


class SandboxNotRunning(SandboxError):
    """Raised when an operation needs a running sandbox and it is not."""

    code = "SANDBOX_NOT_RUNNING"


class SandboxNotFound(SandboxNotRunning, LookupError):
    """Raised when the sandbox's container is gone: the engine no longer knows it (removed
    from outside)."""

    code = "SANDBOX_NOT_FOUND"


class SandboxInitFailed(SandboxError):
    """Raised when creating or starting the sandbox fails."""

    code = "SANDBOX_INIT_FAILED"


class LimitNotEnforceable(SandboxInitFailed):
    """Raised when a backend cannot enforce a default resource limit where it runs (the
    message names it) and ``ResourceLimits.allow_unbounded`` does not accept that."""

    code = "LIMIT_NOT_ENFORCEABLE"


class SandboxAlreadyExists(SandboxInitFailed):
    """Raised when creating a sandbox whose name is already taken on the engine (409)."""

    code = "SANDBOX_ALREADY_EXISTS"


class CommandExecutionFailed(SandboxError):
    """Raised when a command cannot be started, its execution breaks down, or (from
    `CommandResult.check`) it exited non-zero or timed out.

    Attributes:
        result: The command's result when it ran to an end, else None.
    """

    code = "COMMAND_EXECUTION_FAILED"

    def __init__(self, message: str, *, result: CommandResult | None = None,
                 **options: Unpack[_ErrorOptions]) -> None:
        super().__init__(message, **options)
        self.result = result


class SessionClosed(SandboxError):
    """Raised when a session cannot run a command: it was closed, or its shell ended and it
    was opened with ``restart=False``."""

    code = "SESSION_CLOSED"


class StdinClosed(CommandExecutionFailed, BrokenPipeError):
    """Raised when writing to a command's stdin after it exited or its stdin was closed."""

    _os_errno = errno.EPIPE


class CommandStartFailed(CommandExecutionFailed):
    """Raised when the engine could not start a command (the process never ran)."""


class CommandNotFound(CommandStartFailed, FileNotFoundError):
    """Raised when a command's executable does not exist in the sandbox."""

    _os_errno = errno.ENOENT


class CommandNotExecutable(CommandStartFailed, PermissionError):
    """Raised when a command's executable may not be executed (no x bit, a directory)."""

    _os_errno = errno.EACCES


class KillFailed(CommandExecutionFailed):
    """Raised instead of a result when the SDK killed a command (its timeout, ``kill()``)
    but could not confirm that its processes are gone: they may still run and act."""

    code = "KILL_FAILED"


class ResourceLimitExceeded(SandboxError):
    """Raised when a resource limit stopped the sandbox or an operation: the sandbox's main
    process was killed for running out of memory, or a copy went over its limits.

    A command that goes over a limit is a result instead (``oom_killed``, ``truncated``).
    """

    code = "RESOURCE_LIMIT_EXCEEDED"


class CheckpointFailed(SandboxError):
    """Raised when a sandbox could not be checkpointed or forked, or a checkpoint removed."""

    code = "CHECKPOINT_FAILED"


class CleanupIncomplete(SandboxError):
    """Raised when cleanup removed what it could but something is left on the host.

    Nothing is forgotten: ``cleanup()`` again retries, and ``gc`` removes the rest once the
    owner process has exited (what it needs to judge the owner is kept until the end).

    Attributes:
        left: What is left, one host path or resource per entry.
    """

    code = "CLEANUP_INCOMPLETE"
    retryable = True

    def __init__(self, message: str, *, left: Sequence[str] = (),
                 **options: Unpack[_ErrorOptions]) -> None:
        super().__init__(message, **options)
        self.left = tuple(left)


class SecurityViolation(SandboxError, PermissionError):
    """Raised when an operation is refused by the sandbox security policy."""

    code = "SECURITY_VIOLATION"
    _os_errno = errno.EPERM


class NetworkAccessDenied(SecurityViolation):
    """Raised when network access is attempted while the policy forbids it."""

    code = "NETWORK_ACCESS_DENIED"


class FileOperationFailed(SandboxError):
    """Raised when reading, writing, copying or listing files in the sandbox fails.

    Attributes:
        path: The path inside the sandbox the operation failed on, if known.
    """

    code = "FILE_OPERATION_FAILED"

    def __init__(self, message: str, *, path: str | None = None,
                 **options: Unpack[_ErrorOptions]) -> None:
        super().__init__(message, **options)
        self.path = path
        if isinstance(self, OSError):
            _fill_os_error(self, self._os_errno, message, path)


class SandboxFileNotFound(FileOperationFailed, FileNotFoundError):
    """Raised when a path does not exist in the sandbox."""

    _os_errno = errno.ENOENT


class SandboxIsADirectory(FileOperationFailed, IsADirectoryError):
    """Raised when a file operation is given a directory."""

    _os_errno = errno.EISDIR


class SandboxPermissionDenied(FileOperationFailed, PermissionError):
    """Raised when the sandbox user may not access a path."""

    _os_errno = errno.EACCES


class UnsafeArchive(FileOperationFailed):
    """Raised when a copy out of the sandbox is refused: its archive breaks a copy-out rule.

    Nothing is left at the destination. Attributes:
        member: The archive member that broke the rule, as the archive names it.
    """

    code = "UNSAFE_ARCHIVE"

    def __init__(self, message: str, *, member: str = "", path: str | None = None,
                 **options: Unpack[_ErrorOptions]) -> None:
        super().__init__(message, path=path, **options)
        self.member = member


class CopyLimitExceeded(FileOperationFailed, ResourceLimitExceeded):
    """Raised when a copy out of the sandbox goes over ``max_bytes`` or ``max_entries``.

    Nothing is left at the destination. Attributes:
        limit: The copy_files keyword that was exceeded (``"max_bytes"`` or ``"max_entries"``).
        value: Its value for this copy.
        member: The archive member being copied when the limit was hit ("" if none yet).
    """

    code = "COPY_LIMIT_EXCEEDED"

    def __init__(self, message: str, *, limit: str = "", value: int = 0, member: str = "",
                 path: str | None = None, **options: Unpack[_ErrorOptions]) -> None:
        super().__init__(message, path=path, **options)
        self.limit = limit
        self.value = value
        self.member = member


class TimeoutExceeded(SandboxError, TimeoutError):
    """Raised when something the SDK does on the engine runs past its deadline: an engine
    call, a helper command (file operations, set-up), waiting for a usage sample.

    A user command that runs past its timeout is a result with ``timed_out`` set;
    `CommandResult.check` turns it into a `CommandExecutionFailed`.
    """

    code = "TIMEOUT_EXCEEDED"
    _os_errno = errno.ETIMEDOUT


class EngineUnavailable(SandboxError, ConnectionError):
    """Raised when the container engine cannot be reached or is not responding."""

    code = "ENGINE_UNAVAILABLE"
    retryable = True


class EngineTimeout(TimeoutExceeded, EngineUnavailable):
    """Raised when the engine does not answer a call within the SDK's deadline for it.

    Both a `TimeoutExceeded` (a deadline ran out) and an `EngineUnavailable` (the engine is
    not responding), so either ``except`` catches it; retryable.
    """

    code = "ENGINE_TIMEOUT"
    retryable = True


class ConfigError(SandboxError, ValueError):
    """Raised when a configuration value or a JSON document is invalid."""

    code = "CONFIG_ERROR"


class McpServerFailed(SandboxError):
    """Raised when an MCP server named in ``SandboxConfig.mcp_servers`` cannot serve: it is
    not running (it exited or crashed; ``exit_code`` and the end of its ``stderr`` say how),
    or it broke the protocol.
    """

    code = "MCP_SERVER_FAILED"

    def __init__(self, message: str, *, server: str = "", exit_code: int | None = None,
                 stderr: str = "", details: str = "",
                 cause: BaseException | None = None) -> None:
        super().__init__(message, details=details, cause=cause)
        self.server = server
        self.exit_code = exit_code
        self.stderr = stderr
