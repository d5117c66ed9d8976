"""The exception tree: codes, builtin bases, message format, causes and retryability."""

from __future__ import annotations

import errno

import pytest

from sandbox._errors import (
    CheckpointFailed,
    CleanupIncomplete,
    CommandExecutionFailed,
    CommandNotExecutable,
    CommandNotFound,
    CommandStartFailed,
    ConfigError,
    CopyLimitExceeded,
    EngineTimeout,
    EngineUnavailable,
    FileOperationFailed,
    KillFailed,
    LimitNotEnforceable,
    McpServerFailed,
    NetworkAccessDenied,
    ResourceLimitExceeded,
    SandboxAlreadyExists,
    SandboxAlreadyInitialized,
    SandboxError,
    SandboxFileNotFound,
    SandboxInitFailed,
    SandboxIsADirectory,
    SandboxNotFound,
    SandboxNotRunning,
    SandboxPermissionDenied,
    SecurityViolation,
    SessionClosed,
    StdinClosed,
    TimeoutExceeded,
    UnsafeArchive,
)

CODES: list[tuple[type[SandboxError], str]] = [
    (SandboxError, "SANDBOX_ERROR"),
    (SandboxNotFound, "SANDBOX_NOT_FOUND"),
    (SandboxAlreadyExists, "SANDBOX_ALREADY_EXISTS"),
    (LimitNotEnforceable, "LIMIT_NOT_ENFORCEABLE"),
    (SandboxAlreadyInitialized, "SANDBOX_ALREADY_INITIALIZED"),
    (SandboxNotRunning, "SANDBOX_NOT_RUNNING"),
    (SandboxInitFailed, "SANDBOX_INIT_FAILED"),
    (CommandExecutionFailed, "COMMAND_EXECUTION_FAILED"),
    (StdinClosed, "COMMAND_EXECUTION_FAILED"),
    (SessionClosed, "SESSION_CLOSED"),
    (CommandStartFailed, "COMMAND_EXECUTION_FAILED"),
    (CommandNotFound, "COMMAND_EXECUTION_FAILED"),
    (CommandNotExecutable, "COMMAND_EXECUTION_FAILED"),
    (KillFailed, "KILL_FAILED"),
    (ResourceLimitExceeded, "RESOURCE_LIMIT_EXCEEDED"),
    (CheckpointFailed, "CHECKPOINT_FAILED"),
    (CleanupIncomplete, "CLEANUP_INCOMPLETE"),
    (SecurityViolation, "SECURITY_VIOLATION"),
    (NetworkAccessDenied, "NETWORK_ACCESS_DENIED"),
    (FileOperationFailed, "FILE_OPERATION_FAILED"),
    (SandboxFileNotFound, "FILE_OPERATION_FAILED"),
    (SandboxIsADirectory, "FILE_OPERATION_FAILED"),
    (SandboxPermissionDenied, "FILE_OPERATION_FAILED"),
    (UnsafeArchive, "UNSAFE_ARCHIVE"),
    (CopyLimitExceeded, "COPY_LIMIT_EXCEEDED"),
    (TimeoutExceeded, "TIMEOUT_EXCEEDED"),
    (EngineUnavailable, "ENGINE_UNAVAILABLE"),
    (EngineTimeout, "ENGINE_TIMEOUT"),
    (ConfigError, "CONFIG_ERROR"),
    (McpServerFailed, "MCP_SERVER_FAILED"),
]

BUILTIN_BASES: list[tuple[type[SandboxError], type[BaseException]]] = [
    (SandboxNotFound, LookupError),
    # A container that is gone is one that is not running; a taken name fails the create.
    (SandboxNotFound, SandboxNotRunning),
    (SandboxAlreadyExists, SandboxInitFailed),
    (LimitNotEnforceable, SandboxInitFailed),
    (SandboxAlreadyInitialized, RuntimeError),
    # An engine that misses a deadline is both a timeout and an engine not responding.
    (EngineTimeout, TimeoutExceeded),
    (EngineTimeout, TimeoutError),
    (EngineTimeout, EngineUnavailable),
    (EngineTimeout, ConnectionError),
    (SecurityViolation, PermissionError),
    (NetworkAccessDenied, PermissionError),
    (NetworkAccessDenied, SecurityViolation),
    (SandboxFileNotFound, FileNotFoundError),
    (SandboxIsADirectory, IsADirectoryError),
    (SandboxPermissionDenied, PermissionError),
    (TimeoutExceeded, TimeoutError),
    (EngineUnavailable, ConnectionError),
    (ConfigError, ValueError),
    (StdinClosed, BrokenPipeError),
    (StdinClosed, CommandExecutionFailed),
    (CommandStartFailed, CommandExecutionFailed),
    (CommandNotFound, FileNotFoundError),
    (CommandNotFound, CommandStartFailed),
    (CommandNotExecutable, PermissionError),
    (CommandNotExecutable, CommandStartFailed),
]


@pytest.mark.parametrize(("cls", "code"), CODES)
def test_code_and_root(cls: type[SandboxError], code: str) -> None:
    err = cls("boom")
    assert err.code == code


@pytest.mark.parametrize(("cls", "base"), BUILTIN_BASES)
def test_builtin_bases(cls: type[SandboxError], base: type[BaseException]) -> None:
    with pytest.raises(base):
        raise cls("boom")


@pytest.mark.parametrize(("cls", "code"), CODES)
def test_str_and_attributes(cls: type[SandboxError], code: str) -> None:
    plain = cls("it failed")
    assert str(plain) == "it failed"
    assert plain.message == "it failed"
    assert plain.details == ""
    assert plain.cause is None
    assert plain.__cause__ is None
    assert plain.args == ("it failed",)
    detailed = cls("it failed", details="engine said no")
    assert str(detailed) == "it failed: engine said no"
    assert detailed.details == "engine said no"


@pytest.mark.parametrize(("cls", "code"), CODES)
def test_cause(cls: type[SandboxError], code: str) -> None:
    root = OSError("socket closed")
    err = cls("wrapped", cause=root)
    assert err.cause is root
    assert err.__cause__ is root
    assert err.__suppress_context__


def test_retryable_defaults() -> None:
    assert EngineUnavailable("down").retryable is True
    assert EngineUnavailable("down", retryable=False).retryable is False
    assert SandboxError("x").retryable is False
    assert TimeoutExceeded("x").retryable is False
    assert SandboxNotRunning("x", retryable=True).retryable is True
    # An instance override does not leak into the class default.
    assert EngineUnavailable("again").retryable is True


@pytest.mark.parametrize(
    ("cls", "code"),
    [
        (SandboxFileNotFound, errno.ENOENT),
        (SandboxIsADirectory, errno.EISDIR),
        (SandboxPermissionDenied, errno.EACCES),
    ],
)
def test_file_errors_are_oserrors(cls: type[FileOperationFailed], code: int) -> None:
    err = cls("cannot read", path="/workspace/a.txt", details="stat failed")
    assert isinstance(err, OSError)
    assert isinstance(err, FileOperationFailed)
    assert err.path == "/workspace/a.txt"
    assert err.filename == "/workspace/a.txt"
    assert err.errno == code
    assert err.strerror == "cannot read"
    assert str(err) == "cannot read: stat failed"
    assert err.args == ("cannot read",)


def test_copy_out_errors_are_file_errors_naming_the_member() -> None:
    unsafe = UnsafeArchive("refused", member="t/dev", path="/w/t")
    assert isinstance(unsafe, FileOperationFailed) and not isinstance(unsafe, OSError)
    assert (unsafe.member, unsafe.path) == ("t/dev", "/w/t")
    cap = CopyLimitExceeded("stopped", limit="max_bytes", value=10, member="t/big", path="/w/t")
    assert isinstance(cap, FileOperationFailed) and isinstance(cap, ResourceLimitExceeded)
    assert (cap.limit, cap.value, cap.member, cap.path) == ("max_bytes", 10, "t/big", "/w/t")


def test_file_operation_failed_path() -> None:
    err = FileOperationFailed("copy failed", path="/x")
    assert err.path == "/x"
    assert not isinstance(err, OSError)
    assert FileOperationFailed("copy failed").path is None


def test_oserror_subclasses_keep_their_str() -> None:
    assert str(TimeoutExceeded("too slow", details="30s")) == "too slow: 30s"
    assert TimeoutExceeded("too slow").errno == errno.ETIMEDOUT
    assert str(SecurityViolation("refused")) == "refused"
    assert str(EngineUnavailable("down")) == "down"


def test_catch_by_builtin() -> None:
    with pytest.raises(FileNotFoundError) as info:
        raise SandboxFileNotFound("missing", path="/nope")
    assert isinstance(info.value, SandboxFileNotFound)
    assert info.value.filename == "/nope"
    with pytest.raises(LookupError):
        raise SandboxNotFound("no such sandbox")


def test_command_errors_carry_their_errno() -> None:
    assert StdinClosed("gone").errno == errno.EPIPE
    assert CommandNotFound("missing").errno == errno.ENOENT
    assert CommandNotExecutable("no x bit").errno == errno.EACCES
    assert not isinstance(CommandStartFailed("x"), OSError)


def test_second_initialize_is_not_a_taken_name() -> None:
    assert not issubclass(SandboxAlreadyInitialized, SandboxAlreadyExists | SandboxInitFailed)
    assert EngineTimeout("slow").retryable is True


def test_command_execution_failed_carries_its_result() -> None:
    from sandbox import CommandResult

    result = CommandResult(exit_code=2)
    err = CommandExecutionFailed("the command exited with code 2", result=result)
    assert err.result is result
    assert CommandExecutionFailed("broke down").result is None
    assert CommandNotFound("missing").result is None


def test_every_error_class_has_its_code_listed() -> None:
    import sandbox._errors

    assert {cls.__name__ for cls, _ in CODES} == set(sandbox._errors.__all__)
