"""Map a `SandboxConfig` to the engine's container-create request: the one place that does it.

`plan_container` is pure (it reads a seccomp profile file, nothing else) so every rule below is
unit-tested without an engine. It refuses what it cannot enforce rather than dropping it. The
privilege options (capabilities, seccomp, AppArmor, SELinux, PID namespace) are `_security`'s.

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
resources.file_limit                    ulimit ``nofile`` soft = hard
resources.cpu_time_limit                ulimit ``cpu`` in whole seconds, rounded up; hard =
                                        soft + 1 s, so SIGXCPU comes first (SIGKILL later)
resources.disk_limit                    HC ``StorageOpt.size``; only btrfs, zfs,
                                        devicemapper, or overlay2 on xfs, else refused
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
======================================  =================================================

Refused, because nothing here would enforce them: ``disk_request``, ``network_in_limit``,
``network_out_limit``, and ``network.allowed_hosts``, ``blocked_hosts``, ``allowed_ports``,
``ingress_limit``, ``egress_limit``, ``security.allowed_hosts``, ``blocked_hosts``,
``allowed_ports`` (no egress policy yet), ``tools`` and ``mcp_servers`` (nothing provides
them yet). Not create options, left to the
backend or the SDK: ``resources.wall_time_limit`` (the backend's clock), ``type``,
``pull_policy``, ``repository``, ``timeout``, ``cleanup_delay``,
``stats_interval``, ``security.enable_audit_log``, ``security.log_security_events``.

Measured on this engine (20.10, API 1.41, runsc registered with ``--network=none``):

* runsc charges the pids cgroup with its own host threads (about 40 idle, some 750 with 100
  guest processes) and, at the limit, the whole sandbox dies instead of fork returning
  EAGAIN. RLIMIT_NPROC is enforced inside gVisor's kernel, per sandbox, for root too (without
  CAP_SYS_ADMIN / CAP_SYS_RESOURCE), so runsc gets ulimit ``nproc`` and no ``PidsLimit``.
* runsc enforces ``Memory``, but going over it kills the whole sandbox (``OOMKilled``), even
  when an exec allocated the memory; under runc only that exec dies.
* runsc ignores OCI seccomp profiles (a profile denying mkdir did not) and RLIMIT_CPU (a busy
  loop outlived ``cpu=1``), so a custom seccomp profile and cpu_time_limit are refused there.
* runsc (release 20221219) ignores ``MaskedPaths`` and ``ReadonlyPaths``: a masked
  /etc/hostname and /usr stayed readable, read-only /etc and /home stayed writable; so listed
  paths are refused there. Docker's defaults do not matter: gVisor's /proc has no keys, kcore,
  timer_list or sysrq-trigger, /sys/firmware is empty and /proc/sys refuses writes (EPERM).
  ``ReadonlyRootfs`` is enforced. Its binary holds "AppArmor profile %q is being ignored", so
  apparmor_profile is refused there too.
* runsc with ``--ignore-cgroups`` enforces no memory, CPU or pids cgroup limit (a memory hog
  outlived a 64 MiB limit for 20 s); ``EngineFacts.runtime_args`` shows the flag.
* Seccomp: ``{}`` (no ``defaultAction``) installs no filter at all (``Seccomp: 0``), and a rule
  with empty ``names`` or an ``includes`` the sandbox does not meet denies nothing.
* ``seccomp=<path>`` makes start fail: the engine wants the JSON content inline.
* Under runsc, PID 1 is still docker-init, and tmpfs mounts work; the tmpfs ``uid=``/``gid=``
  options work under runc (the mount point then belongs to the sandbox user).
* ``MaskedPaths``/``ReadonlyPaths``: an absent key keeps Docker's defaults, a list replaces
  them (``[]`` unmasks everything), so a list always starts with the defaults.
* Tmpfs mounts default to noexec; a mount over an image directory keeps that directory's mode.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .._constants import (
    DEFAULT_CPU_LIMIT,
    DEFAULT_MEMORY_HOST_FRACTION,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_PROCESS_LIMIT,
    DEFAULT_USER,
    LABEL_PREFIX,
)
from .._errors import ConfigError, SandboxInitFailed
from .._models import NetworkConfig, ResourceLimits, SandboxConfig, SecurityPolicy
from .._policy import ROOT_NAMES, with_group
from ._security import security_options

__all__ = ["CreatePlan", "EngineFacts", "plan_container"]

#: Labels that carry `SandboxConfig.annotations` on engines without HostConfig.Annotations.
ANNOTATION_LABEL_PREFIX: Final = f"{LABEL_PREFIX}annotation."
#: First engine API version with HostConfig.Annotations.
ANNOTATIONS_MIN_API: Final = (1, 43)
#: The engine refuses smaller memory limits and reservations.
MIN_MEMORY: Final = 6 * 2**20
#: The smallest CPU quota the kernel takes is 1 ms per 100 ms period.
MIN_CPU_LIMIT: Final = 0.01
#: Fewer leaves no room for docker-init, the keep-alive and the SDK's own helper execs.
MIN_PROCESS_LIMIT: Final = 8
#: The kernel's PID_MAX_LIMIT on 64-bit; pids.max refuses anything larger.
MAX_PROCESS_LIMIT: Final = 4 * 1024 * 1024
#: The kernel clamps smaller cgroup v1 shares to 2.
MIN_CPU_SHARES: Final = 2
STOP_TIMEOUT: Final = 2
HOSTNAME_MAX: Final = 63
TMPFS_DEFAULT_OPTIONS: Final = "rw,exec,nosuid,nodev"
#: Docker 20.10's defaults; sending a list replaces them, so ours extend them.
DOCKER_MASKED_PATHS: Final = (
    "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware",
)
DOCKER_READONLY_PATHS: Final = (
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
)
#: Storage drivers that can cap a container's writable layer (StorageOpt size).
_DISK_QUOTA_DRIVERS: Final = frozenset({"btrfs", "zfs", "devicemapper"})
#: Limits that only cgroups enforce; process_limit is RLIMIT_NPROC under gVisor, not a cgroup.
_CGROUP_LIMITS: Final = ("cpu_limit", "cpu_request", "memory_limit", "memory_request")
_UNENFORCED_NETWORK: Final = (
    "allowed_hosts", "blocked_hosts", "allowed_ports", "ingress_limit", "egress_limit",
)
#: `uname -m` names to Go's GOARCH names, which platforms use.
_GOARCH: Final = {
    "x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "armv6l": "arm", "i386": "386",
    "i686": "386", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}
_PROXY_FIELDS: Final = ("http_proxy", "https_proxy", "no_proxy")


@attrs.frozen(kw_only=True)
class EngineFacts:
    """What the engine can do, read once from ``GET /info`` (and ``/version`` if at hand).

    Attributes:
        runtimes: Names of the OCI runtimes the engine has, e.g. ``{"runc", "runsc"}``.
        runtime_paths: Each runtime's binary where reported, e.g. ``{"runsc": "/usr/bin/runsc"}``.
        runtime_args: Each runtime's extra arguments where reported, e.g.
            ``{"runsc": ("--network=none",)}``: ``--ignore-cgroups`` there turns off limits.
        default_runtime: Runtime used when a config names none.
        cgroup_version: ``"1"`` or ``"2"``; ``""`` when unknown.
        storage_driver: Storage driver, e.g. ``"overlay2"``.
        backing_filesystem: Filesystem under the storage driver, e.g. ``"extfs"`` or ``"xfs"``.
        security_options: ``SecurityOptions`` entries, e.g. ``"name=seccomp,profile=default"``.
        architecture: Engine architecture as a platform name (GOARCH), e.g. ``"amd64"``.
        mem_total: Host memory in bytes; 0 when unknown (no upper check).
        ncpu: Host CPUs; 0 when unknown (no upper check).
        api_version: Engine API version, e.g. ``"1.41"``; ``""`` when unknown.
    """

    runtimes: frozenset[str] = frozenset({"runc"})
    runtime_paths: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    runtime_args: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, hash=False)
    default_runtime: str = "runc"
    cgroup_version: str = ""
    storage_driver: str = ""
    backing_filesystem: str = ""
    security_options: tuple[str, ...] = ()
    architecture: str = ""
    mem_total: int = 0
    ncpu: int = 0
    api_version: str = ""

    @classmethod
    def from_info(
        cls, info: Mapping[str, Any], version: Mapping[str, Any] | None = None
    ) -> EngineFacts:
        """Build the facts from the engine's /info (and /version) JSON; missing keys are unknown."""
        backing = ""
        for pair in info.get("DriverStatus") or ():
            if len(pair) == 2 and pair[0] == "Backing Filesystem":
                backing = str(pair[1])
        version = version or {}
        machine = str(info.get("Architecture") or "")
        runtimes: Mapping[str, Any] = info.get("Runtimes") or {}
        paths: dict[str, str] = {}
        args: dict[str, tuple[str, ...]] = {}
        for runtime, spec in runtimes.items():
            if isinstance(spec, Mapping):
                if spec.get("path"):
                    paths[runtime] = str(spec["path"])
                if spec.get("runtimeArgs"):
                    args[runtime] = tuple(str(arg) for arg in spec["runtimeArgs"])
        return cls(
            runtimes=frozenset(runtimes),
            runtime_paths=paths,
            runtime_args=args,
            default_runtime=str(info.get("DefaultRuntime") or "runc"),
            cgroup_version=str(info.get("CgroupVersion") or ""),
            storage_driver=str(info.get("Driver") or ""),
            backing_filesystem=backing,
            security_options=tuple(str(o) for o in info.get("SecurityOptions") or ()),
            architecture=str(version.get("Arch") or _GOARCH.get(machine, machine)),
            mem_total=int(info.get("MemTotal") or 0),
            ncpu=int(info.get("NCPU") or 0),
            api_version=str(version.get("ApiVersion") or ""),
        )

    def is_gvisor(self, runtime: str) -> bool:
        """Tell whether `runtime` is gVisor: named ``runsc*`` or running a ``runsc`` binary."""
        binary = posixpath.basename(self.runtime_paths.get(runtime, ""))
        return runtime.startswith("runsc") or binary.startswith("runsc")

    def ignores_cgroups(self, runtime: str) -> bool:
        """Tell whether `runtime` runs with gVisor's ``--ignore-cgroups`` (the last one wins)."""
        ignored = False
        for arg in self.runtime_args.get(runtime, ()):
            name, _, value = arg.lstrip("-").partition("=")
            if arg.startswith("-") and name == "ignore-cgroups":
                # Go's flag package: a bare flag is true, else 1/t/T/TRUE/true/True.
                ignored = not value or value.lower() in ("1", "t", "true")
        return ignored

    def has_security_option(self, name: str) -> bool:
        """Tell whether the engine reports the security feature `name` (``apparmor``...)."""
        return any(f"name={name}" in option.split(",") for option in self.security_options)

    def api_at_least(self, wanted: tuple[int, int]) -> bool:
        """Compare the API version; an unknown version counts as too old."""
        major, _, minor = self.api_version.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            return False
        return (int(major), int(minor)) >= wanted


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
    """

    body: dict[str, Any]
    params: dict[str, str]
    pids_limit: int
    writable_paths: tuple[str, ...] = ()
    networked: bool = False
    needs_network: bool = False
    opt_ins: tuple[str, ...] = ()


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
    _refuse_unprovided(config)
    runtime = _runtime(config.runtime, engine)
    host: dict[str, Any] = {"Init": True}
    if runtime:
        host["Runtime"] = runtime
    # The rules follow the runtime that will run the sandbox, the engine's default included.
    effective = runtime or engine.default_runtime
    gvisor = engine.is_gvisor(effective)
    pids_limit = _resources(config.resources, effective, engine, host)
    networked = _is_networked(config)
    exposed = _network(config.network, networked, host)
    user, opt_ins = _user(config.security, image_user)
    working_dir = _working_dir(config.working_dir)
    writable = _filesystem(config.security, user, working_dir, gvisor, host)
    opt_ins += security_options(config.security, gvisor, engine, host)

    body: dict[str, Any] = {
        "Image": config.image,
        "Cmd": list(command),
        "Env": _environment(config),
        "Labels": _labels(config, labels, engine, host),
        "StopTimeout": STOP_TIMEOUT,
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
        needs_network=networked and not config.network.bridge,
        opt_ins=opt_ins,
    )


def _refuse_unprovided(config: SandboxConfig) -> None:
    """Refuse ``tools`` and ``mcp_servers``: nothing makes them available yet, and a sandbox
    silently without them would mislead the agent that asked for them."""
    asked = [f for f in ("tools", "mcp_servers") if getattr(config, f)]
    if asked:
        raise SandboxInitFailed(
            f"{', '.join(asked)}: not supported yet: nothing would make them available in the "
            "sandbox",
            details="leave them empty; install what the agent needs in the image instead",
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


def _resources(
    res: ResourceLimits, runtime: str, engine: EngineFacts, host: dict[str, Any]
) -> int:
    """Fill the resource options of `host` and return the process limit in force."""
    gvisor = engine.is_gvisor(runtime)
    if engine.ignores_cgroups(runtime):
        cgroup_limited = [f"resources.{field}" for field in _CGROUP_LIMITS if getattr(res, field)]
        if cgroup_limited:
            raise SandboxInitFailed(
                f"{', '.join(cgroup_limited)}: runtime {runtime!r} runs with --ignore-cgroups, "
                "so the engine would not enforce it",
                details="use runtime 'runc', or register the runtime without --ignore-cgroups",
            )
    # 0 means the SDK's default, sized from the host (the engine's view of it, so a remote
    # engine gets its own numbers); --ignore-cgroups would not enforce it, so none there.
    cpu_limit, memory_limit = res.cpu_limit, res.memory_limit
    if not engine.ignores_cgroups(runtime):
        cpu_limit = cpu_limit or max(default_cpu_limit(engine), res.cpu_request)
        memory_limit = memory_limit or max(default_memory_limit(engine), res.memory_request)
    # Defaults are in range by construction, or equal the request, which is checked below.
    if res.cpu_limit:
        if cpu_limit < MIN_CPU_LIMIT:
            raise SandboxInitFailed(
                f"resources.cpu_limit: {cpu_limit:g} cores is below the minimum of "
                f"{MIN_CPU_LIMIT:g}"
            )
        _check_max("resources.cpu_limit", cpu_limit, engine.ncpu, "CPUs")
    if cpu_limit:
        host["NanoCpus"] = round(cpu_limit * 1e9)
    if res.cpu_request:
        _check_max("resources.cpu_request", res.cpu_request, engine.ncpu, "CPUs")
        if res.cpu_limit and res.cpu_request > res.cpu_limit:
            raise ConfigError(
                f"resources.cpu_request ({res.cpu_request:g}) must not exceed "
                f"resources.cpu_limit ({res.cpu_limit:g})"
            )
        host["CpuShares"] = max(MIN_CPU_SHARES, round(res.cpu_request * 1024))
    if res.memory_limit:
        _check_memory("resources.memory_limit", memory_limit, engine)
    if memory_limit:
        host["Memory"] = memory_limit
        # Equal to Memory: no swap, so the limit is the limit.
        host["MemorySwap"] = memory_limit
    if res.memory_request:
        _check_memory("resources.memory_request", res.memory_request, engine)
        if res.memory_limit and res.memory_request > res.memory_limit:
            raise ConfigError(
                f"resources.memory_request ({res.memory_request}) must not exceed "
                f"resources.memory_limit ({res.memory_limit})"
            )
        host["MemoryReservation"] = res.memory_request
    if res.disk_limit:
        _check_disk_quota(engine)
        host["StorageOpt"] = {"size": str(res.disk_limit)}
    if res.disk_request:
        raise SandboxInitFailed(
            "resources.disk_request: Docker cannot reserve disk space",
            details="remove it; resources.disk_limit caps the writable layer where supported",
        )
    for field in ("network_in_limit", "network_out_limit"):
        if getattr(res, field):
            raise SandboxInitFailed(
                f"resources.{field}: bandwidth limits are not enforced yet",
                details="remove it, or keep the sandbox isolated",
            )

    ulimits: list[dict[str, Any]] = []
    processes = res.process_limit or DEFAULT_PROCESS_LIMIT
    if processes < MIN_PROCESS_LIMIT:
        raise SandboxInitFailed(
            f"resources.process_limit: {processes} is below the minimum of {MIN_PROCESS_LIMIT}",
            details="docker-init, the keep-alive and the SDK's helper commands need processes too",
        )
    if processes > MAX_PROCESS_LIMIT:
        raise SandboxInitFailed(
            f"resources.process_limit: {processes} is more than the kernel's maximum of "
            f"{MAX_PROCESS_LIMIT}", details="the pids cgroup rejects larger values")
    if gvisor:
        # See the module docstring: a pids cgroup limit kills gVisor itself when reached.
        ulimits.append(_ulimit("nproc", processes))
    else:
        host["PidsLimit"] = processes
    if res.file_limit:
        ulimits.append(_ulimit("nofile", res.file_limit))
    if res.cpu_time_limit:
        if gvisor:
            raise SandboxInitFailed(
                "resources.cpu_time_limit: gVisor (runsc) does not enforce RLIMIT_CPU",
                details="use runtime 'runc', or resources.wall_time_limit",
            )
        seconds = math.ceil(res.cpu_time_limit.total_seconds())
        # Soft < hard: the kernel sends SIGXCPU at the soft limit, so the result says why;
        # at soft == hard it sends SIGKILL, which reads like any other kill (measured).
        ulimits.append(_ulimit("cpu", seconds, hard=seconds + 1))
    if ulimits:
        host["Ulimits"] = ulimits
    return processes


def default_cpu_limit(engine: EngineFacts) -> float:
    """The CPU limit a sandbox gets when ``resources.cpu_limit`` is 0: min(2, host CPUs)."""
    return min(DEFAULT_CPU_LIMIT, float(engine.ncpu)) if engine.ncpu else 1.0


def default_memory_limit(engine: EngineFacts) -> int:
    """The memory limit a sandbox gets when ``resources.memory_limit`` is 0.

    min(2 GiB, a quarter of the host's memory), but at least the engine's 6 MiB minimum;
    2 GiB when the engine does not report its memory.
    """
    if not engine.mem_total:
        return DEFAULT_MEMORY_LIMIT
    share = engine.mem_total // DEFAULT_MEMORY_HOST_FRACTION
    return max(MIN_MEMORY, min(DEFAULT_MEMORY_LIMIT, share))


def _ulimit(name: str, value: int, *, hard: int | None = None) -> dict[str, Any]:
    return {"Name": name, "Soft": value, "Hard": value if hard is None else hard}


def _check_max(field: str, value: float, maximum: int, unit: str) -> None:
    if maximum and value > maximum:
        raise SandboxInitFailed(
            f"{field}: {value:g} is more than the engine's {maximum} {unit}"
        )


def _check_memory(field: str, value: int, engine: EngineFacts) -> None:
    if value < MIN_MEMORY:
        raise SandboxInitFailed(f"{field}: the engine's minimum is 6 MiB, got {value} bytes")
    if engine.mem_total and value > engine.mem_total:
        raise SandboxInitFailed(
            f"{field}: {value} bytes is more than the engine's {engine.mem_total} bytes of memory"
        )


def _check_disk_quota(engine: EngineFacts) -> None:
    driver, backing = engine.storage_driver, engine.backing_filesystem
    if driver in _DISK_QUOTA_DRIVERS or (driver == "overlay2" and backing == "xfs"):
        return
    raise SandboxInitFailed(
        f"resources.disk_limit: storage driver {driver or 'unknown'} on "
        f"{backing or 'unknown'} cannot limit a container's disk",
        details="it needs btrfs, zfs, devicemapper, or overlay2 on xfs mounted with pquota",
    )


def _is_networked(config: SandboxConfig) -> bool:
    sec = config.security
    return not config.network.isolated and sec.allow_networking and not sec.isolate_network


def _network(net: NetworkConfig, networked: bool, host: dict[str, Any]) -> dict[str, Any]:
    """Fill the network options of `host` and return ``ExposedPorts``."""
    unenforced = [f for f in _UNENFORCED_NETWORK if getattr(net, f)]
    if unenforced:
        fields = ", ".join(f"network.{f}" for f in unenforced)
        raise SandboxInitFailed(
            f"{fields}: not enforced yet: no egress policy",
            details="remove them, or keep the sandbox isolated",
        )
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
    if user in ROOT_NAMES:
        opt_ins.append(f"security.run_as_user: {user} (root)")
    if group in ROOT_NAMES:
        opt_ins.append(f"security.run_as_group: {group} (root group)")
    if not user:
        # The image's own user, unless it is root (in user or group): then a fixed one.
        image_uid, _, image_gid = image_user.strip().partition(":")
        if image_uid and image_uid not in ROOT_NAMES and image_gid not in ROOT_NAMES:
            user, group = image_uid, group or image_gid
        else:
            default_uid, _, default_gid = DEFAULT_USER.partition(":")
            user, group = default_uid, group or default_gid
    return f"{user}:{group}" if group else with_group(user), tuple(opt_ins)


def _working_dir(path: str) -> str:
    if path and not path.startswith("/"):
        raise ConfigError(f"working_dir: {path!r} must be an absolute path")
    return posixpath.normpath(path) if path else ""


def _filesystem(
    sec: SecurityPolicy, user: str, working_dir: str, gvisor: bool, host: dict[str, Any]
) -> tuple[str, ...]:
    """Fill the root filesystem and tmpfs options of `host`; return the tmpfs mount points."""
    tmpfs: dict[str, str] = {}
    for entry in sec.tmpfs_paths:
        path, _, options = entry.partition(":")
        if not path.startswith("/") or posixpath.normpath(path) == "/":
            raise ConfigError(
                f"security.tmpfs_paths: {entry!r} must be an absolute path other than /"
            )
        path = posixpath.normpath(path)
        if path in tmpfs:
            raise ConfigError(f"security.tmpfs_paths: {path!r} is listed twice")
        # The engine merges options left to right, so the user's own ones win.
        tmpfs[path] = f"{TMPFS_DEFAULT_OPTIONS},{options}" if options else TMPFS_DEFAULT_OPTIONS
    if sec.read_only_root:
        host["ReadonlyRootfs"] = True
        owner = _tmpfs_owner(user)
        for path in (working_dir, "/tmp"):
            if path and path != "/" and path not in tmpfs:
                tmpfs[path] = TMPFS_DEFAULT_OPTIONS + owner
    if tmpfs:
        host["Tmpfs"] = tmpfs
    for field, defaults, key in (
        ("read_only_paths", DOCKER_READONLY_PATHS, "ReadonlyPaths"),
        ("masked_paths", DOCKER_MASKED_PATHS, "MaskedPaths"),
    ):
        extra: tuple[str, ...] = getattr(sec, field)
        if not extra:
            continue  # No key keeps the engine's defaults.
        if gvisor:
            # gVisor ignores OCI maskedPaths/readonlyPaths (measured); its own /proc and /sys
            # lack or protect what Docker's defaults cover, so only listed paths are refused.
            raise SandboxInitFailed(
                f"security.{field}: gVisor (runsc) ignores it: the paths would stay "
                + ("visible" if field == "masked_paths" else "writable"),
                details="use runtime 'runc', or read_only_root / tmpfs_paths",
            )
        for path in extra:
            if not path.startswith("/"):
                raise ConfigError(f"security.{field}: {path!r} must be an absolute path")
        host[key] = list(dict.fromkeys((*defaults, *map(posixpath.normpath, extra))))
    return tuple(tmpfs)


def _tmpfs_owner(user: str) -> str:
    """Tmpfs options giving the sandbox user the mount; only numeric ids can go there."""
    owner = ""
    uid, _, gid = user.partition(":")
    if uid.isdigit():
        owner += f",uid={uid}"
    if gid.isdigit():
        owner += f",gid={gid}"
    return owner


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
