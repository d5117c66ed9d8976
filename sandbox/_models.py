"""Value types for sandbox configuration, commands and results.

All are frozen attrs classes with keyword-only constructors. Sizes and counts are ints
(not floats or bools) up to 2**63-1, durations are `datetime.timedelta` (constructors also
accept finite int/float seconds within timedelta's range), times are timezone-aware datetimes.
Every field is type-checked at construction from its annotation: str fields take str, bool
fields only True/False (not "yes" or 1), nested configs only their class (a dict is refused;
`from_json` builds nested configs from JSON). Invalid values and values of the wrong type raise
`ConfigError` (a `ValueError`) whose message starts with the field name and, for a wrong type,
says what was expected and got, and how to set ``Class.field``. Collections are stored as
tuples; mappings as `FrozenMap` copies, so every model is hashable and none can be changed
through a mapping it exposes. The converters, validators and type checks are `_validate`'s.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

import attrs

from ._constants import (
    ANNOTATION_TOOL,
    DEFAULT_IMAGE,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_PULL_POLICY,
    DEFAULT_RUNTIME,
    DEFAULT_STATS_INTERVAL,
    DEFAULT_TYPE,
    DEFAULT_WORKING_DIR,
)
from ._errors import CommandExecutionFailed, ConfigError
from ._lazy_usage import LazyUsage
from ._output import LazyText, text_of

# Re-exported: the SDK and its tests import these from here.
from ._validate import MAX_DURATION as MAX_DURATION
from ._validate import (
    ZERO,
    FrozenMap,
    check_aware,
    check_env,
    check_host_port,
    check_octal,
    check_port,
    check_ports,
    field_name,
    memory_bytes,
    named_converters,
    no_nul,
    no_nul_items,
    non_negative,
    non_negative_int,
    one_of,
    show,
    to_float,
    to_int_tuple,
    to_str_map,
    to_str_tuple,
    to_timedelta,
    to_tuple,
    wrong_type,
)
from ._validate import check_environment as check_environment

__all__ = [
    "Command",
    "CommandResult",
    "FileInfo",
    "GitConfig",
    "NetworkConfig",
    "OutputChunk",
    "PortMapping",
    "RepositoryConfig",
    "ResourceLimits",
    "ResourceUsage",
    "SandboxConfig",
    "SandboxInfo",
    "SandboxStatus",
    "SecurityPolicy",
]

_PULL_POLICIES = ("missing", "always", "never")
_PROTOCOLS = ("tcp", "udp")


class SandboxStatus(enum.StrEnum):
    """Lifecycle state of a sandbox."""

    CREATING = "creating"
    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    DESTROYED = "destroyed"


def _to_port_tuple(
    value: Iterable[PortMapping], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> tuple[PortMapping, ...]:
    """Copy an iterable of port mappings to a tuple."""
    return to_tuple(value, field, owner, "PortMapping", lambda item: isinstance(item, PortMapping))


def _to_status(
    value: SandboxStatus | str, field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> SandboxStatus:
    """Accept a status member or its string value."""
    name = field_name(field)
    allowed = ", ".join(s.value for s in SandboxStatus)
    if not isinstance(value, str):
        raise wrong_type(name, f"a SandboxStatus or one of {allowed}", value, owner, name,
                          "a SandboxStatus, e.g. SandboxStatus.RUNNING")
    try:
        return SandboxStatus(value)
    except ValueError:
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r}") from None


def as_config(config: object) -> SandboxConfig:
    """Return `config`, or the default `SandboxConfig` for None; refuse anything else (a dict
    of settings, say) with a ConfigError, rather than an AttributeError later."""
    if config is None:
        return SandboxConfig()
    if not isinstance(config, SandboxConfig):
        raise ConfigError(
            f"config must be a SandboxConfig, got {type(config).__name__} {show(config)}",
            details="pass SandboxConfig(...); from_json(text, SandboxConfig) reads JSON",
        )
    return config


# Every model's field_transformer: class names in annotations are looked up in this module.
_named_converters = named_converters(globals(), field_aware={_to_status, _to_port_tuple})


#: The `ResourceLimits` fields the SDK gives a default (see `_limits`).
DEFAULTED_LIMITS = ("cpu_limit", "memory_limit", "process_limit", "file_limit")


def _defaulted_limits(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]
                      ) -> None:
    unknown = [name for name in value if name not in DEFAULTED_LIMITS]
    if unknown:
        raise ConfigError(f"{attribute.name}: {', '.join(map(repr, unknown))} is not a limit "
                          f"with a default; use some of {', '.join(DEFAULTED_LIMITS)}")


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class ResourceLimits:
    """Resource limits and requests for a sandbox; 0 means none / engine default, except
    where a field says the SDK sets a default.

    Attributes:
        cpu_limit: CPU cores the sandbox may use (fractions allowed); 0 uses the SDK default,
            min(2, the engine's CPUs). To lift it, give the engine's CPU count.
        cpu_request: CPU cores reserved for the sandbox.
        memory_limit: Memory limit in bytes; 0 uses the SDK default, min(2 GiB, a quarter of
            the engine's memory). To lift it, give the engine's memory.
        memory_request: Memory reservation in bytes.
        disk_limit: Writable-layer size limit in bytes.
        disk_request: Disk space reservation in bytes.
        network_in_limit: Inbound bandwidth limit in bytes per second.
        network_out_limit: Outbound bandwidth limit in bytes per second.
        process_limit: Maximum number of processes; 0 uses the SDK default.
        file_limit: Maximum number of open files per process (RLIMIT_NOFILE); 0 uses the SDK
            default, 512 (see `sandbox._limits`).
        wall_time_limit: Maximum lifetime of the sandbox.
        cpu_time_limit: Maximum CPU time per process.
        allow_unbounded: Names of defaulted limits (``cpu_limit``, ``memory_limit``,
            ``process_limit``, ``file_limit``) a backend may leave unenforced where it cannot
            enforce them (the process backend without cgroups), instead of refusing to
            create the sandbox; an explicit, audited opt-out. Docker enforces them anyway.
    """

    cpu_limit: float = attrs.field(default=0.0, converter=to_float, validator=non_negative)
    cpu_request: float = attrs.field(default=0.0, converter=to_float, validator=non_negative)
    memory_limit: int = attrs.field(default=0, validator=memory_bytes)
    memory_request: int = attrs.field(default=0, validator=memory_bytes)
    disk_limit: int = attrs.field(default=0, validator=non_negative_int)
    disk_request: int = attrs.field(default=0, validator=non_negative_int)
    network_in_limit: int = attrs.field(default=0, validator=non_negative_int)
    network_out_limit: int = attrs.field(default=0, validator=non_negative_int)
    process_limit: int = attrs.field(default=0, validator=non_negative_int)
    file_limit: int = attrs.field(default=0, validator=non_negative_int)
    wall_time_limit: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    cpu_time_limit: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    allow_unbounded: tuple[str, ...] = attrs.field(
        factory=tuple, converter=to_str_tuple, validator=_defaulted_limits
    )


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class SecurityPolicy:
    """Security settings applied to the sandbox container; defaults are restrictive.

    Attributes:
        run_as_user: User (name or uid) commands run as; empty uses the image's own user if
            it is not root, else uid 1000. ``"root"``/``"0"`` is an explicit, audited opt-in.
        run_as_group: Group (name or gid) commands run as; empty uses the user's own group
            (for a uid, the same number), never root's. ``"0"`` is an audited opt-in.
        read_only_root: Mount the root filesystem read-only.
        no_new_privileges: Forbid gaining privileges through setuid binaries.
        prevent_escalation: Refuse options that grant privileges (privileged mode, host PID).
        add_capabilities: Linux capabilities to add back, e.g. ``"NET_BIND_SERVICE"``; an
            audited opt-in (all are dropped otherwise).
        drop_capabilities: Linux capabilities to drop; every one is dropped anyway.
        selinux_context: SELinux label for the container.
        apparmor_profile: AppArmor profile name.
        seccomp_profile: Seccomp profile (path or JSON); empty uses the engine default.
        allow_networking: Allow network access from the sandbox.
        isolate_network: Give the sandbox its own network namespace.
        isolate_process: Give the sandbox its own PID namespace.
        allow_host_pid: Share the host PID namespace (needs ``isolate_process=False``).
        read_only_paths: Paths mounted read-only inside the sandbox.
        masked_paths: Paths hidden inside the sandbox.
        tmpfs_paths: Paths backed by tmpfs inside the sandbox.
        enable_audit_log: Record every operation in an audit log.
        log_security_events: Log refused operations.
        allowed_hosts: Hosts the sandbox may reach (the design's egress allow-list), enforced
            by the SDK's egress proxy on Docker (``"*"``: every public host) and as
            NetworkPolicy CIDRs on Kubernetes; merged with ``NetworkConfig.allowed_hosts``.
        blocked_hosts: Host names the egress proxy refuses even when ``allowed_hosts`` matches.
        allowed_ports: Destination ports the egress proxy allows (empty: 80 and 443).
    """

    run_as_user: str = ""
    run_as_group: str = ""
    read_only_root: bool = False
    no_new_privileges: bool = True
    prevent_escalation: bool = True
    add_capabilities: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    drop_capabilities: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    selinux_context: str = ""
    apparmor_profile: str = ""
    seccomp_profile: str = ""
    allow_networking: bool = False
    isolate_network: bool = True
    isolate_process: bool = True
    allow_host_pid: bool = False
    read_only_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    masked_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    tmpfs_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    enable_audit_log: bool = False
    log_security_events: bool = False
    allowed_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    blocked_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    allowed_ports: tuple[int, ...] = attrs.field(
        factory=tuple, converter=to_int_tuple, validator=check_ports
    )


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class GitConfig:
    """Git identity and settings applied to a cloned repository.

    Attributes:
        user_name: Value for ``user.name``.
        user_email: Value for ``user.email``.
        signing_key: Value for ``user.signingkey``.
        config_values: Further ``git config`` keys and values.
    """

    user_name: str = ""
    user_email: str = ""
    signing_key: str = ""
    config_values: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=to_str_map)


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class RepositoryConfig:
    """A repository to clone or copy into the sandbox.

    Attributes:
        url: Remote to clone; empty when ``local_path`` is used.
        branch: Branch to check out; empty uses the remote default.
        commit_hash: Commit to check out after cloning.
        local_path: Host directory to copy instead of cloning.
        mount_point: Where the repository appears in the sandbox.
        read_only: Make the repository read-only in the sandbox.
        git_config: Git identity and settings.
        include_files: Glob patterns to copy (empty means all).
        exclude_files: Glob patterns to leave out.
        permissions: Octal mode for the checkout root, e.g. ``"0755"``; empty keeps it.
        owner: Owner (user) of the checkout.
        group: Group of the checkout.
    """

    url: str = ""
    branch: str = ""
    commit_hash: str = ""
    local_path: str = ""
    mount_point: str = DEFAULT_WORKING_DIR
    read_only: bool = False
    git_config: GitConfig = attrs.field(factory=GitConfig)
    include_files: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    exclude_files: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    permissions: str = attrs.field(default="", validator=check_octal)
    owner: str = ""
    group: str = ""


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class PortMapping:
    """A container port published on the host.

    Attributes:
        host_port: Host port; 0 lets the engine pick a free one.
        container_port: Port inside the sandbox (required).
        protocol: ``"tcp"`` (also ``""``) or ``"udp"``.
        host_ip: Host address to bind; loopback by default.
    """

    host_port: int = attrs.field(default=0, validator=check_host_port)
    container_port: int = attrs.field(validator=check_port)
    protocol: str = attrs.field(default="tcp", validator=one_of(*_PROTOCOLS, empty_means="tcp"))
    host_ip: str = "127.0.0.1"


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class NetworkConfig:
    """Network settings of the sandbox; isolated by default.

    Attributes:
        isolated: Run without any network (no interfaces except loopback).
        bridge: Engine network to attach to; empty uses the default bridge.
        dns_servers: DNS server addresses.
        dns_search: DNS search domains.
        http_proxy: Value for ``HTTP_PROXY`` in the sandbox.
        https_proxy: Value for ``HTTPS_PROXY`` in the sandbox.
        no_proxy: Value for ``NO_PROXY`` in the sandbox.
        port_mappings: Ports published on the host.
        allowed_hosts: Hosts the sandbox may reach.
        blocked_hosts: Hosts the sandbox may not reach.
        allowed_ports: Destination ports the sandbox may reach.
        ingress_limit: Inbound bandwidth limit in bytes per second.
        egress_limit: Outbound bandwidth limit in bytes per second.
    """

    isolated: bool = True
    bridge: str = ""
    dns_servers: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    dns_search: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    http_proxy: str = ""
    https_proxy: str = ""
    no_proxy: str = ""
    port_mappings: tuple[PortMapping, ...] = attrs.field(factory=tuple, converter=_to_port_tuple)
    allowed_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    blocked_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    allowed_ports: tuple[int, ...] = attrs.field(
        factory=tuple, converter=to_int_tuple, validator=check_ports
    )
    ingress_limit: int = attrs.field(default=0, validator=non_negative_int)
    egress_limit: int = attrs.field(default=0, validator=non_negative_int)


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class SandboxConfig:
    """Everything needed to create a sandbox.

    ``SandboxConfig()`` describes an isolated sandbox (no network, no new privileges, a
    non-root user, no capabilities, memory, CPU and process limits) running the default image
    in ``/workspace``. Derive variants with ``attrs.evolve``.

    Attributes:
        type: Backend kind: ``"docker"`` (default), ``"process"`` (bubblewrap, no daemon),
            ``"kubernetes"`` (a Pod) or ``"vm"`` (Docker under a VM runtime).
        image: Image reference to run.
        runtime: OCI runtime, e.g. ``"runc"`` or ``"runsc"``.
        architecture: Image platform architecture, e.g. ``"amd64"``; empty uses the engine's.
        pull_policy: When to pull the image: ``"missing"`` (also ``""``), ``"always"`` or
            ``"never"``.
        resources: Resource limits.
        security: Security policy.
        repository: Repository to put into the sandbox, if any.
        network: Network settings.
        environment: Environment variables for every command.
        working_dir: Initial working directory of commands.
        tools: Executables (names in PATH, or absolute paths) that must be in the sandbox:
            initialize fails naming any that is missing; `SandboxInfo.tools` gives their paths.
        mcp_servers: MCP servers started in the sandbox at initialize, each
            ``"name=command args..."`` (or ``"command args..."``, named after the command);
            `Sandbox.mcp_client` connects to one. They are killed at cleanup.
        timeout: Default command timeout; 0 means none.
        cleanup_delay: Delay before removing the sandbox on cleanup.
        stats_interval: Interval between resource-usage samples.
        labels: Engine labels for the container.
        annotations: Free-form annotations kept with the sandbox.
        name: Container name; empty generates one.
    """

    type: str = DEFAULT_TYPE
    image: str = DEFAULT_IMAGE
    runtime: str = DEFAULT_RUNTIME
    architecture: str = ""
    pull_policy: str = attrs.field(
        default=DEFAULT_PULL_POLICY, validator=one_of(*_PULL_POLICIES, empty_means="missing")
    )
    resources: ResourceLimits = attrs.field(factory=ResourceLimits)
    security: SecurityPolicy = attrs.field(factory=SecurityPolicy)
    repository: RepositoryConfig | None = None
    network: NetworkConfig = attrs.field(factory=NetworkConfig)
    environment: Mapping[str, str] = attrs.field(
        factory=FrozenMap, converter=to_str_map, validator=check_env
    )
    working_dir: str = DEFAULT_WORKING_DIR
    tools: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    mcp_servers: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    timeout: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    cleanup_delay: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    stats_interval: timedelta = attrs.field(
        default=DEFAULT_STATS_INTERVAL, converter=to_timedelta, validator=non_negative
    )
    labels: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=to_str_map)
    annotations: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=to_str_map)
    name: str = ""


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class Command:
    """A command to run in the sandbox.

    Build one directly, or with `Command.shell` / `Command.argv`.

    Attributes:
        executable: Program to run (a path or a name looked up in ``PATH``).
        args: Arguments after the executable.
        working_dir: Working directory; empty uses the sandbox's.
        environment: Variables added to the sandbox environment.
        stdin_content: Text fed to standard input (serialisable form of ``stdin``).
        timeout: Kill the command after this long; 0 uses the sandbox default.
        idle_timeout: Kill the command after this long without output; 0 means none.
        user: User to run as; empty uses the sandbox's.
        allow_network: Request network access for this command.
        allow_write: Allow writing outside temporary directories.
        restrict_paths: Paths the command may touch (empty means no restriction).
        max_output_bytes: Output kept per stream; the rest is dropped and flagged.
        stdin: Standard input as bytes, text or an async byte stream; never serialised.
    """

    executable: str = attrs.field(default="", validator=no_nul)
    args: tuple[str, ...] = attrs.field(
        factory=tuple, converter=to_str_tuple, validator=no_nul_items
    )
    working_dir: str = ""
    environment: Mapping[str, str] = attrs.field(
        factory=FrozenMap, converter=to_str_map, validator=check_env
    )
    stdin_content: str = ""
    timeout: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    idle_timeout: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    user: str = ""
    allow_network: bool = False
    allow_write: bool = True
    restrict_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=to_str_tuple)
    max_output_bytes: int = attrs.field(
        default=DEFAULT_MAX_OUTPUT_BYTES, validator=non_negative_int
    )
    stdin: bytes | str | AsyncIterable[bytes] | None = attrs.field(default=None, eq=False)

    @classmethod
    def shell(cls, script: str, **kwargs: Any) -> Command:
        """Build a command running `script` with ``/bin/sh -c``."""
        return cls(executable="/bin/sh", args=("-c", script), **kwargs)

    @classmethod
    def argv(cls, argv: Sequence[str], **kwargs: Any) -> Command:
        """Build a command from an argument vector, executable first."""
        if isinstance(argv, str | bytes):
            raise ConfigError(
                f"argv must be a sequence of str, not a single {type(argv).__name__}",
                details=f"pass a list, e.g. Command.argv([{argv!r}]) or Command.shell({argv!r})",
            )
        if not argv:
            raise ConfigError("argv must not be empty")
        return cls(executable=argv[0], args=tuple(argv[1:]), **kwargs)


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class ResourceUsage:
    """A resource-usage sample of a sandbox or command.

    Attributes:
        timestamp: When the sample was taken.
        cpu_usage: CPU usage in percent of one core (may exceed 100).
        cpu_time: CPU time consumed.
        memory_usage: Memory in use, in bytes.
        memory_percent: Memory in use, in percent of the limit.
        memory_peak: Highest memory use seen, in bytes.
        disk_usage: Disk space used, in bytes.
        disk_reads: Bytes read from block devices.
        disk_writes: Bytes written to block devices.
        network_in: Bytes received.
        network_out: Bytes sent.
        process_count: Number of processes.
        thread_count: Number of threads.
        file_handles: Number of open files.
        uptime: Time since the sandbox started.
    """

    timestamp: datetime | None = attrs.field(default=None, validator=check_aware)
    cpu_usage: float = attrs.field(default=0.0, converter=to_float, validator=non_negative)
    cpu_time: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    memory_usage: int = attrs.field(default=0, validator=non_negative_int)
    memory_percent: float = attrs.field(default=0.0, converter=to_float, validator=non_negative)
    memory_peak: int = attrs.field(default=0, validator=non_negative_int)
    disk_usage: int = attrs.field(default=0, validator=non_negative_int)
    disk_reads: int = attrs.field(default=0, validator=non_negative_int)
    disk_writes: int = attrs.field(default=0, validator=non_negative_int)
    network_in: int = attrs.field(default=0, validator=non_negative_int)
    network_out: int = attrs.field(default=0, validator=non_negative_int)
    process_count: int = attrs.field(default=0, validator=non_negative_int)
    thread_count: int = attrs.field(default=0, validator=non_negative_int)
    file_handles: int = attrs.field(default=0, validator=non_negative_int)
    uptime: timedelta = attrs.field(default=ZERO, converter=to_timedelta, validator=non_negative)


_USAGE_FIELD_SET = frozenset(f.name for f in attrs.fields(ResourceUsage))


def slot_setters(cls: type, names: tuple[str, ...], user: str) -> tuple[Any, ...]:
    """The slot's own setter per field of a slotted attrs class, in ``names`` order: what
    ``object.__setattr__`` ends up calling, without finding the slot by name first (most of
    its cost, per field of a value built once per command).

    ``user`` builds ``cls`` through them field by field, so ``names`` must be every field:
    a field added to ``cls`` and not to ``user`` fails at import (TypeError), not later as
    an unset slot."""
    fields = [f.name for f in attrs.fields(cls)]
    if sorted(names) != sorted(fields):
        raise TypeError(f"{user} sets each field of {cls.__name__} by name: update it")
    return tuple(vars(cls)[name].__set__ for name in names)


(_u_timestamp, _u_cpu_usage, _u_cpu_time, _u_memory_usage, _u_memory_percent, _u_memory_peak,
 _u_disk_usage, _u_disk_reads, _u_disk_writes, _u_network_in, _u_network_out,
 _u_process_count, _u_thread_count, _u_file_handles, _u_uptime) = slot_setters(
    ResourceUsage, ("timestamp", "cpu_usage", "cpu_time", "memory_usage", "memory_percent",
                    "memory_peak", "disk_usage", "disk_reads", "disk_writes", "network_in",
                    "network_out", "process_count", "thread_count", "file_handles", "uptime"),
    "derived_usage")


def derived_usage(base: ResourceUsage, changes: Mapping[str, Any]) -> ResourceUsage:
    """``attrs.evolve(base, **changes)`` without the converters and validators, for values
    the SDK derived itself from checked ones (`_cgroup_usage.command_usage`: counters it
    parsed and bounded, a window of validated samples): building and checking all fifteen
    fields again cost more than working them out, once per command. Each value must already
    have its field's type and range; a caller with anything else uses ``attrs.evolve``.
    Field by field, each through its slot's setter: a loop over the names cost as much again."""
    if not changes.keys() <= _USAGE_FIELD_SET:
        raise TypeError(f"not fields of ResourceUsage: {sorted(changes.keys() - _USAGE_FIELD_SET)}")
    u = object.__new__(ResourceUsage)
    get = changes.get
    _u_timestamp(u, get("timestamp", base.timestamp))
    _u_cpu_usage(u, get("cpu_usage", base.cpu_usage))
    _u_cpu_time(u, get("cpu_time", base.cpu_time))
    _u_memory_usage(u, get("memory_usage", base.memory_usage))
    _u_memory_percent(u, get("memory_percent", base.memory_percent))
    _u_memory_peak(u, get("memory_peak", base.memory_peak))
    _u_disk_usage(u, get("disk_usage", base.disk_usage))
    _u_disk_reads(u, get("disk_reads", base.disk_reads))
    _u_disk_writes(u, get("disk_writes", base.disk_writes))
    _u_network_in(u, get("network_in", base.network_in))
    _u_network_out(u, get("network_out", base.network_out))
    _u_process_count(u, get("process_count", base.process_count))
    _u_thread_count(u, get("thread_count", base.thread_count))
    _u_file_handles(u, get("file_handles", base.file_handles))
    _u_uptime(u, get("uptime", base.uptime))
    return u


@attrs.frozen(kw_only=True, field_transformer=_named_converters, repr=False)
class CommandResult:
    """The outcome of a finished command.

    Attributes:
        exit_code: Exit status; -1 when unknown (e.g. never started).
        success: True when the command exited with status 0 in time. Derived from
            ``exit_code`` and ``timed_out`` when not given; ``True`` given with a non-zero
            exit or a timeout is refused (``False`` with exit 0 is kept: Go's zero value).
        stdout: Standard output decoded as UTF-8 (invalid bytes replaced).
        stderr: Standard error decoded as UTF-8 (invalid bytes replaced).
        combined: Both streams interleaved in arrival order.
            A command's result keeps only the raw bytes and decodes each of these three on
            first access (then keeps it), so big output costs no text it is not read as.
        start_time: When the command started.
        end_time: When the command ended.
        duration: Wall-clock run time.
        resource_usage: Resource usage of the sandbox at the end of the command.
            A command's result keeps the counters read at its start and end and builds
            this on first access (then keeps it): the same value, compared, hashed,
            printed and serialised as such.
        error: Description of what went wrong, if anything.
        signal: Name of the signal that ended the command, e.g. ``"SIGKILL"``.
        process_id: PID of the command inside the sandbox.
        metadata: Free-form extra information.
        timed_out: The command was killed by its timeout.
        oom_killed: The command was killed for running out of memory.
        truncated: Output exceeded ``max_output_bytes`` and was cut.
        stdout_bytes: Raw standard output; never serialised.
        stderr_bytes: Raw standard error; never serialised.
    """

    exit_code: int = -1
    # None (not given) is replaced by the value derived in __attrs_post_init__.
    success: bool = attrs.field(default=None, metadata={"derived": True})
    # Constructed as stdout=/stderr=/combined= (attrs' alias) with a str, or a LazyText.
    _stdout: str | LazyText = attrs.field(default="", alias="stdout")
    _stderr: str | LazyText = attrs.field(default="", alias="stderr")
    _combined: str | LazyText = attrs.field(default="", alias="combined")
    start_time: datetime | None = attrs.field(default=None, validator=check_aware)
    end_time: datetime | None = attrs.field(default=None, validator=check_aware)
    duration: timedelta = attrs.field(
        default=ZERO, converter=to_timedelta, validator=non_negative
    )
    # Constructed as resource_usage= (attrs' alias) with a ResourceUsage, or a LazyUsage.
    _resource_usage: ResourceUsage | LazyUsage = attrs.field(factory=ResourceUsage,
                                                             alias="resource_usage")
    error: str = ""
    signal: str = ""
    process_id: int = attrs.field(default=0, validator=non_negative_int)
    metadata: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=to_str_map)
    timed_out: bool = False
    oom_killed: bool = False
    truncated: bool = False
    stdout_bytes: bytes = attrs.field(default=b"", eq=False, repr=False)
    stderr_bytes: bytes = attrs.field(default=b"", eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        ran_ok = self.exit_code == 0 and not self.timed_out
        if self.success is None:
            # Frozen: attrs' documented way to set a field after __init__.
            object.__setattr__(self, "success", ran_ok)
        elif not isinstance(self.success, bool):
            raise wrong_type("success", "a bool", self.success, "CommandResult", "success",
                              "True or False, or leave it out to derive it from exit_code")
        elif self.success and not ran_ok:
            why = "it timed out" if self.timed_out else f"exit_code is {self.exit_code}"
            raise ConfigError(
                f"success must be False when {why}",
                details="success means exit_code 0 within the timeout; leave it out to derive "
                        "it from exit_code and timed_out",
            )

    def check(self) -> CommandResult:
        """Return this result if the command succeeded, else raise.

        Raises:
            CommandExecutionFailed: The command exited non-zero or timed out; the exception's
                ``result`` is this result.
        """
        if self.success:
            return self
        if self.timed_out:
            what = "timed out"
        elif self.signal:
            what = f"was killed by {self.signal} (exit code {self.exit_code})"
        else:
            what = f"exited with code {self.exit_code}"
        tail = self.stderr.strip()[-500:]
        raise CommandExecutionFailed(f"the command {what}", details=self.error or tail,
                                     result=self)

    @property
    def stdout(self) -> str:
        return text_of(self._stdout)

    @property
    def stderr(self) -> str:
        return text_of(self._stderr)

    @property
    def combined(self) -> str:
        return text_of(self._combined)

    @property
    def resource_usage(self) -> ResourceUsage:
        return usage_of(self._resource_usage)

    def __repr__(self) -> str:
        # By the names users pass and read (stdout=, not _stdout=).
        shown = (f"{f.alias}={getattr(self, f.alias)!r}"
                 for f in attrs.fields(type(self)) if f.repr)
        return f"CommandResult({', '.join(shown)})"


def usage_of(value: ResourceUsage | LazyUsage) -> ResourceUsage:
    """The usage ``value`` stands for, building it now if it was not yet."""
    if isinstance(value, LazyUsage):
        built: ResourceUsage = value.get()
        return built
    return value


(_r_exit_code, _r_success, _r_stdout, _r_stderr, _r_combined, _r_start_time, _r_end_time,
 _r_duration, _r_resource_usage, _r_error, _r_signal, _r_process_id, _r_metadata,
 _r_timed_out, _r_oom_killed, _r_truncated, _r_stdout_bytes, _r_stderr_bytes) = slot_setters(
    CommandResult, ("exit_code", "success", "_stdout", "_stderr", "_combined", "start_time",
                    "end_time", "duration", "_resource_usage", "error", "signal", "process_id",
                    "metadata", "timed_out", "oom_killed", "truncated", "stdout_bytes",
                    "stderr_bytes"), "sdk_result")


def sdk_result(
    *, exit_code: int, success: bool, _stdout: str | LazyText, _stderr: str | LazyText,
    _combined: str | LazyText, start_time: datetime, end_time: datetime, duration: timedelta,
    _resource_usage: ResourceUsage | LazyUsage, error: str, signal: str, process_id: int,
    metadata: FrozenMap, timed_out: bool, oom_killed: bool, truncated: bool,
    stdout_bytes: bytes, stderr_bytes: bytes,
) -> CommandResult:
    """A `CommandResult` built without its converters and validators, for one the SDK makes
    from values of its own (`_process_base.make_result`, once per command): checking its
    eighteen fields again cost more than working them out. Takes the attribute names
    (``_stdout``, not ``stdout``; ``_resource_usage``), every one of them, each of its
    field's type and range already: ``success`` derived, ``metadata`` a `FrozenMap`, times
    aware, the usage a `ResourceUsage` or a `LazyUsage` of one. A caller with
    anything else, or a user's values, uses ``CommandResult(...)``. Field by field, each
    through its slot's setter (a loop over the names cost as much again)."""
    r = object.__new__(CommandResult)
    _r_exit_code(r, exit_code)
    _r_success(r, success)
    _r_stdout(r, _stdout)
    _r_stderr(r, _stderr)
    _r_combined(r, _combined)
    _r_start_time(r, start_time)
    _r_end_time(r, end_time)
    _r_duration(r, duration)
    _r_resource_usage(r, _resource_usage)
    _r_error(r, error)
    _r_signal(r, signal)
    _r_process_id(r, process_id)
    _r_metadata(r, metadata)
    _r_timed_out(r, timed_out)
    _r_oom_killed(r, oom_killed)
    _r_truncated(r, truncated)
    _r_stdout_bytes(r, stdout_bytes)
    _r_stderr_bytes(r, stderr_bytes)
    return r


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class FileInfo:
    """Metadata of a file in the sandbox.

    Attributes:
        name: Base name.
        path: Absolute path in the sandbox.
        size: Size in bytes.
        mode: Permission bits (``S_IMODE`` of ``st_mode``, setuid/setgid/sticky included);
            the type is in ``is_dir`` and ``permissions``.
        mod_time: Last modification time.
        is_dir: The entry is a directory.
        owner: Owner user name or uid.
        group: Owner group name or gid.
        permissions: Symbolic permissions, e.g. ``"-rw-r--r--"``.
        is_symlink: The entry is a symbolic link.
        link_target: Target of the symbolic link.
    """

    name: str
    path: str
    size: int = attrs.field(default=0, validator=non_negative_int)
    mode: int = attrs.field(default=0, validator=non_negative_int)
    mod_time: datetime | None = attrs.field(default=None, validator=check_aware)
    is_dir: bool = False
    owner: str = ""
    group: str = ""
    permissions: str = ""
    is_symlink: bool = False
    link_target: str = ""


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class SandboxInfo:
    """A snapshot of a sandbox's identity and state.

    Attributes:
        id: Engine identifier of the sandbox.
        name: Container name.
        type: Backend kind.
        status: Lifecycle state.
        created_at: When the sandbox was created.
        started_at: When the sandbox was last started.
        runtime: OCI runtime in use.
        image: Image reference.
        platform: Platform of the image, e.g. ``"linux/amd64"``.
        ip_address: IP address of the sandbox, if networked.
        mac_address: MAC address of the sandbox, if networked.
        hostname: Host name inside the sandbox.
        allocated_resources: Limits actually applied by the engine.
        config: Configuration the sandbox was created with.
        labels: Engine labels.
        annotations: Free-form annotations.
        status_reason: Why the sandbox failed or stopped.
        exit_code: Exit status of the sandbox's main process, once it ended.
        oom_killed: The main process was killed for running out of memory.
    """

    id: str
    name: str = ""
    type: str = DEFAULT_TYPE
    status: SandboxStatus = attrs.field(converter=_to_status)
    created_at: datetime | None = attrs.field(default=None, validator=check_aware)
    started_at: datetime | None = attrs.field(default=None, validator=check_aware)
    runtime: str = ""
    image: str = ""
    platform: str = ""
    ip_address: str = ""
    mac_address: str = ""
    hostname: str = ""
    allocated_resources: ResourceLimits = attrs.field(factory=ResourceLimits)
    config: SandboxConfig = attrs.field(factory=SandboxConfig)
    labels: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=to_str_map)
    annotations: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=to_str_map)
    status_reason: str = ""
    exit_code: int | None = None
    oom_killed: bool = False

    @property
    def tools(self) -> dict[str, str]:
        """``SandboxConfig.tools`` as found at start: name to path in the sandbox."""
        prefix = ANNOTATION_TOOL
        return {k[len(prefix):]: v for k, v in self.annotations.items() if k.startswith(prefix)}


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class OutputChunk:
    """A piece of a command's output as it arrives.

    Attributes:
        stream: Which stream the bytes came from.
        data: The raw bytes.
    """

    stream: Literal["stdout", "stderr"] = attrs.field(validator=one_of("stdout", "stderr"))
    data: bytes
