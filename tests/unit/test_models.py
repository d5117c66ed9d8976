"""Model construction: defaults, conversions and validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from sandbox._constants import (
    DEFAULT_IMAGE,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_STATS_INTERVAL,
    DEFAULT_WORKING_DIR,
)
from sandbox._errors import CommandExecutionFailed, ConfigError
from sandbox._json import from_json, to_json
from sandbox._models import (
    MAX_DURATION,
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


def test_default_config_is_isolated() -> None:
    config = SandboxConfig()
    assert config.type == "docker"
    assert config.image == DEFAULT_IMAGE
    assert config.runtime == "runc"
    assert config.pull_policy == "missing"
    assert config.working_dir == DEFAULT_WORKING_DIR == "/workspace"
    assert config.network.isolated
    assert config.security.no_new_privileges
    assert config.security.isolate_network
    assert not config.security.allow_networking
    assert config.repository is None
    assert config.timeout == timedelta(0)
    assert config.stats_interval == DEFAULT_STATS_INTERVAL
    assert config == SandboxConfig()


def test_command_defaults() -> None:
    cmd = Command()
    assert cmd.max_output_bytes == DEFAULT_MAX_OUTPUT_BYTES
    assert cmd.allow_write
    assert not cmd.allow_network
    assert cmd.stdin is None


def test_frozen() -> None:
    config = SandboxConfig()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        config.image = "other"  # type: ignore[misc]


@pytest.mark.parametrize("seconds", [5, 2.5, 0])
def test_timedelta_accepts_seconds(seconds: float) -> None:
    expected = timedelta(seconds=seconds)
    assert Command(timeout=seconds).timeout == expected
    assert SandboxConfig(timeout=seconds, cleanup_delay=seconds).cleanup_delay == expected
    assert ResourceLimits(wall_time_limit=seconds).wall_time_limit == expected
    assert CommandResult(duration=seconds).duration == expected


def test_timedelta_rejects_other_types() -> None:
    with pytest.raises(ConfigError, match=r"^timeout must be a timedelta or a number of seconds"):
        Command(timeout="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^timeout "):
        Command(timeout=True)


_DURATION_FIELDS: list[tuple[Any, str]] = [
    (lambda v: Command(timeout=v), "timeout"),
    (lambda v: Command(idle_timeout=v), "idle_timeout"),
    (lambda v: ResourceLimits(wall_time_limit=v), "wall_time_limit"),
    (lambda v: ResourceLimits(cpu_time_limit=v), "cpu_time_limit"),
    (lambda v: SandboxConfig(timeout=v), "timeout"),
    (lambda v: SandboxConfig(cleanup_delay=v), "cleanup_delay"),
    (lambda v: SandboxConfig(stats_interval=v), "stats_interval"),
    (lambda v: ResourceUsage(cpu_time=v), "cpu_time"),
    (lambda v: ResourceUsage(uptime=v), "uptime"),
    (lambda v: CommandResult(duration=v), "duration"),
]


@pytest.mark.parametrize(("build", "field"), _DURATION_FIELDS)
@pytest.mark.parametrize(
    ("seconds", "problem"),
    [
        (float("nan"), "must be a finite number of seconds, got nan"),
        (float("inf"), "must be a finite number of seconds, got inf"),
        (float("-inf"), "must be a finite number of seconds, got -inf"),
        (1e20, "must be within 9223372037 seconds"),
        (-1e20, "must be within 9223372037 seconds"),
        (10**20, "must be within 9223372037 seconds"),
    ],
)
def test_duration_seconds_must_be_finite_and_in_range(
    build: Any, field: str, seconds: float, problem: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build(seconds)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith(f"{field} {problem}")


def test_duration_range_edges() -> None:
    """The range is what Go's time.Duration (int64 nanoseconds) can carry on the wire."""
    assert timedelta(microseconds=(2**63 - 1) // 1000) == MAX_DURATION
    assert Command(timeout=MAX_DURATION).timeout == MAX_DURATION
    assert Command(timeout=9_223_372_036).timeout == timedelta(seconds=9_223_372_036)
    assert Command(timeout=1e-7).timeout == timedelta(0)
    with pytest.raises(ConfigError, match=r"^timeout must be within .*Go's time.Duration"):
        Command(timeout=9_223_372_037)
    with pytest.raises(ConfigError, match=r"^timeout must be within"):
        Command(timeout=timedelta.max)
    with pytest.raises(ConfigError, match=r"^timeout must be a finite number of seconds, got nan$"):
        attrs.evolve(Command(), timeout=float("nan"))


_INT_FIELDS: list[tuple[Any, str]] = [
    (lambda v: ResourceLimits(memory_limit=v), "memory_limit"),
    (lambda v: ResourceLimits(process_limit=v), "process_limit"),
    (lambda v: ResourceLimits(file_limit=v), "file_limit"),
    (lambda v: NetworkConfig(ingress_limit=v), "ingress_limit"),
    (lambda v: Command(max_output_bytes=v), "max_output_bytes"),
    (lambda v: ResourceUsage(memory_usage=v), "memory_usage"),
    (lambda v: ResourceUsage(thread_count=v), "thread_count"),
    (lambda v: CommandResult(process_id=v), "process_id"),
    (lambda v: FileInfo(name="a", path="/a", size=v), "size"),
    (lambda v: FileInfo(name="a", path="/a", mode=v), "mode"),
]


@pytest.mark.parametrize(("build", "field"), _INT_FIELDS)
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (1.5, "must be an int, got float 1.5"),
        (2.0, "must be an int, got float 2.0"),
        (float("nan"), "must be an int, got float nan"),
        (True, "must be an int, got bool True"),
        (False, "must be an int, got bool False"),
        ("5", "must be an int, got str '5'"),
        (None, "must be an int, got NoneType None"),
        (2**63, "must be at most 9223372036854775807 (int64), got 9223372036854775808"),
        (2**200, "must be at most 9223372036854775807 (int64), got an int of 201 bits"),
    ],
)
def test_int_fields_reject_non_ints(build: Any, field: str, value: Any, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        build(value)
    assert isinstance(info.value, ValueError)
    assert info.value.message == f"{field} {problem}"


@pytest.mark.parametrize(("build", "field"), _INT_FIELDS)
def test_int_fields_accept_ints(build: Any, field: str) -> None:
    for value in (0, 1, 2**63 - 1):
        assert getattr(build(value), field) == value


@pytest.mark.parametrize(
    ("build", "error", "message"),
    [
        (lambda: ResourceLimits(cpu_limit=10**400), ConfigError, "cpu_limit is too large"),
        (lambda: ResourceLimits(cpu_limit=float("inf")), ConfigError, "cpu_limit must be finite"),
        (lambda: ResourceLimits(cpu_limit="2"), ConfigError, "cpu_limit must be a number"),  # type: ignore[arg-type]
        (lambda: SandboxConfig(tools="git"), ConfigError, "tools must be an iterable of str"),
        (lambda: NetworkConfig(allowed_ports=5), ConfigError, "allowed_ports must be an iterable"),  # type: ignore[arg-type]
        (lambda: NetworkConfig(port_mappings=5), ConfigError, "port_mappings must be an iterable"),  # type: ignore[arg-type]
        (lambda: SandboxConfig(environment=5), ConfigError, "environment must be a mapping"),  # type: ignore[arg-type]
        (lambda: GitConfig(config_values=["abc"]), ConfigError, "config_values must be a mapping"),  # type: ignore[arg-type]
        (lambda: PortMapping(container_port=2**200), ConfigError, "container_port must be in"),
    ],
)
def test_converter_errors_name_the_field(build: Any, error: type, message: str) -> None:
    with pytest.raises(error) as info:
        build()
    assert str(info.value).startswith(message)


def test_json_round_trips_extreme_values_and_names_paths() -> None:
    config = SandboxConfig(
        timeout=MAX_DURATION,
        resources=ResourceLimits(memory_limit=2**63 - 1,
                                 wall_time_limit=MAX_DURATION - timedelta(microseconds=1)),
    )
    assert from_json(to_json(config), SandboxConfig) == config
    with pytest.raises(ConfigError, match=r"^invalid .*timeout: integer nanoseconds out of"):
        from_json('{"timeout": 9223372036854775808}', SandboxConfig)
    with pytest.raises(ConfigError, match=r"resources\.memory_limit must be at most"):
        from_json('{"resources":{"memory_limit":9223372036854775808}}', SandboxConfig)
    with pytest.raises(ConfigError, match=r"resources\.memory_limit: expected int, got float"):
        from_json('{"resources":{"memory_limit":1.5}}', SandboxConfig)
    with pytest.raises(ConfigError, match=r"resources\.wall_time_limit: expected integer"):
        from_json('{"resources":{"wall_time_limit":1e20}}', SandboxConfig)


def test_float_fields_convert_ints() -> None:
    limits = ResourceLimits(cpu_limit=2)
    assert limits.cpu_limit == 2.0
    assert isinstance(limits.cpu_limit, float)
    with pytest.raises(ConfigError):
        ResourceLimits(cpu_limit="2")  # type: ignore[arg-type]


def test_lists_become_tuples_and_dicts_are_copied() -> None:
    caps = ["NET_ADMIN"]
    env = {"A": "1"}
    config = SandboxConfig(
        tools=["git"],
        environment=env,
        security=SecurityPolicy(add_capabilities=caps),
        network=NetworkConfig(
            dns_servers=["1.1.1.1"],
            port_mappings=[PortMapping(container_port=80)],
            allowed_ports=[443],
        ),
    )
    assert config.tools == ("git",)
    assert config.security.add_capabilities == ("NET_ADMIN",)
    assert config.network.port_mappings == (PortMapping(container_port=80),)
    assert config.network.allowed_ports == (443,)
    env["B"] = "2"
    assert config.environment == {"A": "1"}


def test_single_string_is_not_a_list() -> None:
    with pytest.raises(ConfigError, match="str"):
        SandboxConfig(tools="git")


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: ResourceLimits(memory_limit=-1), "memory_limit"),
        (lambda: ResourceLimits(cpu_limit=-0.5), "cpu_limit"),
        (lambda: ResourceLimits(cpu_limit=float("nan")), "cpu_limit"),
        (lambda: ResourceLimits(process_limit=-1), "process_limit"),
        (lambda: ResourceLimits(wall_time_limit=-1), "wall_time_limit"),
        (lambda: ResourceLimits(cpu_time_limit=timedelta(seconds=-1)), "cpu_time_limit"),
        (lambda: NetworkConfig(ingress_limit=-1), "ingress_limit"),
        (lambda: NetworkConfig(allowed_ports=[80, 0]), "allowed_ports[1]"),
        (lambda: NetworkConfig(allowed_ports=[65536]), "allowed_ports[0]"),
        (lambda: PortMapping(container_port=0), "container_port"),
        (lambda: PortMapping(container_port=70000), "container_port"),
        (lambda: PortMapping(container_port=80, host_port=-1), "host_port"),
        (lambda: PortMapping(container_port=80, host_port=65536), "host_port"),
        (lambda: PortMapping(container_port=80, protocol="sctp"), "protocol"),
        (lambda: SandboxConfig(pull_policy="sometimes"), "pull_policy"),
        (lambda: SandboxConfig(timeout=-1), "timeout"),
        (lambda: SandboxConfig(stats_interval=-0.1), "stats_interval"),
        (lambda: SandboxConfig(environment={"A=B": "1"}), "environment"),
        (lambda: SandboxConfig(environment={"": "1"}), "environment"),
        (lambda: RepositoryConfig(permissions="rwx"), "permissions"),
        (lambda: RepositoryConfig(permissions="0955"), "permissions"),
        (lambda: Command(executable="ls\0"), "executable"),
        (lambda: Command(args=["ok", "bad\0"]), "args[1]"),
        (lambda: Command(environment={"K\0": "v"}), "environment"),
        (lambda: Command(environment={"K": "v\0"}), "environment['K']"),
        (lambda: Command(max_output_bytes=-1), "max_output_bytes"),
        (lambda: Command(idle_timeout=-5), "idle_timeout"),
        (lambda: ResourceUsage(memory_usage=-1), "memory_usage"),
        (lambda: ResourceUsage(process_count=-1), "process_count"),
        (lambda: CommandResult(process_id=-1), "process_id"),
        (lambda: FileInfo(name="a", path="/a", size=-1), "size"),
        (lambda: SandboxInfo(id="x", status="zombie"), "status"),
        (lambda: OutputChunk(stream="stdin", data=b""), "stream"),  # type: ignore[arg-type]
    ],
)
def test_validation_names_the_field(build: Any, field: str) -> None:
    with pytest.raises(ValueError) as info:
        build()
    assert isinstance(info.value, ConfigError)
    assert str(info.value).startswith(field)


def test_validation_message() -> None:
    # The unit is said: a memory size is bytes (issue 30).
    with pytest.raises(ValueError, match=r"^memory_limit must be >= 0, got -1: the unit is "
                       r"bytes: 512 MiB is 512 << 20 \(536870912\)$"):
        ResourceLimits(memory_limit=-1)


def test_valid_edges() -> None:
    assert PortMapping(container_port=65535, host_port=0).host_port == 0
    assert PortMapping(container_port=1, host_port=65535, protocol="udp").protocol == "udp"
    assert RepositoryConfig(permissions="0755").permissions == "0755"
    assert RepositoryConfig(permissions="644").permissions == "644"
    for policy in ("missing", "always", "never"):
        assert SandboxConfig(pull_policy=policy).pull_policy == policy


@pytest.mark.parametrize(
    "build",
    [
        lambda t: ResourceUsage(timestamp=t),
        lambda t: CommandResult(start_time=t),
        lambda t: CommandResult(end_time=t),
        lambda t: FileInfo(name="a", path="/a", mod_time=t),
        lambda t: SandboxInfo(id="x", status="running", created_at=t),
        lambda t: SandboxInfo(id="x", status="running", started_at=t),
    ],
)
def test_naive_datetime_rejected(build: Any) -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        build(datetime(2024, 1, 1, 12, 0))
    aware = datetime(2024, 1, 1, 12, 0, tzinfo=UTC)
    build(aware)


def test_status_accepts_strings() -> None:
    info = SandboxInfo(id="abc", status="running")
    assert info.status is SandboxStatus.RUNNING
    assert info.status.value == "running"
    assert str(SandboxStatus.FAILED) == "failed"
    assert [s.value for s in SandboxStatus] == [
        "creating",
        "starting",
        "running",
        "paused",
        "stopping",
        "stopped",
        "failed",
        "destroyed",
    ]


def test_required_fields() -> None:
    with pytest.raises(TypeError):
        PortMapping()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        SandboxInfo(status="running")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        FileInfo(name="a")  # type: ignore[call-arg]


def test_command_shell() -> None:
    cmd = Command.shell("echo hi && ls", timeout=3, working_dir="/tmp")
    assert cmd.executable == "/bin/sh"
    assert cmd.args == ("-c", "echo hi && ls")
    assert cmd.timeout == timedelta(seconds=3)
    assert cmd.working_dir == "/tmp"


def test_command_argv() -> None:
    cmd = Command.argv(["python3", "-c", "print(1)"], user="nobody")
    assert cmd.executable == "python3"
    assert cmd.args == ("-c", "print(1)")
    assert cmd.user == "nobody"
    assert Command.argv(("true",)).args == ()
    with pytest.raises(ValueError, match="argv must not be empty"):
        Command.argv([])
    with pytest.raises(ConfigError):
        Command.argv("ls -l")
    with pytest.raises(ValueError, match=r"args\[0\]"):
        Command.argv(["echo", "a\0b"])


def test_stdin_not_compared() -> None:
    assert Command(stdin=b"abc") == Command(stdin="xyz")
    assert Command(stdin_content="a") != Command(stdin_content="b")


def test_raw_output_not_compared_or_shown() -> None:
    result = CommandResult(stdout="hi\n", stdout_bytes=b"hi\n", stderr_bytes=b"err")
    assert result == CommandResult(stdout="hi\n")
    assert "stdout_bytes" not in repr(result)
    assert "stderr_bytes" not in repr(result)
    assert result.stdout_bytes == b"hi\n"


def test_git_config_in_repository() -> None:
    repo = RepositoryConfig(
        url="https://example.com/r.git",
        git_config=GitConfig(user_name="bot", config_values={"core.autocrlf": "false"}),
    )
    assert repo.mount_point == "/workspace"
    assert repo.git_config.config_values == {"core.autocrlf": "false"}


def test_evolve_revalidates() -> None:
    config = SandboxConfig()
    assert attrs.evolve(config, image="alpine:3").image == "alpine:3"
    with pytest.raises(ValueError, match="pull_policy"):
        attrs.evolve(config, pull_policy="bad")


# Every field of every model, given values of the wrong type: a ConfigError at construction
# naming the field and the class, what was expected and got, and what to set instead.

_MODELS: list[type] = [
    ResourceLimits, SecurityPolicy, GitConfig, RepositoryConfig, PortMapping, NetworkConfig,
    SandboxConfig, Command, ResourceUsage, CommandResult, FileInfo, SandboxInfo, OutputChunk,
]
#: What each model needs besides the field under test.
_REQUIRED: dict[type, dict[str, Any]] = {
    PortMapping: {"container_port": 80},
    FileInfo: {"name": "a", "path": "/a"},
    SandboxInfo: {"id": "x", "status": "running"},
    OutputChunk: {"stream": "stdout", "data": b""},
}
_NESTED = [{}, {"memory_limit": 1}, "x", 0]
#: Wrong values per field annotation.
_WRONG: dict[str, list[Any]] = {
    "str": [1, None, b"x", 1.5, ["a"]],
    "str | LazyText": [1, None, b"x", 1.5, ["a"]],
    "bool": ["yes", 1, 0, None, "True"],
    "int": [1.5, "1", True, None, b"1"],
    "int | None": ["0", 1.0, False],
    "float": ["1", True, None, [1]],
    "timedelta": ["5", "5s", True, None],
    "datetime | None": ["2024-01-01T00:00:00Z", 0, 1.5],
    "bytes": ["x", bytearray(b"x"), None],
    "tuple[str, ...]": ["x", b"x", [1], ["a", None], None, 5, {"a": "b"}],
    "tuple[int, ...]": ["80", 80, ["80"], [True], [1.5], None],
    "tuple[PortMapping, ...]": [{"container_port": 80}, [{"container_port": 80}], None, 5],
    "Mapping[str, str]": [["a"], [("a", "b")], {1: "a"}, {"a": 1}, {"a": None}, None, "a=b"],
    "SandboxStatus": [3, None, True],
    "ResourceLimits": _NESTED,
    "SecurityPolicy": _NESTED,
    "NetworkConfig": _NESTED,
    "GitConfig": _NESTED,
    "ResourceUsage": _NESTED,
    "ResourceUsage | LazyUsage": _NESTED,
    "SandboxConfig": _NESTED,
    "RepositoryConfig | None": [{}, {"url": "x"}, "https://x"],
    "bytes | str | AsyncIterable[bytes] | None": [bytearray(b"x"), 5, [b"x"]],
    "Literal['stdout', 'stderr']": [1, None, b"stdout"],
}
_TYPE_CASES = [
    pytest.param(cls, field.alias, value, id=f"{cls.__name__}.{field.alias}={value!r}")
    for cls in _MODELS
    for field in attrs.fields(cls)
    for value in _WRONG[cls.__annotations__[field.name]]
    # None leaves CommandResult.success to be derived from the exit code.
    if not (field.metadata.get("derived") and value is None)
]


def test_every_field_has_wrong_type_cases() -> None:
    for cls in _MODELS:
        for field in attrs.fields(cls):
            annotation = cls.__annotations__[field.name]
            assert annotation in _WRONG, f"{cls.__name__}.{field.name}: add wrong values"


@pytest.mark.parametrize(("cls", "field", "value"), _TYPE_CASES)
def test_wrong_types_are_config_errors(cls: type, field: str, value: Any) -> None:
    kwargs = {**_REQUIRED.get(cls, {}), field: value}
    with pytest.raises(ConfigError) as info:
        cls(**kwargs)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.message.startswith(field), err.message
    assert " must be " in err.message
    assert " got " in err.message
    assert f"set {cls.__name__}.{field} to " in err.details, str(err)
    assert "\n" not in str(err)


def test_wrong_type_messages() -> None:
    with pytest.raises(ConfigError) as info:
        SandboxConfig(resources={"memory_limit": 2**30})  # type: ignore[arg-type]
    assert str(info.value) == (
        "resources must be a ResourceLimits, got dict {'memory_limit': 1073741824}: set "
        "SandboxConfig.resources to ResourceLimits(...) (nested configs are not built from "
        "dicts; from_json() reads JSON)"
    )
    with pytest.raises(ConfigError) as info:
        SecurityPolicy(read_only_root="yes")  # type: ignore[arg-type]
    assert str(info.value) == (
        "read_only_root must be a bool, got str 'yes': set SecurityPolicy.read_only_root to "
        "True or False"
    )
    with pytest.raises(ConfigError) as info:
        SandboxConfig(environment={"A": 1})  # type: ignore[dict-item]
    assert str(info.value) == (
        "environment['A'] must be a str, got int 1: set SandboxConfig.environment to a dict "
        "of str to str"
    )
    with pytest.raises(ConfigError, match=r"^memory_limit must be an int, got str '1g': set "
                       r"ResourceLimits.memory_limit to an int of bytes \(512 MiB is 512 << "
                       r"20\)$"):
        ResourceLimits(memory_limit="1g")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^cpu_limit must be a number, got str 'x'"):
        ResourceLimits(cpu_limit="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^environment key 1 must be a str, got int 1"):
        SandboxConfig(environment={1: "a"})  # type: ignore[dict-item]


def test_long_values_are_cut_in_messages() -> None:
    with pytest.raises(ConfigError) as info:
        SandboxConfig(image=["x" * 1000])  # type: ignore[arg-type]
    assert len(str(info.value)) < 250
    assert "..." in str(info.value)


def test_wrong_types_through_evolve() -> None:
    with pytest.raises(ConfigError, match=r"^no_new_privileges must be a bool, got int 0"):
        attrs.evolve(SecurityPolicy(), no_new_privileges=0)


@pytest.mark.asyncio
@pytest.mark.parametrize("config", [{}, {"image": "alpine"}, "alpine", ResourceLimits()])
async def test_sandboxes_refuse_a_config_of_another_type(config: Any) -> None:
    """A dict of settings used to fail later with an AttributeError (or, empty, be ignored)."""
    from sandbox import Sandbox, SandboxStatus
    from sandbox.testing import FakeSandbox

    message = r"^config must be a SandboxConfig, got .*: pass SandboxConfig\(\.\.\.\)"
    with pytest.raises(ConfigError, match=message):
        Sandbox(config)
    with pytest.raises(ConfigError, match=message):
        FakeSandbox(config)
    with pytest.raises(ConfigError, match=message):
        await FakeSandbox().initialize(config)
    docker = Sandbox()
    with pytest.raises(ConfigError, match=message):
        await docker.initialize(config)
    # A corrected retry is still possible: the refusal came before anything started.
    assert docker.status is SandboxStatus.CREATING and not docker._life.initialized


# CommandResult.success follows the exit code; check() turns a failure into an exception.


@pytest.mark.parametrize(
    ("kwargs", "success"),
    [
        ({"exit_code": 0}, True),
        ({}, False),  # exit_code -1: unknown
        ({"exit_code": 1}, False),
        ({"exit_code": 0, "timed_out": True}, False),
        ({"exit_code": 0, "success": False}, False),  # Go's zero value
    ],
)
def test_success_is_derived_from_the_exit_code(kwargs: dict[str, Any], success: bool) -> None:
    assert CommandResult(**kwargs).success is success


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [({"exit_code": 1}, "exit_code is 1"), ({"exit_code": 0, "timed_out": True}, "timed out")],
)
def test_success_that_disagrees_with_the_exit_code_is_refused(
    kwargs: dict[str, Any], why: str
) -> None:
    with pytest.raises(ConfigError, match=f"^success must be False when .*{why}"):
        CommandResult(success=True, **kwargs)
    with pytest.raises(ConfigError, match=r"^success"):
        attrs.evolve(CommandResult(exit_code=0), **kwargs)


def test_check_returns_a_success_and_raises_with_the_result_otherwise() -> None:
    ok = CommandResult(exit_code=0)
    assert ok.check() is ok
    failed = CommandResult(exit_code=3, stderr="no such file\n")
    with pytest.raises(CommandExecutionFailed, match="exited with code 3: no such file") as info:
        failed.check()
    assert info.value.result is failed
    killed = CommandResult(exit_code=137, timed_out=True, signal="SIGKILL", error="timeout")
    with pytest.raises(CommandExecutionFailed, match="timed out: timeout") as info:
        killed.check()
    assert info.value.result is killed


# Frozen models hold frozen mappings: hashable, and not changeable through what they expose.

_MAPPINGS: list[tuple[Any, str]] = [
    (lambda m: SandboxConfig(environment=m), "environment"),
    (lambda m: SandboxConfig(labels=m), "labels"),
    (lambda m: SandboxConfig(annotations=m), "annotations"),
    (lambda m: Command(environment=m), "environment"),
    (lambda m: GitConfig(config_values=m), "config_values"),
    (lambda m: CommandResult(metadata=m), "metadata"),
    (lambda m: SandboxInfo(id="x", status="running", labels=m), "labels"),
    (lambda m: SandboxInfo(id="x", status="running", annotations=m), "annotations"),
]


@pytest.mark.parametrize(("build", "field"), _MAPPINGS)
def test_mappings_are_frozen_and_models_hashable(build: Any, field: str) -> None:
    given = {"A": "1"}
    obj = build(given)
    held = getattr(obj, field)
    with pytest.raises(TypeError):
        held["A"] = "2"
    with pytest.raises(AttributeError):
        held.clear()
    given["A"] = "3"  # the caller's dict is not shared either
    assert held == {"A": "1"} and dict(held) == {"A": "1"}
    assert hash(obj) == hash(build({"A": "1"}))
    assert obj == build({"A": "1"}) and obj != build({"A": "2"})
    assert {obj, build({"A": "1"})} == {obj}


def test_nested_configs_are_hashable() -> None:
    config = SandboxConfig(
        environment={"A": "1"},
        repository=RepositoryConfig(url="x", git_config=GitConfig(config_values={"k": "v"})),
    )
    assert hash(config) == hash(attrs.evolve(config))
