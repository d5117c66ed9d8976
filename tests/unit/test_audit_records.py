"""Auditor records without an engine: one line each, switches, and no environment values."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from sandbox import CommandResult, SecurityPolicy
from sandbox._audit import Auditor

SECRET = "hunter2-value"


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "sandbox.audit"]


def test_command_record_is_one_line_without_env_values(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    auditor = Auditor("abc", SecurityPolicy(enable_audit_log=True))
    result = CommandResult(exit_code=137, signal="SIGKILL", duration=timedelta(seconds=1.23456),
                           timed_out=True, truncated=True, error="command timed out after 1 s")
    auditor.command(["sh", "-c", "echo a\nevent=forged"], user="1000", cwd="/w",
                    env={"API_TOKEN": SECRET, "PATH": "/bin"}, result=result)
    (command, timeout, output) = records(caplog)
    assert command.getMessage().count("\n") == 0
    assert command.getMessage().startswith('audit event="command" sandbox_id="abc" argv=')
    assert command.audit == {  # type: ignore[attr-defined]
        "event": "command", "sandbox_id": "abc", "argv": ["sh", "-c", "echo a\nevent=forged"],
        "user": "1000", "cwd": "/w", "env_keys": ["API_TOKEN", "PATH"], "exit_code": 137,
        "signal": "SIGKILL", "duration": 1.235, "timed_out": True, "oom_killed": False,
        "truncated": True, "error": "command timed out after 1 s",
    }
    assert [timeout.audit["limit"], output.audit["limit"]] == ["timeout", "output"]  # type: ignore[attr-defined]
    assert SECRET not in caplog.text


def test_security_events_only_and_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    security = Auditor("s", SecurityPolicy(log_security_events=True))
    security.command(["true"], user="", cwd="/", env={}, result=CommandResult(exit_code=0))
    with security.file_op("write", "/w/x", 3):
        pass
    exc = security.refused("network.isolated", "allow_network=True", PermissionError("no"))
    assert isinstance(exc, PermissionError)
    assert [r.audit["event"] for r in records(caplog)] == ["refused"]  # type: ignore[attr-defined]
    caplog.clear()
    off = Auditor("o", SecurityPolicy())
    off.refused("x", "y", ValueError())
    off.limit("wall_time", "z")
    assert records(caplog) == []


def test_failed_file_operation_is_recorded_and_reraised(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    auditor = Auditor("f", SecurityPolicy(enable_audit_log=True))
    with pytest.raises(FileNotFoundError), auditor.file_op("read", "/nope"):
        raise FileNotFoundError("/nope")
    (record,) = records(caplog)
    assert record.audit["ok"] is False  # type: ignore[attr-defined]
    assert record.audit["error"] == "FileNotFoundError: /nope"  # type: ignore[attr-defined]
