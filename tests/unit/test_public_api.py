"""The public namespace: `sandbox.__all__` is pinned, sorted and complete; `__version__`."""

from __future__ import annotations

import inspect
import tomllib
from pathlib import Path

import sandbox
import sandbox._errors

#: Every public name. Adding or removing one is an API change: update this list with it.
PUBLIC = [
    "IMAGE_BUSYBOX", "IMAGE_PYTHON",
    "Checkpoint", "CheckpointFailed", "CleanupIncomplete",
    "Command", "CommandExecutionFailed", "CommandLike", "CommandNotExecutable",
    "CommandNotFound", "CommandResult", "CommandStartFailed", "ConfigError",
    "CopyLimitExceeded", "EgressStats", "EngineTimeout", "EngineUnavailable",
    "ExecutionSandbox", "FileInfo",
    "FileOperationFailed", "GcItem", "GcReport", "GitConfig", "KillFailed",
    "LimitNotEnforceable", "McpServerFailed",
    "NetworkAccessDenied", "NetworkConfig", "OutputCallback", "OutputChunk", "PoolStats",
    "PortMapping", "Process", "RepositoryConfig",
    "ResourceLimitExceeded", "ResourceLimits", "ResourceUsage", "Sandbox",
    "SandboxAlreadyExists", "SandboxAlreadyInitialized", "SandboxConfig", "SandboxError",
    "SandboxFileNotFound", "SandboxInfo", "SandboxInitFailed", "SandboxIsADirectory",
    "SandboxNotFound", "SandboxNotRunning", "SandboxPermissionDenied", "SandboxPool",
    "SandboxStatus",
    "SecurityPolicy", "SecurityViolation", "Session", "SessionClosed", "SessionJob",
    "StdinClosed", "TimeoutExceeded", "UnsafeArchive",
    "checkpoints", "cleanup_on_signals", "from_json", "gc", "head_tail", "remove_checkpoint",
    "to_json",
]


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_all_is_pinned() -> None:
    assert sandbox.__all__ == PUBLIC


def test_all_is_sorted() -> None:
    assert sandbox.__all__ == sorted(sandbox.__all__, key=_isort_key)


def test_all_is_complete() -> None:
    """Every public attribute is listed, and every listed name exists."""
    public = {
        name for name, value in vars(sandbox).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert public == set(sandbox.__all__)


def test_every_error_is_public() -> None:
    assert set(sandbox._errors.__all__) <= set(sandbox.__all__)


def test_version_matches_pyproject() -> None:
    pyproject = Path(__file__).parents[2] / "pyproject.toml"
    with pyproject.open("rb") as f:
        version = tomllib.load(f)["project"]["version"]
    assert sandbox.__version__ == version


def test_the_command_line_reports_the_version() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "sandbox", "--version"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    assert out == f"sandbox {sandbox.__version__}\n"
