"""Go wire compatibility, proven against Go's encoding/json.

tests/go/wire/main.go mirrors the design's Go structs and wrote tests/go/wire/golden/*.json:
every struct fully populated ("full"), as its zero value ("zero"), and a result with
nanosecond times ("nanos"). Here Python decodes each file strictly and re-encodes it, and the
re-encoding must say the same thing. When `go` is on PATH the live test also rebuilds the
golden files (they must not have changed) and has Go decode Python's re-encodings, refusing
unknown keys, and compare them with what it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from sandbox._errors import ConfigError
from sandbox._json import from_json, to_json
from sandbox._models import (
    Command,
    CommandResult,
    FileInfo,
    GitConfig,
    NetworkConfig,
    OutputChunk,
    PortMapping,
    RepositoryConfig,
    ResourceLimits,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SecurityPolicy,
)

WIRE = Path(__file__).resolve().parents[1] / "go" / "wire"
GOLDEN = WIRE / "golden"
CLASSES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        ResourceLimits, SecurityPolicy, GitConfig, RepositoryConfig, PortMapping,
        NetworkConfig, SandboxConfig, Command, ResourceUsage, CommandResult, FileInfo,
        SandboxInfo, OutputChunk,
    )
}
#: Go zero values that are not valid Python values, and why.
INVALID_ZERO = {
    "PortMapping.zero": "container_port must be in 1..65535, got 0",
    "SandboxInfo.zero": "status: expected one of creating",
    "OutputChunk.zero": "stream: .*not in literal",
}
GOLDEN_NAMES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def golden(name: str) -> tuple[type, str]:
    return CLASSES[name.split(".")[0]], (GOLDEN / f"{name}.json").read_text()


def go_normal(value: Any) -> Any:
    """Compare JSON as Go reads it: null, [] and {} alike (Python has one empty tuple or dict
    for Go's nil and empty), and Go's zero time like an absent time (Python's None)."""
    if isinstance(value, dict):
        out = {k: go_normal(v) for k, v in value.items()}
        kept = {k: v for k, v in out.items() if v is not None and v != "0001-01-01T00:00:00Z"}
        return kept or None
    if isinstance(value, list):
        return [go_normal(v) for v in value] or None
    return value


def truncated_to_micros(value: Any) -> Any:
    """What Python keeps of Go's nanoseconds: durations and fractions cut to microseconds."""
    if isinstance(value, dict):
        return {k: truncated_to_micros(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return value - value % 1000
    if isinstance(value, str) and value[:4].isdigit() and "." in value:
        head, _, rest = value.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        return f"{head}.{rest[:min(digits, 6)]}".rstrip("0").rstrip(".") + rest[digits:]
    return value


def test_golden_files_cover_every_struct() -> None:
    assert sorted(
        [f"{name}.{variant}" for name in CLASSES for variant in ("full", "zero")]
        + ["CommandResult.nanos"]
    ) == GOLDEN_NAMES


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_python_reads_go_and_writes_the_same(name: str) -> None:
    cls, text = golden(name)
    if name in INVALID_ZERO:
        with pytest.raises(ConfigError, match=INVALID_ZERO[name]):
            from_json(text, cls)
        return
    obj = from_json(text, cls)
    again = to_json(obj)
    expected = json.loads(text)
    if name.endswith(".nanos"):
        expected = truncated_to_micros(expected)
    assert go_normal(json.loads(again)) == go_normal(expected)
    assert from_json(again, cls) == obj


def test_go_zero_config() -> None:
    """Go's zero SandboxConfig: nulls for every slice and map, a zero repository."""
    config = from_json(golden("SandboxConfig.zero")[1], SandboxConfig)
    assert config.repository is None
    assert config.tools == () and config.environment == {} and config.labels == {}
    assert config.security.add_capabilities == () and config.network.port_mappings == ()
    assert config.pull_policy == ""  # what Go writes when unset; means "missing"
    written = json.loads(to_json(config))
    assert written["repository"] == json.loads(golden("RepositoryConfig.zero")[1])


def test_go_full_config() -> None:
    config = from_json(golden("SandboxConfig.full")[1], SandboxConfig)
    assert config.security.allowed_hosts == ("pypi.org",)
    assert config.security.blocked_hosts == ("evil.example",)
    assert config.security.allowed_ports == (443,)
    assert config.repository is not None
    assert config.repository.git_config.config_values["pull.rebase"] == "true"
    assert config.network.port_mappings[1] == PortMapping(container_port=443, protocol="",
                                                          host_ip="")
    assert config.environment["Ünicode"] == '✓ "quoted" <&>'  # Go escapes <&> as \u003c...
    assert config.cleanup_delay == timedelta(milliseconds=1500)


def test_go_zero_times_are_none() -> None:
    result = from_json(golden("CommandResult.zero")[1], CommandResult)
    assert result.start_time is None and result.resource_usage.timestamp is None
    assert from_json(golden("SandboxInfo.full")[1], SandboxInfo).exit_code == 137


def test_go_nanoseconds_truncate_to_microseconds() -> None:
    result = from_json(golden("CommandResult.nanos")[1], CommandResult)
    plus2 = timezone(timedelta(hours=2))
    assert result.start_time == datetime(2026, 11, 22, 1, 48, 0, 194016, tzinfo=plus2)
    assert result.end_time == datetime(2026, 11, 22, 1, 48, 0, 194018, tzinfo=plus2)
    assert result.duration == timedelta(microseconds=1)
    assert result.resource_usage.uptime == timedelta(0)  # 1 ns
    assert result.resource_usage.cpu_time == timedelta(microseconds=123456)


def test_repository_written_always() -> None:
    """Go always writes the struct; None goes out as its zero value and comes back as None."""
    data = json.loads(to_json(SandboxConfig()))
    assert data["repository"]["url"] == "" and data["repository"]["mount_point"] == ""
    assert data["repository"]["git_config"]["config_values"] is None
    assert from_json(to_json(SandboxConfig()), SandboxConfig).repository is None
    for zero in ("{}", '{"url":""}', '{"git_config":{"config_values":{}}}', "null"):
        assert from_json(f'{{"repository":{zero}}}', SandboxConfig).repository is None
    repo = from_json('{"repository":{"url":"x"}}', SandboxConfig).repository
    assert repo == RepositoryConfig(url="x")
    assert RepositoryConfig().mount_point == "/workspace"
    # The default RepositoryConfig() is not Go's zero value (mount_point is set).
    config = SandboxConfig(repository=RepositoryConfig())
    assert from_json(to_json(config), SandboxConfig) == config


def test_unknown_keys_are_refused_naming_them() -> None:
    text = '{"image":"x","imagee":"y","security":{"allowed_hostz":["a"]}}'
    with pytest.raises(ConfigError) as info:
        from_json(text, SandboxConfig)
    message = str(info.value)
    assert "unknown key(s) imagee in SandboxConfig" in message
    assert "security: unknown key(s) allowed_hostz in SecurityPolicy" in message
    assert "strict=False" in message
    assert from_json(text, SandboxConfig, strict=False) == SandboxConfig(image="x")
    with pytest.raises(ConfigError, match=r"repository: unknown key\(s\) urll"):
        from_json('{"repository":{"urll":""}}', SandboxConfig)


def go() -> str | None:
    return shutil.which("go")


@pytest.mark.skipif(go() is None, reason="Go is not installed (make test-tools installs it)")
def test_live_go_round_trip(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "GOPATH": str(tmp_path / "gopath"),
        "GOCACHE": os.environ.get("GOCACHE", "/tmp/sandbox-test-gocache"),
        "GOPROXY": "off",  # standard library only: nothing may be downloaded
        "GOFLAGS": "",
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "0",
    }
    binary = tmp_path / "wire"
    subprocess.run([str(go()), "build", "-o", str(binary), "."], cwd=WIRE, env=env,
                   check=True, timeout=300)
    fresh = tmp_path / "golden"
    fresh.mkdir()
    subprocess.run([str(binary), "golden", str(fresh)], check=True, timeout=60)
    for path in sorted(fresh.iterdir()):
        assert path.read_text() == (GOLDEN / path.name).read_text(), (
            f"{path.name}: golden file is stale; run `go run . golden golden` in {WIRE}"
        )
    assert sorted(p.name for p in fresh.iterdir()) == sorted(p.name for p in GOLDEN.iterdir())
    back = tmp_path / "python"
    back.mkdir()
    for name in GOLDEN_NAMES:
        cls, text = golden(name)
        if name in INVALID_ZERO:
            # Go reads any value; write the closest valid one Python can hold.
            (back / f"{name}.json").write_text(text)
            continue
        (back / f"{name}.json").write_text(to_json(from_json(text, cls), indent=2))
    done = subprocess.run([str(binary), "check", str(back)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"ok: {len(GOLDEN_NAMES)} fixtures read back equal" in done.stdout


def test_utc_now_round_trips() -> None:
    usage = ResourceUsage(timestamp=datetime.now(UTC))
    assert from_json(to_json(usage), ResourceUsage) == usage
