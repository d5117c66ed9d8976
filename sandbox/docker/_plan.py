"""Map a `SandboxConfig` to the engine's container-create request: the one place that does it.

`plan_container` is pure (it reads a seccomp profile file, nothing else) so every rule below is
unit-tested without an engine. It refuses what it cannot enforce rather than dropping it. The
privilege options (capabilities, seccomp, AppArmor, SELinux, PID namespace) are `_security`'s,
the resource limits `_resources`', the root filesystem and tmpfs options `_rootfs`'; what the
engine can do is read once into `_facts`.

======================================  =================================================
config field                            create request (``body``, ``HostConfig`` = HC)
======================================  =================================================
image                                   ``Image`` as given (the caller validated it)
(command argument)                      ``Cmd``; HC ``Init=true`` so docker-init reaps zombies
name                                    query ``name``; ``Hostname`` (first 63 characters)
environment                             ``Env``; wins over the proxy variables below
network.http(s)_proxy, no_proxy         ``Env`` in lower and UPPER case, when set
working_dir                             ``WorkingDir`` (must be absolute; "" = image's)
labels (argument) + labels              ``Labels``; user keys under ``io.sandbox.`` refused
annotations                             ``Labels`` ``io.sandbox.annotation.<key>``, and also
                                        HC ``Annotations`` on API >= 1.43 only
(always)                                ``StopTimeout=2``: the keep-alive holds no state
runtime                                 HC ``Runtime``; must be one of the engine's runtimes;
                                        "" = the engine's default, whose rules then apply
architecture                            query ``platform=linux/<arch>``
resources.cpu_limit                     HC ``NanoCpus``; 0.01 <= cores <= engine NCPU;
                                        0 = min(2, NCPU) cores (1 if NCPU is unknown)
  (cpu_*, memory_*: refused under a runtime registered with ``--ignore-cgroups``)
resources.cpu_request                   HC ``CpuShares = max(2, round(cores * 1024))``
resources.memory_limit                  HC ``Memory`` and ``MemorySwap`` equal (no swap);
                                        0 = min(2 GiB, MemTotal / 4); the defaults are left
                                        out only under ``--ignore-cgroups``
resources.memory_request                HC ``MemoryReservation`` (<= memory_limit)
resources.process_limit (0 = default)   runc: HC ``PidsLimit``; runsc: ulimit ``nproc``
resources.file_limit (0 = default)      ulimit ``nofile`` soft = hard (`_limits`: 512)
resources.allow_unbounded               no effect: every default is enforced here
resources.cpu_time_limit                ulimit ``cpu`` in whole seconds, rounded up; hard =
                                        soft + 1 s, so SIGXCPU comes first (SIGKILL later)
resources.disk_limit                    HC ``StorageOpt.size``; only btrfs, zfs,
                                        devicemapper, or overlay2 on xfs; else with
                                        read_only_root ``size=`` on each tmpfs; else
                                        refused (``_disk``)
resources.disk_request                  refuse to start when the engine's data root has
                                        less free space (checked from here)
security.run_as_user / run_as_group     ``User`` "u:g" (the backend execs as it): "" = the
                                        image's own non-root ``User``, else 1000:1000; a
                                        number without a group gets the same number as
                                        group (never 0); root (0/root in either field) is
                                        an explicit opt-in, listed in ``opt_ins``
security.read_only_root                 HC ``ReadonlyRootfs`` + tmpfs on working_dir and /tmp
security.tmpfs_paths                    HC ``Tmpfs`` "rw,exec,nosuid,nodev" + own options
security.no_new_privileges              HC ``SecurityOpt`` "no-new-privileges:true"; also
  or prevent_escalation                 set by prevent_escalation (both False to drop it)
security.add/drop_capabilities          HC ``CapDrop`` is always ALL; ``CapAdd`` adds back
                                        the listed ones (an opt-in, listed in ``opt_ins``);
                                        "cap_x", "x" and "CAP_X" all mean "X"
security.prevent_escalation             also refuses adding SYS_ADMIN, ALL and the other
                                        ESCALATING_CAPABILITIES, seccomp "unconfined" and
                                        the host PID namespace
security.seccomp_profile                "" or "runtime/default": engine default;
                                        "unconfined"; a path or inline JSON: sent inline;
                                        under prevent_escalation it must deny something
security.apparmor_profile               ``apparmor=<p>``; refused if the engine lacks it
                                        and under runsc
security.selinux_context                ``label=...``; refused if the engine lacks SELinux
security.read_only_paths                HC ``ReadonlyPaths`` = Docker defaults + these
security.masked_paths                   HC ``MaskedPaths`` = Docker defaults + these;
                                        both refused under runsc
security.isolate_process=False          HC ``PidMode=host``, needs allow_host_pid=True
                                        and prevent_escalation=False
network.isolated, security.isolate_     HC ``NetworkMode=none`` unless the sandbox is
  network, security.allow_networking    networked (isolated=False, isolate_network=False,
                                        allow_networking=True); then ``network.bridge``,
                                        or "" for the backend to fill (``needs_network``)
network.dns_servers / dns_search        HC ``Dns`` / ``DnsSearch``
network.port_mappings                   HC ``PortBindings`` + ``ExposedPorts``; networked
                                        only; host_ip "" means 127.0.0.1, protocol "" tcp
security/network.allowed_hosts,         ``egress`` (an `EgressPolicy`): the backend puts the
  blocked_hosts, allowed_ports          sandbox behind an egress proxy (``_egress``);
                                        networked only; not with proxies, DNS or ports
network.egress_limit / ingress_limit,   ``tc`` in the sandbox's network namespace after start
  resources.network_out/in_limit        (``_shaping``); networked only, root on the host
======================================  =================================================

Not create options, left to the backend or the SDK: ``resources.wall_time_limit`` (the
backend's clock), ``type``, ``tools`` and ``mcp_servers`` (`Sandbox` provides them after
start, ``sandbox._provisions``), ``pull_policy``, ``repository``, ``timeout``, ``cleanup_delay``,
``stats_interval``, ``security.enable_audit_log``, ``security.log_security_events``.

Measured on this engine (20.10, API 1.41, runsc registered with ``--network=none``):

* runsc ignores OCI seccomp profiles (a profile denying mkdir did not) and RLIMIT_CPU (a busy
  loop outlived ``cpu=1``), so a custom seccomp profile and cpu_time_limit are refused there.
* runsc (release 20221219) ignores ``MaskedPaths`` and ``ReadonlyPaths``: a masked
  /etc/hostname and /usr stayed readable, read-only /etc and /home stayed writable; so listed
  paths are refused there. Docker's defaults do not matter: gVisor's /proc has no keys, kcore,
  timer_list or sysrq-trigger, /sys/firmware is empty and /proc/sys refuses writes (EPERM).
  ``ReadonlyRootfs`` is enforced. Its binary holds "AppArmor profile %q is being ignored", so
  apparmor_profile is refused there too.
* Seccomp: ``{}`` (no ``defaultAction``) installs no filter at all (``Seccomp: 0``), and a rule
  with empty ``names`` or an ``includes`` the sandbox does not meet denies nothing.
* ``seccomp=<path>`` makes start fail: the engine wants the JSON content inline.
* Under runsc, PID 1 is still docker-init, and tmpfs mounts work; the tmpfs ``uid=``/``gid=``
  options work under runc (the mount point then belongs to the sandbox user).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .._constants import DEFAULT_USER, LABEL_PREFIX
from .._egress import EgressPolicy
from .._errors import ConfigError, SandboxInitFailed
from .._ids import names_root
from .._models import NetworkConfig, SandboxConfig, SecurityPolicy
from .._policy import with_group
from ._disk import disk_options
from ._egress import plan_egress
from ._facts import EngineFacts
from ._resources import resource_options
from ._rootfs import filesystem_options
from ._security import security_options
from ._shaping import plan_shaping

__all__ = ["CreatePlan", "plan_container"]

#: Labels that carry `SandboxConfig.annotations` on engines without HostConfig.Annotations.
ANNOTATION_LABEL_PREFIX: Final = f"{LABEL_PREFIX}annotation."
#: First engine API version with HostConfig.Annotations.
ANNOTATIONS_MIN_API: Final = (1, 43)
STOP_TIMEOUT: Final = 2
HOSTNAME_MAX: Final = 63
_PROXY_FIELDS: Final = ("http_proxy", "https_proxy", "no_proxy")


@attrs.frozen(kw_only=True)
class CreatePlan:
    """The create request for one sandbox container, and what the backend must know about it.

    Attributes:
        body: JSON body for ``POST /containers/create``.
        params: Query parameters: ``name``, and ``platform`` when an architecture is set.
        pids_limit: Process limit in force: the pids cgroup on runc, RLIMIT_NPROC per user
            inside gVisor on runsc.
        writable_paths: Tmpfs mount points. With a read-only root they are the only writable
            places, and the archive API cannot see into them: use exec with tar there.
        networked: The sandbox gets a network besides loopback.
        needs_network: Networked without ``network.bridge``: the backend must choose or
            create a network and put its name in ``body["HostConfig"]["NetworkMode"]``.
        opt_ins: Privileges the config asked for explicitly (root, added capabilities), one
            ``"setting: what"`` line each, for the backend to audit and log.
        egress: The egress policy the hosts fields make (see `_egress`): the backend puts
            the sandbox behind its egress proxy instead of on ``NetworkMode``.
    """

    body: dict[str, Any]
    params: dict[str, str]
    pids_limit: int
    writable_paths: tuple[str, ...] = ()
    networked: bool = False
    needs_network: bool = False
    opt_ins: tuple[str, ...] = ()
    egress: EgressPolicy | None = None


def plan_container(
    config: SandboxConfig,
    *,
    name: str,
    labels: Mapping[str, str],
    engine: EngineFacts,
    command: Sequence[str],
    image_user: str = "",
) -> CreatePlan:
    """Build the create request for `config`, refusing what this engine cannot enforce.

    `image_user` is the image's ``Config.User``: used when ``security.run_as_user`` is empty
    and it is not root.

    Raises:
        ConfigError: Contradictory or malformed settings (names the fields).
        SecurityViolation: The policy asks for something the engine lacks or escalation rules
            forbid.
        SandboxInitFailed: A limit this engine cannot enforce, or a value out of its range.
    """
    runtime = _runtime(config.runtime, engine)
    host: dict[str, Any] = {"Init": True}
    if runtime:
        host["Runtime"] = runtime
    # The rules follow the runtime that will run the sandbox, the engine's default included.
    effective = runtime or engine.default_runtime
    gvisor = engine.is_gvisor(effective)
    pids_limit = resource_options(config.resources, effective, engine, host)
    networked = _is_networked(config)
    egress = plan_egress(config, networked=networked, no_network_runtime="--network=none" in
                         engine.runtime_args.get(effective, ()))
    if plan_shaping(config) is not None and not networked:  # (it refuses conflicting ones)
        named = [f"{place}.{f}" for place, f in (
            ("network", "ingress_limit"), ("network", "egress_limit"),
            ("resources", "network_in_limit"), ("resources", "network_out_limit"))
            if getattr(getattr(config, place), f)]
        raise SandboxInitFailed(f"{', '.join(named)}: an isolated sandbox has no network to "
                                "limit", details="remove them, or give the sandbox a network")
    exposed = _network(config.network, networked, host)
    user, opt_ins = _user(config.security, image_user)
    working_dir = _working_dir(config.working_dir)
    writable = filesystem_options(config.security, user, working_dir, gvisor, host)
    disk_options(config, engine, host)
    opt_ins += security_options(config.security, gvisor, engine, host)

    body: dict[str, Any] = {
        "Image": config.image,
        "Cmd": list(command),
        "Env": _environment(config),
        "Labels": _labels(config, labels, engine, host),
        "StopTimeout": STOP_TIMEOUT,
        # The image's HEALTHCHECK would run as the container's User (root: see the backend)
        # with the image's PATH, a user-writable prefix included; the SDK checks health itself.
        "Healthcheck": {"Test": ["NONE"]},
        "HostConfig": host,
    }
    hostname = name[:HOSTNAME_MAX].rstrip(".-")
    if hostname:
        body["Hostname"] = hostname
    if working_dir:
        body["WorkingDir"] = working_dir
    if user:
        body["User"] = user
    if exposed:
        body["ExposedPorts"] = exposed
    params = {"name": name}
    if config.architecture:
        arch = config.architecture
        params["platform"] = arch if "/" in arch else f"linux/{arch}"
    return CreatePlan(
        body=body,
        params=params,
        pids_limit=pids_limit,
        writable_paths=writable,
        networked=networked,
        needs_network=networked and not config.network.bridge and egress is None,
        opt_ins=opt_ins,
        egress=egress,
    )


def _runtime(runtime: str, engine: EngineFacts) -> str:
    if not runtime:
        return ""
    if runtime not in engine.runtimes:
        available = ", ".join(sorted(engine.runtimes)) or "none reported"
        raise SandboxInitFailed(
            f"runtime: the engine has no runtime {runtime!r}", details=f"available: {available}"
        )
    return runtime


def _is_networked(config: SandboxConfig) -> bool:
    sec = config.security
    return not config.network.isolated and sec.allow_networking and not sec.isolate_network


def _network(net: NetworkConfig, networked: bool, host: dict[str, Any]) -> dict[str, Any]:
    """Fill the network options of `host` and return ``ExposedPorts``."""
    host["NetworkMode"] = net.bridge if networked else "none"
    if net.dns_servers:
        host["Dns"] = list(net.dns_servers)
    if net.dns_search:
        host["DnsSearch"] = list(net.dns_search)
    if not net.port_mappings:
        return {}
    if not networked:
        raise SandboxInitFailed(
            "network.port_mappings: an isolated sandbox publishes no ports",
            details="set network.isolated=False, security.isolate_network=False and "
            "security.allow_networking=True",
        )
    bindings: dict[str, list[dict[str, str]]] = {}
    seen: set[tuple[str, int, str]] = set()
    for mapping in net.port_mappings:
        host_ip = mapping.host_ip or "127.0.0.1"
        protocol = mapping.protocol or "tcp"  # "" is what Go writes for a protocol never set
        if mapping.host_port:
            key = (host_ip, mapping.host_port, protocol)
            if key in seen:
                raise ConfigError(
                    f"network.port_mappings: host port {host_ip}:{mapping.host_port}/"
                    f"{protocol} is mapped twice"
                )
            seen.add(key)
        port = f"{mapping.container_port}/{protocol}"
        # HostPort "" lets the engine pick a free port.
        bindings.setdefault(port, []).append(
            {"HostIp": host_ip, "HostPort": str(mapping.host_port or "")}
        )
    host["PortBindings"] = bindings
    return {port: {} for port in bindings}


def _user(sec: SecurityPolicy, image_user: str) -> tuple[str, tuple[str, ...]]:
    """The ``user:group`` commands run as, and the root opt-ins it took."""
    for field in ("run_as_user", "run_as_group"):
        value = getattr(sec, field)
        if ":" in value or value != value.strip():
            raise ConfigError(f"security.{field}: {value!r} must be one name or number")
    user, group = sec.run_as_user, sec.run_as_group
    opt_ins: list[str] = []
    if names_root(user):
        opt_ins.append(f"security.run_as_user: {user} (root)")
    if names_root(group):
        opt_ins.append(f"security.run_as_group: {group} (root group)")
    if not user:
        # The image's own user, unless it is root (in user or group): then a fixed one.
        image_uid, _, image_gid = image_user.strip().partition(":")
        if image_uid and not names_root(image_uid) and not names_root(image_gid):
            user, group = image_uid, group or image_gid
        else:
            default_uid, _, default_gid = DEFAULT_USER.partition(":")
            user, group = default_uid, group or default_gid
    return f"{user}:{group}" if group else with_group(user), tuple(opt_ins)


def _working_dir(path: str) -> str:
    if path and not path.startswith("/"):
        raise ConfigError(f"working_dir: {path!r} must be an absolute path")
    return posixpath.normpath(path) if path else ""


def _environment(config: SandboxConfig) -> list[str]:
    env: dict[str, str] = {}
    for field in _PROXY_FIELDS:
        value = getattr(config.network, field)
        if value:
            # Tools disagree on the case they read (curl: lower, Go: both), so set both.
            env[field] = value
            env[field.upper()] = value
    env.update(config.environment)
    return [f"{key}={value}" for key, value in env.items()]


def _labels(
    config: SandboxConfig, labels: Mapping[str, str], engine: EngineFacts, host: dict[str, Any]
) -> dict[str, str]:
    reserved = [key for key in config.labels if key.startswith(LABEL_PREFIX)]
    if reserved:
        raise ConfigError(
            f"labels: keys starting with {LABEL_PREFIX!r} are reserved for the SDK: "
            f"{', '.join(sorted(reserved))}"
        )
    result = {**config.labels, **labels}
    for key, value in config.annotations.items():
        result[ANNOTATION_LABEL_PREFIX + key] = value
    if config.annotations and engine.api_at_least(ANNOTATIONS_MIN_API):
        host["Annotations"] = dict(config.annotations)
    return result
