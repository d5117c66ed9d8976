"""Map a `SandboxConfig` to one Pod and one NetworkPolicy: the one place that does it.

`plan_pod` is pure, so every rule is unit-tested without a cluster. Like the Docker backend's
``_create`` it refuses what it cannot enforce rather than dropping it; the reasons below are
the README's backend table.

=====================================  ==========================================================
config field                           Pod / NetworkPolicy
=====================================  ==========================================================
image, pull_policy                     ``image``; ``imagePullPolicy`` IfNotPresent/Always/Never
(keep-alive)                           ``command``: a shell that waits for SIGTERM;
                                       ``restartPolicy: Never``, grace period 2 s
name                                   Pod name (a DNS-1123 label); "" = ``sandbox-<id>``
runtime                                ``runtimeClassName``: "runsc" -> the backend's class for
                                       gVisor (default "gvisor"), other names through its
                                       ``runtime_classes``; "" or "runc" = the node's default
architecture                           ``nodeSelector`` ``kubernetes.io/arch``
working_dir                            ``workingDir`` + an ``emptyDir`` there, group-owned by
                                       the sandbox group (``fsGroup``); hides image content
environment                            not in the Pod: given to each exec (so it can be unset)
network.http(s)_proxy, no_proxy        container ``env``, lower and UPPER case
labels / annotations                   Pod ``labels`` / ``annotations`` (``io.sandbox.``
                                       keys reserved); plus ownership labels for gc
resources.cpu_limit / cpu_request      ``limits.cpu`` (0 = 2 cores) / ``requests.cpu``
resources.memory_limit / _request      ``limits.memory`` (0 = 2 GiB) / ``requests.memory``
resources.disk_limit / disk_request    ``limits`` / ``requests`` ``ephemeral-storage``
resources.wall_time_limit              ``activeDeadlineSeconds`` (rounded up)
security.run_as_user / run_as_group    ``runAsUser`` / ``runAsGroup`` numbers (default 1000),
                                       ``runAsNonRoot`` unless root was asked for (an opt-in)
security.read_only_root                ``readOnlyRootFilesystem`` + memory ``emptyDir`` on
                                       working_dir and /tmp
security.tmpfs_paths                   ``emptyDir`` ``medium: Memory``; option ``size=`` ->
                                       ``sizeLimit``
security.no_new_privileges /           ``allowPrivilegeEscalation: false``
  prevent_escalation
security.add/drop_capabilities         ``capabilities.drop: [ALL]``, ``add`` the listed ones;
                                       escalating ones refused under prevent_escalation
security.seccomp_profile               "" / "runtime/default": ``RuntimeDefault``;
                                       "unconfined": ``Unconfined`` (not under
                                       prevent_escalation); "localhost/<file>": ``Localhost``
security.apparmor_profile              ``appArmorProfile``: runtime/default, unconfined, or a
                                       loaded profile's name (``Localhost``)
security.selinux_context               ``seLinuxOptions`` from "user:role:type:level"
security.isolate_process=False         ``hostPID`` (needs allow_host_pid, not
                                       prevent_escalation; refused under gVisor)
network.isolated, security.allow_      NetworkPolicy selecting the Pod: no ingress; egress
  networking, isolate_network          none unless networked; then all, or only:
network.allowed_hosts (+ security.)    ``ipBlock`` per IP/CIDR; host names refused (they need
                                       the egress proxy, which this backend lacks)
network.blocked_hosts (+ security.)    ``ipBlock.except`` (IPs/CIDRs only)
network.allowed_ports (+ security.)    ``ports`` (TCP and UDP)
network.dns_servers / dns_search       ``dnsPolicy: None`` + ``dnsConfig``
(always)                               ``automountServiceAccountToken: false``,
                                       ``enableServiceLinks: false``, no host network/IPC
=====================================  ==========================================================

Refused, with the reason in the message: ``repository`` (a host checkout cannot reach a
node), ``tools``/``mcp_servers`` (as on Docker), ``resources.process_limit`` (a kubelet
setting, ``podPidsLimit``, not a Pod field), ``file_limit`` and ``cpu_time_limit`` (Pods have
no rlimits), ``network_in/out_limit``, ``network.ingress/egress_limit`` and ``bridge`` (no Pod
field enforces them), ``network.port_mappings`` (publish with a Service instead),
``security.read_only_paths`` / ``masked_paths`` (Kubernetes has only ``procMount``), a
seccomp profile given as a host path or inline JSON (it must be on the node). Left to the SDK
or the backend: ``type``, ``timeout``, ``cleanup_delay``, ``stats_interval``, the audit
settings.
"""

from __future__ import annotations

import ipaddress
import math
import posixpath
import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from .._constants import DEFAULT_CPU_LIMIT, DEFAULT_MEMORY_LIMIT, DEFAULT_USER, LABEL_PREFIX
from .._errors import ConfigError, SandboxInitFailed, SecurityViolation
from .._ids import go_atoi, names_root
from .._models import NetworkConfig, SandboxConfig, SecurityPolicy
from .._paths import tmpfs_entries
from .._policy import is_networked
from .._privileges import ESCALATING_CAPABILITIES, capability_names

__all__ = ["CONTAINER", "KEEPALIVE", "PodPlan", "plan_pod"]

#: The container's name in every sandbox Pod.
CONTAINER: Final = "sandbox"
#: The main process: waits forever and ends on SIGTERM (no init: it is PID 1 and reaps).
KEEPALIVE: Final = ("/bin/sh", "-c",
                    "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done")
#: The runtime class used for runtime="runsc" unless the backend says otherwise.
DEFAULT_GVISOR_CLASS: Final = "gvisor"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_PULL = {"missing": "IfNotPresent", "always": "Always", "never": "Never"}
_PROXY_FIELDS = ("http_proxy", "https_proxy", "no_proxy")
_SIZE = re.compile(r"([0-9]+)([kmg]?)", re.IGNORECASE)


@attrs.frozen
class PodPlan:
    """What `plan_pod` decided: the two objects to create and who commands run as."""

    pod: Mapping[str, Any]
    policy: Mapping[str, Any]
    #: "uid:gid" every exec runs as (Kubernetes exec cannot pick another user).
    user: str
    #: Root or capability grants the config asked for explicitly, for the audit.
    opt_ins: tuple[str, ...] = ()


def _refuse(field: str, why: str, what: str = "") -> SandboxInitFailed:
    return SandboxInitFailed(f"{field}: {why}", details=what)


def plan_pod(config: SandboxConfig, *, name: str, namespace: str, labels: Mapping[str, str],
             annotations: Mapping[str, str],
             runtime_classes: Mapping[str, str]) -> PodPlan:
    """Build the Pod and NetworkPolicy for ``config``; raise for what cannot be enforced.

    Raises:
        SandboxInitFailed: A field no Pod field enforces ("field: why").
        SecurityViolation: A field asking for more privilege than prevent_escalation allows.
        ConfigError: A malformed value.
    """
    _refuse_unmappable(config)
    if not _DNS_LABEL.fullmatch(name):
        raise ConfigError(f"name: {name!r} is not a valid Pod name (lower-case letters, digits "
                          "and '-', at most 63, starting and ending alphanumeric)")
    sec = config.security
    user, opt_ins = _user(sec)
    uid, _, gid = user.partition(":")
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    workdir = _working_dir(config.working_dir)
    for path, size in _tmpfs(sec, workdir).items():
        vol = f"tmpfs-{len(volumes)}"
        empty: dict[str, Any] = {"medium": "Memory"}
        if size:
            empty["sizeLimit"] = size
        volumes.append({"name": vol, "emptyDir": empty})
        mounts.append({"name": vol, "mountPath": path})
    if workdir and workdir != "/" and workdir not in {m["mountPath"] for m in mounts}:
        volumes.append({"name": "workdir", "emptyDir": {}})
        mounts.append({"name": "workdir", "mountPath": workdir})
    caps_add = capability_names("add_capabilities", sec.add_capabilities)
    drop = capability_names("drop_capabilities", sec.drop_capabilities)
    both = [c for c in caps_add if c in drop]
    if both:
        raise ConfigError(f"security.add_capabilities and security.drop_capabilities both "
                          f"name {', '.join(both)}")
    if sec.prevent_escalation:
        escalating = [c for c in caps_add if c in ESCALATING_CAPABILITIES]
        if escalating:
            raise SecurityViolation(
                f"security.add_capabilities: {', '.join(escalating)} would let the sandbox "
                "escalate its privileges", details="set security.prevent_escalation=False")
    if caps_add:
        opt_ins += (f"security.add_capabilities: {', '.join(caps_add)}",)
    gvisor = config.runtime == "runsc"
    container_sc: dict[str, Any] = {
        "runAsUser": int(uid), "runAsGroup": int(gid), "runAsNonRoot": uid != "0",
        "readOnlyRootFilesystem": sec.read_only_root,
        "allowPrivilegeEscalation": not (sec.no_new_privileges or sec.prevent_escalation),
        "privileged": False,
        "capabilities": {"drop": ["ALL"], **({"add": caps_add} if caps_add else {})},
        "seccompProfile": _seccomp(sec),
    }
    if sec.apparmor_profile:
        container_sc["appArmorProfile"] = _apparmor(sec.apparmor_profile, gvisor)
    if sec.selinux_context:
        container_sc["seLinuxOptions"] = _selinux(sec.selinux_context)
    res = config.resources
    limits = {"cpu": _cpu(res.cpu_limit or DEFAULT_CPU_LIMIT),
              "memory": str(res.memory_limit or DEFAULT_MEMORY_LIMIT)}
    requests: dict[str, str] = {}
    if res.cpu_request:
        requests["cpu"] = _cpu(res.cpu_request)
    if res.memory_request:
        if res.memory_limit and res.memory_request > res.memory_limit:
            raise ConfigError("resources.memory_request: must not exceed memory_limit")
        requests["memory"] = str(res.memory_request)
    if res.disk_limit:
        limits["ephemeral-storage"] = str(res.disk_limit)
    if res.disk_request:
        requests["ephemeral-storage"] = str(res.disk_request)
    container: dict[str, Any] = {
        "name": CONTAINER, "image": config.image, "command": list(KEEPALIVE),
        "imagePullPolicy": _PULL.get(config.pull_policy, "IfNotPresent"),
        "securityContext": container_sc,
        "resources": {"limits": limits, **({"requests": requests} if requests else {})},
        "env": _environment(config.network), "volumeMounts": mounts,
    }
    if workdir:
        container["workingDir"] = workdir
    pod_labels = {**_user_labels(config), **labels}
    spec: dict[str, Any] = {
        "containers": [container], "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2, "automountServiceAccountToken": False,
        "enableServiceLinks": False, "hostNetwork": False, "hostIPC": False,
        "hostPID": _host_pid(sec, gvisor),
        "securityContext": {"fsGroup": int(gid), "runAsNonRoot": uid != "0"},
        "volumes": volumes,
    }
    wall = res.wall_time_limit.total_seconds()
    if wall > 0:
        spec["activeDeadlineSeconds"] = math.ceil(wall)
    runtime_class = _runtime_class(config.runtime, runtime_classes)
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    if config.architecture:
        spec["nodeSelector"] = {"kubernetes.io/arch": config.architecture}
    net = config.network
    if net.dns_servers or net.dns_search:
        spec["dnsPolicy"] = "None"
        spec["dnsConfig"] = {"nameservers": list(net.dns_servers),
                             "searches": list(net.dns_search)}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": pod_labels,
                        "annotations": {**config.annotations, **annotations}},
           "spec": spec}
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": name, "namespace": namespace, "labels": dict(labels),
                           "annotations": dict(annotations)},
              "spec": {"podSelector": {"matchLabels": dict(labels)},
                       "policyTypes": ["Ingress", "Egress"], "ingress": [],
                       "egress": _egress(config)}}
    return PodPlan(pod=pod, policy=policy, user=user, opt_ins=opt_ins)


def _refuse_unmappable(config: SandboxConfig) -> None:
    """Refuse, with the reason, every field no Pod field can enforce."""
    res, net, sec = config.resources, config.network, config.security
    checks: list[tuple[bool, str, str, str]] = [
        (config.repository is not None, "repository",
         "not supported on Kubernetes: a host checkout or bind mount cannot reach a node",
         "clone inside the sandbox with execute_command, or bake the code into the image"),
        (bool(config.tools or config.mcp_servers), "tools, mcp_servers",
         "not supported yet: nothing would make them available in the sandbox",
         "leave them empty; install what the agent needs in the image"),
        (bool(res.process_limit), "resources.process_limit",
         "a Pod has no pids limit of its own: the kubelet's podPidsLimit applies to all Pods",
         "leave it 0 and set podPidsLimit in the kubelet configuration"),
        (bool(res.file_limit), "resources.file_limit",
         "Pods have no rlimits (RLIMIT_NOFILE is the container runtime's default)",
         "leave it 0"),
        (res.cpu_time_limit.total_seconds() > 0, "resources.cpu_time_limit",
         "Pods have no rlimits (RLIMIT_CPU)", "use wall_time_limit or Command.timeout"),
        (bool(res.network_in_limit or res.network_out_limit or net.ingress_limit
              or net.egress_limit), "resources.network_*_limit / network.*_limit",
         "no Pod field enforces bandwidth (the CNI bandwidth plugin's annotations are not "
         "checked by the API server)", "leave them 0"),
        (bool(net.bridge), "network.bridge", "Pods join the cluster network, not a bridge",
         "leave it empty"),
        (bool(net.port_mappings), "network.port_mappings",
         "a Pod publishes no host ports here", "reach the Pod through a Service you create"),
        (bool(sec.read_only_paths or sec.masked_paths),
         "security.read_only_paths / masked_paths",
         "Kubernetes offers only procMount, not a list of paths",
         "use read_only_root and tmpfs_paths"),
    ]
    for refused, field, why, what in checks:
        if refused:
            raise _refuse(field, why, what)


def _user(sec: SecurityPolicy) -> tuple[str, tuple[str, ...]]:
    """``uid:gid`` as numbers (runAsUser takes no names), and the root opt-ins."""
    default_uid, _, default_gid = DEFAULT_USER.partition(":")
    opt_ins: list[str] = []
    ids = []
    for field in ("run_as_user", "run_as_group"):
        value = getattr(sec, field).strip()
        if names_root(value):
            opt_ins.append(f"security.{field}: {value} (root)")
            value = "0"
        number = go_atoi(value)
        if value and (number is None or number < 0):
            raise _refuse(f"security.{field}",
                          f"{value!r} is a name; Kubernetes runAsUser/runAsGroup take numbers",
                          "give the numeric id")
        ids.append(str(number) if value else "")
    uid, gid = ids
    gid = gid or (uid if uid else default_gid)
    return f"{uid or default_uid}:{gid}", tuple(opt_ins)


def _working_dir(path: str) -> str:
    if path and not path.startswith("/"):
        raise ConfigError(f"working_dir: {path!r} must be an absolute path")
    return posixpath.normpath(path) if path else ""


def _tmpfs(sec: SecurityPolicy, workdir: str) -> dict[str, str]:
    """Memory-backed emptyDir mount points and their size limits ("" = none)."""
    out: dict[str, str] = {}
    for _entry, path, options in tmpfs_entries(sec.tmpfs_paths):
        size = ""
        for option in filter(None, options.split(",")):
            key, _, value = option.partition("=")
            m = _SIZE.fullmatch(value)
            if key != "size" or m is None:
                raise _refuse("security.tmpfs_paths",
                              f"option {option!r} of {path!r}: an emptyDir takes only size=",
                              "drop the option (emptyDir mounts are rw,nosuid,nodev)")
            size = m.group(1) + {"": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m.group(2).lower()]
        out[path] = size
    if sec.read_only_root:
        for path in (workdir, "/tmp"):
            if path and path != "/":
                out.setdefault(path, "")
    return out


def _cpu(cores: float) -> str:
    return f"{math.ceil(cores * 1000)}m"


def _seccomp(sec: SecurityPolicy) -> dict[str, str]:
    profile = sec.seccomp_profile.strip()
    if profile in ("", "runtime/default"):
        return {"type": "RuntimeDefault"}
    if profile == "unconfined":
        if sec.prevent_escalation:
            raise SecurityViolation("security.seccomp_profile: 'unconfined' removes the syscall "
                                    "filter", details="set security.prevent_escalation=False")
        return {"type": "Unconfined"}
    if profile.startswith("localhost/") and len(profile) > len("localhost/"):
        return {"type": "Localhost", "localhostProfile": profile.removeprefix("localhost/")}
    raise _refuse("security.seccomp_profile",
                  f"{profile[:80]!r}: a Pod can only name a profile already on the node",
                  "copy it to the kubelet's seccomp directory and give 'localhost/<file>'")


def _apparmor(profile: str, gvisor: bool) -> dict[str, str]:
    if gvisor:
        raise _refuse("security.apparmor_profile", "gVisor (runsc) ignores AppArmor profiles",
                      "leave it empty, or use the node's default runtime")
    if profile == "runtime/default":
        return {"type": "RuntimeDefault"}
    if profile == "unconfined":
        raise SecurityViolation("security.apparmor_profile: 'unconfined' is not confinement",
                                details="leave it empty for the runtime's default")
    return {"type": "Localhost", "localhostProfile": profile}


def _selinux(context: str) -> dict[str, str]:
    parts = context.split(":", 3)
    if len(parts) < 3 or not all(parts[:3]):
        raise ConfigError(f"security.selinux_context: {context!r} must be user:role:type[:level]")
    keys = ("user", "role", "type", "level")
    return {k: v for k, v in zip(keys, parts, strict=False) if v}


def _host_pid(sec: SecurityPolicy, gvisor: bool) -> bool:
    if sec.isolate_process:
        return False
    if not sec.allow_host_pid or sec.prevent_escalation:
        raise SecurityViolation("security.isolate_process=False shares the node's PID namespace",
                                details="allow it with security.allow_host_pid=True and "
                                        "security.prevent_escalation=False")
    if gvisor:
        raise _refuse("security.isolate_process", "gVisor (runsc) cannot share the node's PIDs")
    return True


def _runtime_class(runtime: str, classes: Mapping[str, str]) -> str:
    if runtime in classes:
        return classes[runtime]
    if runtime == "runsc":
        return DEFAULT_GVISOR_CLASS
    if runtime in ("", "runc"):
        return ""
    raise _refuse("runtime", f"{runtime!r} has no RuntimeClass in this backend",
                  "name it in KubernetesBackend(runtime_classes={...})")


def _environment(net: NetworkConfig) -> list[dict[str, str]]:
    env: list[dict[str, str]] = []
    for field in _PROXY_FIELDS:
        value = getattr(net, field)
        if value:
            env += [{"name": field, "value": value}, {"name": field.upper(), "value": value}]
    return env


def _user_labels(config: SandboxConfig) -> dict[str, str]:
    for mapping, field in ((config.labels, "labels"), (config.annotations, "annotations")):
        reserved = sorted(k for k in mapping if k.startswith(LABEL_PREFIX))
        if reserved:
            raise ConfigError(f"{field}: keys starting with {LABEL_PREFIX!r} are reserved for "
                              f"the SDK: {', '.join(reserved)}")
    return dict(config.labels)


def _networks(field: str, hosts: tuple[str, ...]) -> list[ipaddress.IPv4Network |
                                                            ipaddress.IPv6Network]:
    nets = []
    for host in hosts:
        try:
            nets.append(ipaddress.ip_network(host, strict=False))
        except ValueError:
            raise _refuse(field, f"{host!r} is a host name: a NetworkPolicy matches only IP "
                                 "blocks, and this backend has no egress proxy for names",
                          "give IP addresses or CIDRs") from None
    return nets


def _egress(config: SandboxConfig) -> list[dict[str, Any]]:
    """The egress rules: none for an isolated sandbox, else all or the allowed blocks/ports."""
    net, sec = config.network, config.security
    allowed_hosts = net.allowed_hosts + sec.allowed_hosts
    blocked_hosts = net.blocked_hosts + sec.blocked_hosts
    ports = tuple(dict.fromkeys(net.allowed_ports + sec.allowed_ports))
    if not is_networked(config):
        if allowed_hosts or blocked_hosts or ports:
            raise _refuse("network.allowed_hosts / blocked_hosts / allowed_ports",
                          "an isolated sandbox has no egress to filter",
                          "set network.isolated=False, security.isolate_network=False and "
                          "security.allow_networking=True")
        return []
    allowed = _networks("network.allowed_hosts", allowed_hosts) or [
        ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]
    blocked = _networks("network.blocked_hosts", blocked_hosts)
    peers = []
    for block in allowed:
        excepts = [str(b) for b in blocked
                   if b.version == block.version and b.subnet_of(block) and b != block]  # type: ignore[arg-type]
        if any(b.version == block.version and block.subnet_of(b) for b in blocked):  # type: ignore[arg-type]
            continue  # wholly blocked
        peer: dict[str, Any] = {"cidr": str(block)}
        if excepts:
            peer["except"] = excepts
        peers.append({"ipBlock": peer})
    if not peers:
        raise _refuse("network.blocked_hosts", "blocks every allowed host: nothing is left",
                      "remove the overlap, or keep the sandbox isolated")
    rule: dict[str, Any] = {"to": peers}
    if ports:
        rule["ports"] = [{"protocol": p, "port": port} for port in ports for p in ("TCP", "UDP")]
    return [rule]
