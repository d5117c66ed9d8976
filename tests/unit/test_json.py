"""Go-compatible JSON: round trips, golden output, strict decoding and error paths."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import attrs
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
    SandboxStatus,
    SecurityPolicy,
)

T0 = datetime(2026, 11, 22, 1, 2, 3, 450000, tzinfo=UTC)
T1 = datetime(2026, 11, 22, 3, 4, 5, 123456, tzinfo=timezone(timedelta(hours=2)))


def full_limits() -> ResourceLimits:
    return ResourceLimits(
        cpu_limit=1.5,
        cpu_request=0.25,
        memory_limit=512 * 2**20,
        memory_request=256 * 2**20,
        disk_limit=2**30,
        disk_request=2**29,
        network_in_limit=1_000_000,
        network_out_limit=2_000_000,
        process_limit=256,
        file_limit=1024,
        wall_time_limit=timedelta(minutes=10),
        cpu_time_limit=timedelta(seconds=90, microseconds=5),
        allow_unbounded=("cpu_limit",),
    )


def full_security() -> SecurityPolicy:
    return SecurityPolicy(
        run_as_user="1000",
        run_as_group="1000",
        read_only_root=True,
        no_new_privileges=False,
        prevent_escalation=False,
        add_capabilities=["NET_BIND_SERVICE"],
        drop_capabilities=["ALL"],
        selinux_context="system_u:system_r:container_t:s0",
        apparmor_profile="docker-default",
        seccomp_profile="default.json",
        allow_networking=True,
        isolate_network=False,
        isolate_process=False,
        allow_host_pid=True,
        read_only_paths=["/etc"],
        masked_paths=["/proc/kcore"],
        tmpfs_paths=["/tmp"],
        enable_audit_log=True,
        log_security_events=True,
        allowed_hosts=["pypi.org"],
        blocked_hosts=["evil.example"],
        allowed_ports=[443],
    )


def full_git() -> GitConfig:
    return GitConfig(
        user_name="bot",
        user_email="bot@example.com",
        signing_key="ABCDEF",
        config_values={"core.autocrlf": "false"},
    )


def full_repository() -> RepositoryConfig:
    return RepositoryConfig(
        url="https://example.com/repo.git",
        branch="main",
        commit_hash="0123456789abcdef",
        local_path="/home/me/repo",
        mount_point="/src",
        read_only=True,
        git_config=full_git(),
        include_files=["*.py"],
        exclude_files=[".git"],
        permissions="0755",
        owner="1000",
        group="1000",
    )


def full_port() -> PortMapping:
    return PortMapping(host_port=8080, container_port=80, protocol="udp", host_ip="0.0.0.0")


def full_network() -> NetworkConfig:
    return NetworkConfig(
        isolated=False,
        bridge="sandbox-net",
        dns_servers=["1.1.1.1"],
        dns_search=["example.com"],
        http_proxy="http://proxy:3128",
        https_proxy="http://proxy:3128",
        no_proxy="localhost",
        port_mappings=[full_port(), PortMapping(container_port=443)],
        allowed_hosts=["pypi.org"],
        blocked_hosts=["evil.example"],
        allowed_ports=[80, 443],
        ingress_limit=10,
        egress_limit=20,
    )


def full_config() -> SandboxConfig:
    return SandboxConfig(
        type="podman",
        image="alpine:3.20",
        runtime="runsc",
        architecture="arm64",
        pull_policy="always",
        resources=full_limits(),
        security=full_security(),
        repository=full_repository(),
        network=full_network(),
        environment={"LANG": "C.UTF-8", "Ünicode": "✓"},
        working_dir="/src",
        tools=["git", "python"],
        mcp_servers=["fs"],
        timeout=timedelta(seconds=30),
        cleanup_delay=timedelta(milliseconds=1500),
        stats_interval=timedelta(seconds=5),
        labels={"team": "ai"},
        annotations={"note": "x"},
        name="sbx-1",
    )


def full_command() -> Command:
    return Command(
        executable="python3",
        args=["-c", "print(1)"],
        working_dir="/src",
        environment={"PYTHONUNBUFFERED": "1"},
        stdin_content="input\n",
        timeout=timedelta(seconds=10),
        idle_timeout=timedelta(seconds=2),
        user="nobody",
        allow_network=True,
        allow_write=False,
        restrict_paths=["/src"],
        max_output_bytes=4096,
        stdin=b"not serialised",
    )


def full_usage() -> ResourceUsage:
    return ResourceUsage(
        timestamp=T0,
        cpu_usage=150.5,
        cpu_time=timedelta(seconds=3, microseconds=250),
        memory_usage=1000,
        memory_percent=12.5,
        memory_peak=2000,
        disk_usage=3000,
        disk_reads=4000,
        disk_writes=5000,
        network_in=6000,
        network_out=7000,
        process_count=3,
        thread_count=8,
        file_handles=20,
        uptime=timedelta(hours=1),
    )


def full_result() -> CommandResult:
    return CommandResult(
        exit_code=137,
        success=False,
        stdout="out\n",
        stderr="err\n",
        combined="out\nerr\n",
        start_time=T0,
        end_time=T1,
        duration=timedelta(seconds=1, microseconds=500),
        resource_usage=full_usage(),
        error="killed",
        signal="SIGKILL",
        process_id=42,
        metadata={"k": "v"},
        timed_out=True,
        oom_killed=True,
        truncated=True,
        stdout_bytes=b"out\n",
        stderr_bytes=b"err\n",
    )


def full_file() -> FileInfo:
    return FileInfo(
        name="a.txt",
        path="/src/a.txt",
        size=12,
        mode=0o100644,
        mod_time=T1,
        is_dir=True,
        owner="root",
        group="root",
        permissions="-rw-r--r--",
        is_symlink=True,
        link_target="/src/b.txt",
    )


def full_info() -> SandboxInfo:
    return SandboxInfo(
        id="f00ba4",
        name="sbx-1",
        type="podman",
        status=SandboxStatus.FAILED,
        created_at=T0,
        started_at=T1,
        runtime="runsc",
        image="alpine:3.20",
        platform="linux/arm64",
        ip_address="172.17.0.2",
        mac_address="02:42:ac:11:00:02",
        hostname="sbx",
        allocated_resources=full_limits(),
        config=full_config(),
        labels={"a": "b"},
        annotations={"c": "d"},
        status_reason="OOM",
        exit_code=137,
        oom_killed=True,
    )


def full_chunk() -> OutputChunk:
    return OutputChunk(stream="stderr", data=b"\x00\xffbytes")


FULL = [
    full_limits,
    full_security,
    full_git,
    full_repository,
    full_port,
    full_network,
    full_config,
    full_command,
    full_usage,
    full_result,
    full_file,
    full_info,
    full_chunk,
]


def minimal_like(obj: Any) -> Any:
    """Build an instance of obj's class with only its required fields (taken from obj)."""
    fields = attrs.fields(type(obj))
    return type(obj)(**{f.name: getattr(obj, f.name) for f in fields if f.default is attrs.NOTHING})


@pytest.mark.parametrize("build", FULL, ids=lambda f: f.__name__)
def test_full_instances_set_every_field(build: Any) -> None:
    obj = build()
    defaults = minimal_like(obj)
    for field in attrs.fields(type(obj)):
        # A derived field (CommandResult.success) follows the others, never its default.
        if field.default is not attrs.NOTHING and not field.metadata.get("derived"):
            value, default = getattr(obj, field.name), getattr(defaults, field.name)
            assert value != default, f"{type(obj).__name__}.{field.name} left at its default"


@pytest.mark.parametrize("build", FULL, ids=lambda f: f.__name__)
def test_round_trip(build: Any) -> None:
    obj = build()
    text = to_json(obj)
    back = from_json(text, type(obj))
    assert back == obj
    assert to_json(back) == text
    assert from_json(text.encode(), type(obj)) == obj
    assert from_json(to_json(obj, indent=2), type(obj)) == obj


@pytest.mark.parametrize("build", FULL, ids=lambda f: f.__name__)
def test_round_trip_defaults(build: Any) -> None:
    minimal = minimal_like(build())
    assert from_json(to_json(minimal), type(minimal)) == minimal


GOLDEN_CONFIG = {
    "type": "docker",
    "image": "alpine:3.20",
    "runtime": "runc",
    "architecture": "amd64",
    "pull_policy": "never",
    "resources": {
        "cpu_limit": 0.5,
        "cpu_request": 0,
        "memory_limit": 268435456,
        "memory_request": 0,
        "disk_limit": 0,
        "disk_request": 0,
        "network_in_limit": 0,
        "network_out_limit": 0,
        "process_limit": 64,
        "file_limit": 0,
        "wall_time_limit": 90_000_000_000,
        "cpu_time_limit": 1_500_000,
        "allow_unbounded": [],
    },
    "security": {
        "run_as_user": "nobody",
        "run_as_group": "",
        "read_only_root": True,
        "no_new_privileges": True,
        "prevent_escalation": True,
        "add_capabilities": [],
        "drop_capabilities": ["ALL"],
        "selinux_context": "",
        "apparmor_profile": "",
        "seccomp_profile": "",
        "allow_networking": False,
        "isolate_network": True,
        "isolate_process": True,
        "allow_host_pid": False,
        "read_only_paths": [],
        "masked_paths": [],
        "tmpfs_paths": ["/tmp"],
        "enable_audit_log": False,
        "log_security_events": False,
        "allowed_hosts": [],
        "blocked_hosts": [],
        "allowed_ports": [],
    },
    # No repository: Go's zero RepositoryConfig, which Go always writes.
    "repository": {
        "url": "",
        "branch": "",
        "commit_hash": "",
        "local_path": "",
        "mount_point": "",
        "read_only": False,
        "git_config": {"user_name": "", "user_email": "", "signing_key": "", "config_values": None},
        "include_files": None,
        "exclude_files": None,
        "permissions": "",
        "owner": "",
        "group": "",
    },
    "network": {
        "isolated": True,
        "bridge": "",
        "dns_servers": [],
        "dns_search": [],
        "http_proxy": "",
        "https_proxy": "",
        "no_proxy": "",
        "port_mappings": [
            {"host_port": 0, "container_port": 8000, "protocol": "tcp", "host_ip": "127.0.0.1"}
        ],
        "allowed_hosts": [],
        "blocked_hosts": [],
        "allowed_ports": [],
        "ingress_limit": 0,
        "egress_limit": 0,
    },
    "environment": {"HOME": "/workspace"},
    "working_dir": "/workspace",
    "tools": [],
    "mcp_servers": [],
    "timeout": 30_000_000_000,
    "cleanup_delay": 0,
    "stats_interval": 1_000_000_000,
    "labels": {"team": "ai"},
    "annotations": {},
    "name": "",
}


def golden_config() -> SandboxConfig:
    return SandboxConfig(
        image="alpine:3.20",
        architecture="amd64",
        pull_policy="never",
        resources=ResourceLimits(
            cpu_limit=0.5,
            memory_limit=256 * 2**20,
            process_limit=64,
            wall_time_limit=90,
            cpu_time_limit=timedelta(milliseconds=1.5),
        ),
        security=SecurityPolicy(
            run_as_user="nobody",
            read_only_root=True,
            drop_capabilities=["ALL"],
            tmpfs_paths=["/tmp"],
        ),
        network=NetworkConfig(port_mappings=[PortMapping(container_port=8000)]),
        environment={"HOME": "/workspace"},
        timeout=30,
        labels={"team": "ai"},
    )


def test_golden_config() -> None:
    text = to_json(golden_config())
    assert json.loads(text) == GOLDEN_CONFIG
    # Compact like Go's json.Marshal, keys in field order.
    assert text.startswith('{"type":"docker","image":"alpine:3.20","runtime":"runc",')
    assert list(json.loads(text)) == list(GOLDEN_CONFIG)
    assert from_json(json.dumps(GOLDEN_CONFIG), SandboxConfig) == golden_config()


def test_golden_info_times_and_status() -> None:
    info = SandboxInfo(id="abc", status="running", created_at=T0, started_at=T1, exit_code=0)
    data = json.loads(to_json(info))
    assert data["status"] == "running"
    assert data["created_at"] == "2026-11-22T01:02:03.45Z"
    assert data["started_at"] == "2026-11-22T03:04:05.123456+02:00"
    assert data["exit_code"] == 0  # zero values are kept
    assert "exit_code" not in json.loads(to_json(SandboxInfo(id="abc", status="running")))


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "2024-01-02T03:04:05Z"),
        (datetime(2024, 1, 2, 3, 4, 5, 100, tzinfo=UTC), "2024-01-02T03:04:05.0001Z"),
        (
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone(-timedelta(hours=5, minutes=30))),
            "2024-01-02T03:04:05-05:30",
        ),
    ],
)
def test_time_format(value: datetime, text: str) -> None:
    usage = ResourceUsage(timestamp=value)
    assert json.loads(to_json(usage))["timestamp"] == text
    assert from_json(to_json(usage), ResourceUsage) == usage


def test_time_parsing_like_go() -> None:
    # Go writes nanoseconds; Python keeps microseconds (truncated).
    got = from_json('{"timestamp":"2026-11-22T01:48:00.194016722+02:00"}', ResourceUsage)
    assert got.timestamp == datetime(
        2026, 11, 22, 1, 48, 0, 194016, tzinfo=timezone(timedelta(hours=2))
    )
    assert from_json('{"timestamp":null}', ResourceUsage).timestamp is None


def test_duration_nanoseconds() -> None:
    assert json.loads(to_json(Command(timeout=timedelta(microseconds=1))))["timeout"] == 1000
    got = from_json('{"timeout": 1999, "idle_timeout": 3600000000000}', Command)
    assert got.timeout == timedelta(microseconds=1)  # sub-microsecond part truncated
    assert got.idle_timeout == timedelta(hours=1)


def test_excluded_fields_never_serialised() -> None:
    cmd_json = json.loads(to_json(full_command()))
    assert "stdin" not in cmd_json
    result_json = json.loads(to_json(full_result()))
    assert "stdout_bytes" not in result_json
    assert "stderr_bytes" not in result_json
    # And never read back: unknown keys when strict, ignored otherwise.
    text = '{"executable":"ls","stdin":"x","stdout_bytes":"eA=="}'
    assert "unknown key(s) stdin, stdout_bytes in Command" in decode_error(text, Command)
    assert from_json(text, Command, strict=False).stdin is None


def test_unknown_keys_refused_unless_lenient() -> None:
    text = '{"image":"x","future_field":{"a":1},"resources":{"gpu":2}}'
    message = decode_error(text)
    assert "unknown key(s) future_field in SandboxConfig" in message
    assert "resources: unknown key(s) gpu in ResourceLimits" in message
    assert from_json(text, SandboxConfig, strict=False) == SandboxConfig(image="x")


def test_missing_keys_take_defaults() -> None:
    assert from_json("{}", SandboxConfig) == SandboxConfig()
    assert from_json('{"repository":{}}', SandboxConfig).repository is None  # Go's zero
    assert from_json('{"repository":{"branch":"b"}}', SandboxConfig).repository == (
        RepositoryConfig(branch="b")
    )


def test_null_is_an_empty_collection() -> None:
    """Go writes null for a nil slice or map."""
    got = from_json('{"tools":null,"environment":null,"network":{"port_mappings":null}}',
                    SandboxConfig)
    assert got == SandboxConfig()
    assert from_json('{"stream":"stdout","data":null}', OutputChunk).data == b""


def test_float_accepts_int() -> None:
    got = from_json('{"cpu_limit": 2}', ResourceLimits)
    assert got.cpu_limit == 2.0
    assert isinstance(got.cpu_limit, float)


def test_bytes_are_base64() -> None:
    assert json.loads(to_json(OutputChunk(stream="stdout", data=b"hi\n")))["data"] == "aGkK"


def decode_error(text: str | bytes, cls: type[Any] = SandboxConfig) -> str:
    with pytest.raises(ConfigError) as info:
        from_json(text, cls)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"resources":{"memory_limit":"5"}}', "resources.memory_limit: expected int, got str '5'"),
        ('{"resources":{"memory_limit":1.9}}', "resources.memory_limit: expected int, got float"),
        ('{"resources":{"memory_limit":true}}', "resources.memory_limit: expected int, got bool"),
        ('{"resources":{"cpu_limit":"1"}}', "resources.cpu_limit: expected float, got str"),
        ('{"resources":{"cpu_limit":false}}', "resources.cpu_limit: expected float, got bool"),
        ('{"image":5}', "image: expected str, got int 5"),
        ('{"security":{"read_only_root":1}}', "security.read_only_root: expected bool, got int"),
        ('{"timeout":1.5}', "timeout: expected integer nanoseconds, got float"),
        ('{"timeout":"30s"}', "timeout: expected integer nanoseconds, got str"),
        ('{"tools":"git"}', "tools: expected array, got str 'git'"),
        ('{"tools":["git",3]}', "tools[1]: expected str, got int 3"),
        ('{"environment":[]}', "environment: expected object, got list"),
        ('{"environment":{"A":1}}', 'environment["A"]: expected str, got int 1'),
        ('{"resources":[]}', "resources: expected object, got list"),
        ('{"repository":{"git_config":{"user_name":1}}}', "repository.git_config.user_name:"),
        (
            '{"network":{"port_mappings":[{"host_port":1}]}}',
            "network.port_mappings[0].container_port: required field missing",
        ),
        (
            '{"network":{"port_mappings":[{"container_port":"80"}]}}',
            "network.port_mappings[0].container_port: expected int, got str",
        ),
        ('{"network":{"allowed_ports":[80,"x"]}}', "network.allowed_ports[1]: expected int"),
    ],
)
def test_strict_types_with_paths(text: str, problem: str) -> None:
    message = decode_error(text)
    assert message.startswith("invalid SandboxConfig JSON: ")
    assert problem in message


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"resources":{"memory_limit":-1}}', "resources.memory_limit must be >= 0, got -1"),
        ('{"timeout":-1000}', "timeout must be >= 0"),
        ('{"pull_policy":"sometimes"}', "pull_policy must be one of missing, always, never"),
        (
            '{"network":{"port_mappings":[{"container_port":0}]}}',
            "network.port_mappings[0].container_port must be in 1..65535, got 0",
        ),
        (
            '{"network":{"port_mappings":[{"container_port":80,"protocol":"sctp"}]}}',
            "network.port_mappings[0].protocol must be one of tcp, udp",
        ),
        ('{"network":{"allowed_ports":[0]}}', "network.allowed_ports[0] must be in 1..65535"),
        ('{"repository":{"permissions":"rwx"}}', "repository.permissions must be empty or octal"),
    ],
)
def test_validation_errors_with_paths(text: str, problem: str) -> None:
    assert problem in decode_error(text)


def test_several_errors_joined() -> None:
    message = decode_error('{"image":1,"resources":{"memory_limit":"5"},"tools":{}}')
    details = message.removeprefix("invalid SandboxConfig JSON: ")
    assert details.split("; ") == [
        "image: expected str, got int 1",
        "resources.memory_limit: expected int, got str '5'",
        "tools: expected array, got dict {}",
    ]


def test_unknown_enum_value() -> None:
    message = decode_error('{"id":"x","status":"zombie"}', SandboxInfo)
    assert "status: expected one of creating, starting, running" in message
    assert "got 'zombie'" in message
    assert "status: expected SandboxStatus string, got int" in decode_error(
        '{"id":"x","status":3}', SandboxInfo
    )


def test_missing_required_field() -> None:
    assert "container_port: required field missing" in decode_error('{"host_port":80}', PortMapping)
    message = decode_error('{"status":"running"}', SandboxInfo)
    assert "id: required field missing" in message


@pytest.mark.parametrize(
    "text",
    ['{"image":', "", "not json", b"\xff\xfe{", '{"a":1}}', '{"cpu_limit":NaN}', "Infinity"],
)
def test_malformed_json(text: str | bytes) -> None:
    assert "malformed JSON" in decode_error(text, ResourceLimits)


def test_top_level_must_be_object() -> None:
    assert "expected object, got list" in decode_error("[]")
    assert "expected object, got NoneType" in decode_error("null")


@pytest.mark.parametrize(
    "value", ["2024-01-02T03:04:05", "2024-01-02", "yesterday", "2024-01-02 03:04:05Z"]
)
def test_bad_times(value: str) -> None:
    message = decode_error(json.dumps({"timestamp": value}), ResourceUsage)
    assert "timestamp: expected RFC 3339 time with offset" in message


def test_error_has_cause() -> None:
    with pytest.raises(ConfigError) as info:
        from_json('{"image":1}', SandboxConfig)
    assert info.value.__cause__ is not None
    assert info.value.code == "CONFIG_ERROR"


def test_to_json_indent() -> None:
    text = to_json(PortMapping(container_port=80), indent=2)
    assert text.startswith('{\n  "host_port": 0,')


def test_to_json_lists() -> None:
    ports = [PortMapping(container_port=80)]
    assert json.loads(to_json(ports)) == [
        {"host_port": 0, "container_port": 80, "protocol": "tcp", "host_ip": "127.0.0.1"}
    ]
    assert from_json(to_json(ports), list[PortMapping]) == ports
