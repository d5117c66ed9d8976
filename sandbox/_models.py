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
through a mapping it exposes.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import AsyncIterable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, TypeAlias, TypeVar, cast

import attrs

from ._constants import (
    DEFAULT_IMAGE,
    DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_PULL_POLICY,
    DEFAULT_RUNTIME,
    DEFAULT_STATS_INTERVAL,
    DEFAULT_TYPE,
    DEFAULT_WORKING_DIR,
)
from ._errors import CommandExecutionFailed, ConfigError
from ._output import LazyText, text_of

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
_OCTAL_MODE = re.compile(r"[0-7]{3,4}")
_ZERO = timedelta(0)
_T = TypeVar("_T")


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


# Converters. Each takes the attrs field so its messages can start with the field name:
# `_named_converters`, every class's field_transformer, wraps them in attrs.Converter. The class
# bodies name the plain functions because mypy's attrs plugin only understands those.

_INT64_MAX = 2**63 - 1


def _name(field: attrs.Attribute[Any] | None) -> str:
    return field.name if field is not None else "value"


_SHOW_MAX = 80


def _show(value: object) -> str:
    """repr() for messages; huge ints (whose repr may even fail) are described, long reprs cut."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else f"{text[:_SHOW_MAX - 3]}..."


def _wrong_type(
    name: str, expected: str, value: object, owner: str, field: str, advice: str
) -> ConfigError:
    """Build the error for a value of the wrong type: what was expected, got, and what to do."""
    return ConfigError(
        f"{name} must be {expected}, got {type(value).__name__} {_show(value)}",
        details=f"set {owner or 'the'}.{field} to {advice}",
    )


#: The longest duration the JSON wire format (Go's int64 nanoseconds) can carry.
MAX_DURATION = timedelta(microseconds=_INT64_MAX // 1000)


def _to_timedelta(
    value: timedelta | float, field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> timedelta:
    """Accept a timedelta or a finite number of seconds within Go's time.Duration range."""
    name = _name(field)
    if isinstance(value, timedelta):
        td = value
    else:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _wrong_type(name, "a timedelta or a number of seconds", value, owner, name,
                              "a timedelta, or an int or float of seconds")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
        try:
            td = timedelta(seconds=value)
        except OverflowError:
            td = timedelta.max
    if abs(td) > MAX_DURATION:
        raise ConfigError(
            f"{name} must be within {MAX_DURATION.total_seconds():.0f} seconds (about 292 "
            f"years, the range of Go's time.Duration on the wire), got {_show(value)}"
        )
    return td


def _to_float(value: float, field: attrs.Attribute[Any] | None = None, owner: str = "") -> float:
    """Accept an int or float (not bool or str)."""
    name = _name(field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong_type(name, "a number", value, owner, name, "an int or float")
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{name} is too large for a float, got {_show(value)}") from None


def _to_str_tuple(
    value: Iterable[str], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> tuple[str, ...]:
    """Copy an iterable of strings to a tuple, refusing a lone string."""
    if isinstance(value, str | bytes):
        name = _name(field)
        raise _wrong_type(name, "an iterable of str, not a single string", value, owner, name,
                          f"a list of str, e.g. [{value!r}]")
    return _to_tuple(value, field, owner, "str", lambda item: isinstance(item, str))


def _to_int_tuple(
    value: Iterable[int], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> tuple[int, ...]:
    """Copy an iterable of ints to a tuple."""
    return _to_tuple(value, field, owner, "int", _is_int)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _to_port_tuple(
    value: Iterable[PortMapping], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> tuple[PortMapping, ...]:
    """Copy an iterable of port mappings to a tuple."""
    return _to_tuple(value, field, owner, "PortMapping", lambda item: isinstance(item, PortMapping))


def _to_tuple(
    value: Iterable[_T],
    field: attrs.Attribute[Any] | None,
    owner: str,
    item: str,
    ok: Callable[[object], bool],
) -> tuple[_T, ...]:
    name = _name(field)
    advice = f"a list of {item}" + ("(...)" if item[0].isupper() else "")
    if isinstance(value, Mapping):
        # Iterating a dict gives its keys, which is never what was meant.
        raise _wrong_type(name, f"an iterable of {item}", value, owner, name, advice)
    try:
        items = tuple(value)
    except TypeError:
        raise _wrong_type(name, f"an iterable of {item}", value, owner, name, advice) from None
    for i, each in enumerate(items):
        if not ok(each):
            article = "an" if item[0] in "aeiou" else "a"
            raise _wrong_type(f"{name}[{i}]", f"{article} {item}", each, owner, name, advice)
    return items


class FrozenMap(Mapping[str, str]):
    """An immutable, hashable mapping of str to str: what models hold for a dict they take.

    Equal to any mapping with the same items (a dict included); ``dict(m)`` gives a copy to
    change.
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._data: dict[str, str] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return repr(self._data)


def _to_str_map(
    value: Mapping[str, str], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> FrozenMap:
    """Copy a mapping of str to str into a `FrozenMap`, so the frozen instance neither
    shares it with the caller nor lets it be changed."""
    name = _name(field)
    advice = "a dict of str to str"
    if not isinstance(value, Mapping):
        raise _wrong_type(name, "a mapping of str to str", value, owner, name, advice)
    copy = dict(value)
    for key, val in copy.items():
        if not isinstance(key, str):
            raise _wrong_type(f"{name} key {_show(key)}", "a str", key, owner, name, advice)
        if not isinstance(val, str):
            raise _wrong_type(f"{name}[{key!r}]", "a str", val, owner, name, advice)
    return FrozenMap(copy)


def _to_status(
    value: SandboxStatus | str, field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> SandboxStatus:
    """Accept a status member or its string value."""
    name = _name(field)
    allowed = ", ".join(s.value for s in SandboxStatus)
    if not isinstance(value, str):
        raise _wrong_type(name, f"a SandboxStatus or one of {allowed}", value, owner, name,
                          "a SandboxStatus, e.g. SandboxStatus.RUNNING")
    try:
        return SandboxStatus(value)
    except ValueError:
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r}") from None


_FieldConverter: TypeAlias = "Callable[..., Any]"
_FIELD_AWARE: frozenset[Any] = frozenset(
    {_to_timedelta, _to_float, _to_str_tuple, _to_int_tuple, _to_port_tuple, _to_str_map,
     _to_status}
)


def _type_check(annotation: str, owner: str) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """Build a validator refusing values that do not match `annotation` (a field's type string).

    Names of classes are looked up in this module when first needed, so a field may name a
    class defined further down.
    """
    parts = [part.strip() for part in annotation.split("|")]
    resolved: list[tuple[Callable[[object], bool], str, str]] = []

    def resolve() -> list[tuple[Callable[[object], bool], str, str]]:
        if not resolved:
            resolved.extend(_type_rule(part) for part in parts)
        return resolved

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        rules = resolve()
        if any(ok(value) for ok, _, _ in rules):
            return
        expected = " or ".join(dict.fromkeys(what for _, what, _ in rules))
        advice = " or ".join(dict.fromkeys(how for _, _, how in rules))
        if isinstance(value, Mapping) and any(how.endswith("(...)") for _, _, how in rules):
            advice += " (nested configs are not built from dicts; from_json() reads JSON)"
        # A private field behind a property is passed by its alias: name that.
        name = attribute.alias or attribute.name
        raise _wrong_type(name, expected, value, owner, name, advice)

    return check


def _type_rule(part: str) -> tuple[Callable[[object], bool], str, str]:
    """Return (test, expected, advice) for one member of a field's annotation."""
    simple: dict[str, tuple[Callable[[object], bool], str, str]] = {
        "None": (lambda v: v is None, "None", "None"),
        "str": (lambda v: isinstance(v, str), "a str", "a str"),
        "bool": (lambda v: isinstance(v, bool), "a bool", "True or False"),
        "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an int", "an int"),
        "float": (lambda v: isinstance(v, float), "a float", "an int or float"),
        "bytes": (lambda v: isinstance(v, bytes), "bytes", "bytes"),
        "datetime": (lambda v: isinstance(v, datetime), "a datetime",
                     "a timezone-aware datetime, e.g. datetime.now(UTC)"),
        "timedelta": (lambda v: isinstance(v, timedelta), "a timedelta", "a timedelta"),
        # Output text decoded on first read; users pass and see a str.
        "LazyText": (lambda v: isinstance(v, LazyText), "a str", "a str"),
        "AsyncIterable[bytes]": (lambda v: hasattr(v, "__aiter__"),
                                 "an async iterable of bytes", "an async iterable of bytes"),
    }
    if part in simple:
        return simple[part]
    if part.startswith("tuple["):
        return (lambda v: isinstance(v, tuple), "a tuple", "a list or tuple")
    if part.startswith("Mapping["):
        return (lambda v: isinstance(v, Mapping), "a mapping", "a dict")
    if part.startswith("Literal["):
        # The field's own validator then lists the allowed values.
        return (lambda v: isinstance(v, str), "a str", f"one of {part[8:-1]}")
    cls = globals()[part]
    return (lambda v: isinstance(v, cls), f"a {part}", f"{part}(...)")


def _named_converters(cls: type, fields: list[attrs.Attribute[Any]]) -> list[attrs.Attribute[Any]]:
    """Check every field's type and pass the field and class to the converters above, so
    their errors can name them. A field marked ``derived`` is checked by its class instead."""
    out = []
    for f in fields:
        if f.metadata.get("derived"):
            out.append(f)
            continue
        if f.converter in _FIELD_AWARE:
            convert = functools.partial(cast(_FieldConverter, f.converter), owner=cls.__name__)
            f = f.evolve(converter=attrs.Converter(convert, takes_field=True))
        if isinstance(f.type, str):
            check = _type_check(f.type, cls.__name__)
            validator = check if f.validator is None else attrs.validators.and_(check, f.validator)
            f = f.evolve(validator=validator)
        out.append(f)
    return out


# Validators. Messages start with the field name; `_json` prefixes the parent path.
# Fields with converters spell out attrs.field(...) in the class bodies because mypy's
# attrs plugin only sees converters written in place.


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Require a non-negative, finite float or a non-negative timedelta."""
    name = attribute.name
    if isinstance(value, timedelta):
        if value < _ZERO:
            raise ConfigError(f"{name} must be >= 0, got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value!r}")


def _non_negative_int(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Require an int (not bool or float) in 0..2**63-1, the range the engine and Go accept."""
    name = attribute.name
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {_show(value)}")
    if value > _INT64_MAX:
        raise ConfigError(f"{name} must be at most {_INT64_MAX} (int64), got {_show(value)}")


def _aware(_: object, attribute: attrs.Attribute[Any], value: datetime | None) -> None:
    """Require a timezone-aware datetime (or None)."""
    if value is not None and value.utcoffset() is None:
        raise ConfigError(f"{attribute.name} must be timezone-aware, got naive {value!r}")


def _check_port(name: str, value: int, *, allow_zero: bool) -> None:
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= 65535:
        raise ConfigError(f"{name} must be in {lowest}..65535, got {_show(value)}")


def _port(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    _check_port(attribute.name, value, allow_zero=False)


def _host_port(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    _check_port(attribute.name, value, allow_zero=True)


def _ports(_: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    for i, port in enumerate(value):
        _check_port(f"{attribute.name}[{i}]", port, allow_zero=False)


def _one_of(*allowed: str, empty_means: str = "") -> Any:
    """Build a validator requiring the value to be one of `allowed`, or "" (what Go writes
    for a string never set) when `empty_means` names the value it then stands for."""

    def check(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in allowed and not (empty_means and value == ""):
            also = f" ('' means {empty_means})" if empty_means else ""
            raise ConfigError(
                f"{attribute.name} must be one of {', '.join(allowed)}{also}, got {value!r}"
            )

    return check


def _no_nul(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if "\0" in value:
        raise ConfigError(f"{attribute.name} must not contain NUL bytes")


def _no_nul_items(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for i, item in enumerate(value):
        if "\0" in item:
            raise ConfigError(f"{attribute.name}[{i}] must not contain NUL bytes")


def check_environment(env: Mapping[str, str], name: str = "environment") -> None:
    """Require variables that can be passed to exec: names non-empty without '=' or NUL,
    values without NUL; ``name`` leads the error message."""
    for key, val in env.items():
        if not key or "=" in key or "\0" in key:
            raise ConfigError(f"{name} key {key!r} must be non-empty without '=' or NUL bytes")
        if "\0" in val:
            raise ConfigError(f"{name}[{key!r}] must not contain NUL bytes")


def as_config(config: object) -> SandboxConfig:
    """Return `config`, or the default `SandboxConfig` for None; refuse anything else (a dict
    of settings, say) with a ConfigError, rather than an AttributeError later."""
    if config is None:
        return SandboxConfig()
    if not isinstance(config, SandboxConfig):
        raise ConfigError(
            f"config must be a SandboxConfig, got {type(config).__name__} {_show(config)}",
            details="pass SandboxConfig(...); from_json(text, SandboxConfig) reads JSON",
        )
    return config


def _env(_: object, attribute: attrs.Attribute[Any], value: Mapping[str, str]) -> None:
    check_environment(value, attribute.name)


def _octal(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value and not _OCTAL_MODE.fullmatch(value):
        raise ConfigError(f"{attribute.name} must be empty or octal like '0755', got {value!r}")


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
        file_limit: Maximum number of open files.
        wall_time_limit: Maximum lifetime of the sandbox.
        cpu_time_limit: Maximum CPU time per process.
    """

    cpu_limit: float = attrs.field(default=0.0, converter=_to_float, validator=_non_negative)
    cpu_request: float = attrs.field(default=0.0, converter=_to_float, validator=_non_negative)
    memory_limit: int = attrs.field(default=0, validator=_non_negative_int)
    memory_request: int = attrs.field(default=0, validator=_non_negative_int)
    disk_limit: int = attrs.field(default=0, validator=_non_negative_int)
    disk_request: int = attrs.field(default=0, validator=_non_negative_int)
    network_in_limit: int = attrs.field(default=0, validator=_non_negative_int)
    network_out_limit: int = attrs.field(default=0, validator=_non_negative_int)
    process_limit: int = attrs.field(default=0, validator=_non_negative_int)
    file_limit: int = attrs.field(default=0, validator=_non_negative_int)
    wall_time_limit: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    cpu_time_limit: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
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
        allowed_hosts: Hosts the sandbox may reach (the design's egress allow-list; not
            enforced yet, so creating a sandbox with any refuses it).
        blocked_hosts: Hosts the sandbox may not reach (likewise refused for now).
        allowed_ports: Destination ports the sandbox may reach (likewise refused for now).
    """

    run_as_user: str = ""
    run_as_group: str = ""
    read_only_root: bool = False
    no_new_privileges: bool = True
    prevent_escalation: bool = True
    add_capabilities: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    drop_capabilities: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    selinux_context: str = ""
    apparmor_profile: str = ""
    seccomp_profile: str = ""
    allow_networking: bool = False
    isolate_network: bool = True
    isolate_process: bool = True
    allow_host_pid: bool = False
    read_only_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    masked_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    tmpfs_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    enable_audit_log: bool = False
    log_security_events: bool = False
    allowed_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    blocked_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    allowed_ports: tuple[int, ...] = attrs.field(
        factory=tuple, converter=_to_int_tuple, validator=_ports
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
    config_values: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=_to_str_map)


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
    include_files: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    exclude_files: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    permissions: str = attrs.field(default="", validator=_octal)
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

    host_port: int = attrs.field(default=0, validator=_host_port)
    container_port: int = attrs.field(validator=_port)
    protocol: str = attrs.field(default="tcp", validator=_one_of(*_PROTOCOLS, empty_means="tcp"))
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
    dns_servers: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    dns_search: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    http_proxy: str = ""
    https_proxy: str = ""
    no_proxy: str = ""
    port_mappings: tuple[PortMapping, ...] = attrs.field(factory=tuple, converter=_to_port_tuple)
    allowed_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    blocked_hosts: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    allowed_ports: tuple[int, ...] = attrs.field(
        factory=tuple, converter=_to_int_tuple, validator=_ports
    )
    ingress_limit: int = attrs.field(default=0, validator=_non_negative_int)
    egress_limit: int = attrs.field(default=0, validator=_non_negative_int)


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class SandboxConfig:
    """Everything needed to create a sandbox.

    ``SandboxConfig()`` describes an isolated sandbox (no network, no new privileges, a
    non-root user, no capabilities, memory, CPU and process limits) running the default image
    in ``/workspace``. Derive variants with ``attrs.evolve``.

    Attributes:
        type: Backend kind; ``"docker"``.
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
        tools: Tool names to make available in the sandbox.
        mcp_servers: MCP server names to make available in the sandbox.
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
        default=DEFAULT_PULL_POLICY, validator=_one_of(*_PULL_POLICIES, empty_means="missing")
    )
    resources: ResourceLimits = attrs.field(factory=ResourceLimits)
    security: SecurityPolicy = attrs.field(factory=SecurityPolicy)
    repository: RepositoryConfig | None = None
    network: NetworkConfig = attrs.field(factory=NetworkConfig)
    environment: Mapping[str, str] = attrs.field(
        factory=FrozenMap, converter=_to_str_map, validator=_env
    )
    working_dir: str = DEFAULT_WORKING_DIR
    tools: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    mcp_servers: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    timeout: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    cleanup_delay: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    stats_interval: timedelta = attrs.field(
        default=DEFAULT_STATS_INTERVAL, converter=_to_timedelta, validator=_non_negative
    )
    labels: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=_to_str_map)
    annotations: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=_to_str_map)
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

    executable: str = attrs.field(default="", validator=_no_nul)
    args: tuple[str, ...] = attrs.field(
        factory=tuple, converter=_to_str_tuple, validator=_no_nul_items
    )
    working_dir: str = ""
    environment: Mapping[str, str] = attrs.field(
        factory=FrozenMap, converter=_to_str_map, validator=_env
    )
    stdin_content: str = ""
    timeout: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    idle_timeout: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    user: str = ""
    allow_network: bool = False
    allow_write: bool = True
    restrict_paths: tuple[str, ...] = attrs.field(factory=tuple, converter=_to_str_tuple)
    max_output_bytes: int = attrs.field(
        default=DEFAULT_MAX_OUTPUT_BYTES, validator=_non_negative_int
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

    timestamp: datetime | None = attrs.field(default=None, validator=_aware)
    cpu_usage: float = attrs.field(default=0.0, converter=_to_float, validator=_non_negative)
    cpu_time: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    memory_usage: int = attrs.field(default=0, validator=_non_negative_int)
    memory_percent: float = attrs.field(default=0.0, converter=_to_float, validator=_non_negative)
    memory_peak: int = attrs.field(default=0, validator=_non_negative_int)
    disk_usage: int = attrs.field(default=0, validator=_non_negative_int)
    disk_reads: int = attrs.field(default=0, validator=_non_negative_int)
    disk_writes: int = attrs.field(default=0, validator=_non_negative_int)
    network_in: int = attrs.field(default=0, validator=_non_negative_int)
    network_out: int = attrs.field(default=0, validator=_non_negative_int)
    process_count: int = attrs.field(default=0, validator=_non_negative_int)
    thread_count: int = attrs.field(default=0, validator=_non_negative_int)
    file_handles: int = attrs.field(default=0, validator=_non_negative_int)
    uptime: timedelta = attrs.field(default=_ZERO, converter=_to_timedelta, validator=_non_negative)


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
    start_time: datetime | None = attrs.field(default=None, validator=_aware)
    end_time: datetime | None = attrs.field(default=None, validator=_aware)
    duration: timedelta = attrs.field(
        default=_ZERO, converter=_to_timedelta, validator=_non_negative
    )
    resource_usage: ResourceUsage = attrs.field(factory=ResourceUsage)
    error: str = ""
    signal: str = ""
    process_id: int = attrs.field(default=0, validator=_non_negative_int)
    metadata: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=_to_str_map)
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
            raise _wrong_type("success", "a bool", self.success, "CommandResult", "success",
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

    def __repr__(self) -> str:
        # By the names users pass and read (stdout=, not _stdout=).
        shown = (f"{f.alias}={getattr(self, f.alias)!r}"
                 for f in attrs.fields(type(self)) if f.repr)
        return f"CommandResult({', '.join(shown)})"


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
    size: int = attrs.field(default=0, validator=_non_negative_int)
    mode: int = attrs.field(default=0, validator=_non_negative_int)
    mod_time: datetime | None = attrs.field(default=None, validator=_aware)
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
    created_at: datetime | None = attrs.field(default=None, validator=_aware)
    started_at: datetime | None = attrs.field(default=None, validator=_aware)
    runtime: str = ""
    image: str = ""
    platform: str = ""
    ip_address: str = ""
    mac_address: str = ""
    hostname: str = ""
    allocated_resources: ResourceLimits = attrs.field(factory=ResourceLimits)
    config: SandboxConfig = attrs.field(factory=SandboxConfig)
    labels: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=_to_str_map)
    annotations: Mapping[str, str] = attrs.field(factory=FrozenMap, converter=_to_str_map)
    status_reason: str = ""
    exit_code: int | None = None
    oom_killed: bool = False


@attrs.frozen(kw_only=True, field_transformer=_named_converters)
class OutputChunk:
    """A piece of a command's output as it arrives.

    Attributes:
        stream: Which stream the bytes came from.
        data: The raw bytes.
    """

    stream: Literal["stdout", "stderr"] = attrs.field(validator=_one_of("stdout", "stderr"))
    data: bytes
