"""sandbox: run AI-agent work inside Docker containers, safe by default.

Example:
    async with Sandbox(SandboxConfig()) as sb:
        result = await sb.execute_command("echo hello")
"""

from ._backend import Process as Process
from ._checkpoint import Checkpoint as Checkpoint
from ._checkpoint import checkpoints as checkpoints
from ._checkpoint import remove_checkpoint as remove_checkpoint
from ._constants import IMAGE_BUSYBOX as IMAGE_BUSYBOX
from ._constants import IMAGE_PYTHON as IMAGE_PYTHON
from ._egress_stats import EgressStats as EgressStats
from ._errors import CheckpointFailed as CheckpointFailed
from ._errors import CleanupIncomplete as CleanupIncomplete
from ._errors import CommandExecutionFailed as CommandExecutionFailed
from ._errors import CommandNotExecutable as CommandNotExecutable
from ._errors import CommandNotFound as CommandNotFound
from ._errors import CommandStartFailed as CommandStartFailed
from ._errors import ConfigError as ConfigError
from ._errors import CopyLimitExceeded as CopyLimitExceeded
from ._errors import EngineTimeout as EngineTimeout
from ._errors import EngineUnavailable as EngineUnavailable
from ._errors import FileOperationFailed as FileOperationFailed
from ._errors import KillFailed as KillFailed
from ._errors import LimitNotEnforceable as LimitNotEnforceable
from ._errors import McpServerFailed as McpServerFailed
from ._errors import NetworkAccessDenied as NetworkAccessDenied
from ._errors import ResourceLimitExceeded as ResourceLimitExceeded
from ._errors import SandboxAlreadyExists as SandboxAlreadyExists
from ._errors import SandboxAlreadyInitialized as SandboxAlreadyInitialized
from ._errors import SandboxError as SandboxError
from ._errors import SandboxFileNotFound as SandboxFileNotFound
from ._errors import SandboxInitFailed as SandboxInitFailed
from ._errors import SandboxIsADirectory as SandboxIsADirectory
from ._errors import SandboxNotFound as SandboxNotFound
from ._errors import SandboxNotRunning as SandboxNotRunning
from ._errors import SandboxPermissionDenied as SandboxPermissionDenied
from ._errors import SecurityViolation as SecurityViolation
from ._errors import SessionClosed as SessionClosed
from ._errors import StdinClosed as StdinClosed
from ._errors import TimeoutExceeded as TimeoutExceeded
from ._errors import UnsafeArchive as UnsafeArchive
from ._gc import GcItem as GcItem
from ._gc import GcReport as GcReport
from ._gc import gc as gc
from ._json import from_json as from_json
from ._json import to_json as to_json
from ._models import Command as Command
from ._models import CommandResult as CommandResult
from ._models import FileInfo as FileInfo
from ._models import GitConfig as GitConfig
from ._models import NetworkConfig as NetworkConfig
from ._models import OutputChunk as OutputChunk
from ._models import PortMapping as PortMapping
from ._models import RepositoryConfig as RepositoryConfig
from ._models import ResourceLimits as ResourceLimits
from ._models import ResourceUsage as ResourceUsage
from ._models import SandboxConfig as SandboxConfig
from ._models import SandboxInfo as SandboxInfo
from ._models import SandboxStatus as SandboxStatus
from ._models import SecurityPolicy as SecurityPolicy
from ._pool import PoolStats as PoolStats
from ._pool import SandboxPool as SandboxPool
from ._protocol import CommandLike as CommandLike
from ._protocol import ExecutionSandbox as ExecutionSandbox
from ._protocol import OutputCallback as OutputCallback
from ._sandbox import Sandbox as Sandbox
from ._session import Session as Session
from ._session import SessionJob as SessionJob
from ._session import head_tail as head_tail
from ._signals import cleanup_on_signals as cleanup_on_signals

#: The package version; the same as pyproject.toml's (a test checks).
__version__ = "0.2.0"

__all__ = [
    "IMAGE_BUSYBOX",
    "IMAGE_PYTHON",
    "Checkpoint",
    "CheckpointFailed",
    "CleanupIncomplete",
    "Command",
    "CommandExecutionFailed",
    "CommandLike",
    "CommandNotExecutable",
    "CommandNotFound",
    "CommandResult",
    "CommandStartFailed",
    "ConfigError",
    "CopyLimitExceeded",
    "EgressStats",
    "EngineTimeout",
    "EngineUnavailable",
    "ExecutionSandbox",
    "FileInfo",
    "FileOperationFailed",
    "GcItem",
    "GcReport",
    "GitConfig",
    "KillFailed",
    "LimitNotEnforceable",
    "McpServerFailed",
    "NetworkAccessDenied",
    "NetworkConfig",
    "OutputCallback",
    "OutputChunk",
    "PoolStats",
    "PortMapping",
    "Process",
    "RepositoryConfig",
    "ResourceLimitExceeded",
    "ResourceLimits",
    "ResourceUsage",
    "Sandbox",
    "SandboxAlreadyExists",
    "SandboxAlreadyInitialized",
    "SandboxConfig",
    "SandboxError",
    "SandboxFileNotFound",
    "SandboxInfo",
    "SandboxInitFailed",
    "SandboxIsADirectory",
    "SandboxNotFound",
    "SandboxNotRunning",
    "SandboxPermissionDenied",
    "SandboxPool",
    "SandboxStatus",
    "SecurityPolicy",
    "SecurityViolation",
    "Session",
    "SessionClosed",
    "SessionJob",
    "StdinClosed",
    "TimeoutExceeded",
    "UnsafeArchive",
    "checkpoints",
    "cleanup_on_signals",
    "from_json",
    "gc",
    "head_tail",
    "remove_checkpoint",
    "to_json",
]
