"""The audit log: what each SecurityPolicy switch records, and that secrets stay out of it."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    NetworkAccessDenied,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
    SecurityViolation,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

SECRETS = ("tok-5f1e2d3c", "pw-9a8b7c6d", "key-0a1b2c3d")


def audit_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    records = [r for r in caplog.records if r.name == "sandbox.audit"]
    for r in records:
        # The message is one line that carries the same fields as the structured dict.
        assert "\n" not in r.getMessage() and r.getMessage().startswith("audit event=")
        assert f'sandbox_id="{r.audit["sandbox_id"]}"' in r.getMessage()
    return [r.audit for r in records]


def of(records: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [r for r in records if r["event"] == event]


async def test_audit_log_records_commands_and_files_but_never_secret_values(
    caplog: pytest.LogCaptureFixture, tmp_path: Path,
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    config = SandboxConfig(image=IMAGE_BUSYBOX, environment={"API_TOKEN": SECRETS[0]},
                           security=SecurityPolicy(enable_audit_log=True, run_as_user="1000"))
    (tmp_path / "in.txt").write_text("host file")
    async with Sandbox(config) as sb:
        sb.set_environment({"DB_PASSWORD": SECRETS[1]})
        result = await sb.execute_command(Command.shell(
            'test "$API_TOKEN$DB_PASSWORD$SIGNING_KEY" = "$EXPECTED" && exit 3',
            environment={"SIGNING_KEY": SECRETS[2], "EXPECTED": "".join(SECRETS)}))
        assert result.exit_code == 3  # the secrets did reach the command
        async with sb.stream_command(["echo", "streamed"]) as proc:
            await proc.wait()
        await sb.write_file("a.txt", "12345")
        assert await sb.read_file("a.txt") == b"12345"
        await sb.list_files(".")
        await sb.copy_files(str(tmp_path / "in.txt"), "sandbox:in.txt")
        await sb.copy_files("sandbox:a.txt", str(tmp_path / "out.txt"))
        sandbox_id = sb.id
    records = audit_records(caplog)

    first, streamed = of(records, "command")
    assert first["sandbox_id"] == sandbox_id
    assert first["argv"][0] == "/bin/sh" and first["user"] == "1000:1000"
    assert first["cwd"] == "/workspace" and first["exit_code"] == 3
    assert first["timed_out"] is False and first["oom_killed"] is False
    assert 0 < first["duration"] < 10
    assert {"API_TOKEN", "DB_PASSWORD", "SIGNING_KEY"} <= set(first["env_keys"])
    assert streamed["argv"] == ["echo", "streamed"] and streamed["exit_code"] == 0

    files = [(r["op"], r["path"], r["bytes"], r["ok"]) for r in of(records, "file")]
    assert files == [
        ("write", "/workspace/a.txt", 5, True),
        ("read", "/workspace/a.txt", 5, True),
        ("list", "/workspace", None, True),
        ("copy_in", "/workspace/in.txt", None, True),
        ("copy_out", "/workspace/a.txt", None, True),
    ]
    assert not of(records, "refused") and not of(records, "limit")
    everything = caplog.text + json.dumps(records, default=str)
    for secret in SECRETS:
        assert secret not in everything


async def test_security_events_record_refusals_and_limit_hits_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    config = SandboxConfig(
        image=IMAGE_PYTHON, security=SecurityPolicy(log_security_events=True, run_as_user="1000"),
        resources=ResourceLimits(memory_limit=64 << 20, cpu_time_limit=1),
    )
    async with Sandbox(config) as sb:
        with pytest.raises(NetworkAccessDenied):
            await sb.execute_command(Command.shell("true", allow_network=True))
        with pytest.raises(SecurityViolation):
            await sb.execute_command(Command.shell("true", user="root"))
        await sb.execute_command(Command.shell("sleep 10", timeout=0.5))
        await sb.execute_command(Command.shell("yes | head -c 100", max_output_bytes=10))
        r = await sb.execute_command(["python3", "-c", "b = bytearray(200 * 2**20)"])
        assert r.oom_killed
        r = await sb.execute_command(Command.shell("while :; do :; done", timeout=20))
        assert r.signal == "SIGXCPU"
        await sb.write_file("x", "not an audited event here")
    records = audit_records(caplog)
    assert not of(records, "command") and not of(records, "file")
    refused = [(r["rule"], r["asked"]) for r in of(records, "refused")]
    assert refused == [
        ("network.isolated", "allow_network=True for ['/bin/sh', '-c', 'true']"),
        ("security.run_as_user", "user='root' for ['/bin/sh', '-c', 'true']"),
    ]
    assert "NetworkAccessDenied" in of(records, "refused")[0]["error"]
    limits = [r["limit"] for r in of(records, "limit")]
    assert limits == ["timeout", "output", "memory", "cpu_time"]
    assert of(records, "limit")[0]["argv"] == ["/bin/sh", "-c", "sleep 10"]


async def test_wall_time_and_refused_policy_are_security_events(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    config = SandboxConfig(image=IMAGE_BUSYBOX, resources=ResourceLimits(wall_time_limit=1),
                           security=SecurityPolicy(log_security_events=True))
    async with Sandbox(config) as sb:
        await sb.execute_command(Command.shell("sleep 10", timeout=20))
    config = SandboxConfig(image=IMAGE_BUSYBOX, security=SecurityPolicy(
        log_security_events=True, add_capabilities=["SYS_ADMIN"]))
    with pytest.raises(SecurityViolation):
        async with Sandbox(config):
            pass
    config = SandboxConfig(image=IMAGE_BUSYBOX, resources=ResourceLimits(network_in_limit=1000),
                           security=SecurityPolicy(log_security_events=True))
    with pytest.raises(SandboxInitFailed):
        async with Sandbox(config):
            pass
    records = audit_records(caplog)
    (wall,) = of(records, "limit")
    assert wall["limit"] == "wall_time" and "wall_time_limit" in wall["detail"]
    caps, bandwidth = of(records, "refused")
    assert caps["rule"] == "security.add_capabilities" and caps["asked"] == "initialize"
    assert bandwidth["rule"] == "resources.network_in_limit"
    assert "an isolated sandbox has no network to limit" in bandwidth["error"]


async def test_nothing_is_audited_by_default(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        await sb.execute_command(Command.shell("sleep 5", timeout=0.3))
        await sb.write_file("a", "b")
        with pytest.raises(NetworkAccessDenied):
            await sb.execute_command(Command.shell("true", allow_network=True))
    assert audit_records(caplog) == []
