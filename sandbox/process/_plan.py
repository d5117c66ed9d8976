"""Map a `SandboxConfig` to a bubblewrap sandbox: the one place that does it, and pure.

Every field is mapped or refused with the reason (``SandboxInitFailed("field: why")``), never
dropped. What the host cannot give (no cgroup access, another architecture) comes in as
arguments, so every rule is unit-tested without bwrap.

=====================================  ==================================================
config field                           process sandbox
=====================================  ==================================================
image                                  root filesystem: a directory, or a local Docker
                                       image exported once (`_rootfs`); top-level entries
                                       bound read-only into a tmpfs root, itself read-only
security.read_only_root                True: as above; the writable places are the
                                       working dir, /tmp, /var/tmp, the user's home and
                                       tmpfs_paths. False (the default): the root is an
                                       overlay of the image over an upper dir in the
                                       state dir (disk), written as file modes allow,
                                       gone at cleanup (`_overlay`); needs the SDK to
                                       run as root (mounted in a private mount
                                       namespace), else refused: set it True there
working_dir                            a host directory of the sandbox bound there
security.run_as_user / run_as_group    ``--uid``/``--gid`` in the user namespace (numbers,
                                       or names from the root's /etc/passwd, /etc/group);
                                       "" = the image's non-root user, else 1000:1000;
                                       root refused (one uid is mapped)
name                                   ``--hostname`` (first 63 characters)
repository                             as on Docker, by the same code (`_repository`):
                                       local_path bound live (``--ro-bind`` when
                                       read_only; written as the host user the sandbox
                                       runs as: nobody, or the SDK's); a read-only
                                       clone/filtered copy bound read-only; a writable
                                       one copied in after start, owned by the sandbox
                                       user. Clones by host git (the sandbox needs no
                                       network); git_config and GIT_CONFIG_GLOBAL as on
                                       Docker; owner/group refused (one user only)
environment, network.*_proxy           every command's environment (as on Docker)
(always)                               every namespace unshared (user, pid, mount, ipc,
                                       uts, cgroup; net unless host network), no
                                       capabilities, NoNewPrivs, ``--die-with-parent``;
                                       nested user namespaces denied by the default
                                       seccomp policy (as on Docker)
network.isolated / allow_networking    networked only with ``network.bridge="host"``: the
  / isolate_network                    host's own network, not isolated; else refused
resources.cpu_limit / cpu_request      cgroup cpu quota (100 ms period) / cpu shares
resources.memory_limit / _request      cgroup memory limit (and memsw) / soft limit
resources.process_limit                cgroup pids.max
  (cpu_limit, memory_limit, process_limit 0: the defaults of `_limits`, as on Docker)
(no cgroup: unprivileged on v1)        memory_limit: rlimit AS per command; process_limit:
                                       rlimit NPROC in the zygote (per uid in the sandbox's
                                       user namespace); cpu_limit: refused
                                       (`LimitNotEnforceable`) unless the default is every
                                       host CPU or allow_unbounded names it; cpu_request,
                                       memory_request: refused
resources.file_limit                   rlimit NOFILE, soft = hard: per command when set,
                                       else the default (512) in the zygote
resources.allow_unbounded              see cpu_limit above; an audited opt-out
resources.cpu_time_limit               rlimit CPU, whole seconds rounded up, hard +1 s
resources.wall_time_limit              the backend's clock (as on Docker)
security.read_only_paths               ``--remount-ro`` each (missing ones skipped)
security.masked_paths                  a read-only empty tmpfs (directories) or /dev/null
security.tmpfs_paths                   ``--tmpfs`` (options: ``size=`` and ``mode=`` only)
security.seccomp_profile               as on Docker: "" = Docker's default policy (no
                                       filter when libseccomp is missing), "unconfined",
                                       a path or inline JSON (compiled with libseccomp,
                                       refused without it); installed in the zygote
                                       every command starts from (`_forkserver`)
security.no_new_privileges,            always on (bwrap and the spawner set NoNewPrivs);
  prevent_escalation, drop_capabilities every capability is dropped anyway
=====================================  ==================================================

Refused when set: ``runtime`` (other than the default), another ``architecture``,
``pull_policy="always"`` (never pulls), ``repository.owner`` / ``group``, ``disk_limit``,
``disk_request``, ``network_*_limit``, ``add_capabilities``, ``apparmor_profile``,
``selinux_context``, ``isolate_process=False``, host and port filters,
``ingress/egress_limit``, ``dns_*``, ``port_mappings``, ``tools``, ``mcp_servers``.
Left to `Sandbox`: ``timeout``, ``cleanup_delay``, audit settings.
"""

from __future__ import annotations

import math
import platform
import posixpath
import resource
from collections.abc import Callable, Sequence

import attrs

from .._constants import DEFAULT_RUNTIME, DEFAULT_USER, LABEL_PREFIX
from .._errors import ConfigError, LimitNotEnforceable, SandboxInitFailed
from .._ids import names_root
from .._limits import host_size, with_defaults
from .._models import ResourceLimits, SandboxConfig
from .._paths import tmpfs_entries
from .._policy import is_networked
from .._privileges import seccomp_options

__all__ = ["ProcessPlan", "plan_sandbox"]

HOSTNAME_MAX = 63
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}

#: Looks a user or group name up in the root filesystem: ("passwd"|"group", name) -> id.
Lookup = Callable[[str, str], int | None]


@attrs.frozen(kw_only=True)
class ProcessPlan:
    """What the backend does for one config: ids, mounts, limits, environment."""

    uid: int
    gid: int
    hostname: str
    host_network: bool
    working_dir: str
    tmpfs: tuple[tuple[str, tuple[str, ...]], ...]  # (path, extra bwrap args before --tmpfs)
    read_only_paths: tuple[str, ...]
    masked_paths: tuple[str, ...]
    cgroup: ResourceLimits | None  # None: no cgroup can be made (rlimits hold instead)
    rlimits: tuple[tuple[int, int, int], ...]  # per command (a fork sets them)
    env: dict[str, str]
    writable_root: bool = False  # an overlay root (`_overlay`), not a read-only bind
    #: "" (no filter), "default" (`_seccomp.DEFAULT_PROFILE`) or a profile's JSON.
    seccomp: str = ""
    repository_mount: str = ""  # where `_repository` puts the repository ("" for none)
    #: Set in the zygote, so every command inherits them without a fork of its own.
    sandbox_rlimits: tuple[tuple[int, int, int], ...] = ()
    #: Per defaulted limit, what holds it here (`Limits.held`).
    limits: tuple[tuple[str, str], ...] = ()
    #: The defaulted limits ``resources.allow_unbounded`` let go unenforced.
    unbounded: tuple[str, ...] = ()


def _refuse(field: str, why: str, what: str = "") -> SandboxInitFailed:
    return SandboxInitFailed(f"{field}: {why}", details=what or
                             "use type='docker' for this setting, or leave it unset")


def _ids(cfg: SandboxConfig, image_user: str, lookup: Lookup) -> tuple[int, int]:
    sec = cfg.security
    user, group = sec.run_as_user, sec.run_as_group
    if not user:
        image_uid = image_user.partition(":")[0]
        if image_user and not names_root(image_uid):
            user, _, image_group = image_user.partition(":")
            group = group or image_group
        else:
            user, _, default_group = DEFAULT_USER.partition(":")
            group = group or default_group
    if names_root(user) or names_root(group):
        field = "security.run_as_user" if names_root(user) else "security.run_as_group"
        raise _refuse(field, "root cannot be the process sandbox's user: root in the "
                      "sandbox's user namespace holds every capability over its namespaces",
                      "use a non-root user, or type='docker'")
    uid = int(user) if user.isdigit() else lookup("passwd", user)
    if uid is None:
        raise ConfigError(f"security.run_as_user: {user!r} is not in the image's /etc/passwd",
                          details="give a numeric uid or a user the image defines")
    if not group:
        gid = uid if user.isdigit() else lookup("passwd-gid", user)
    else:
        gid = int(group) if group.isdigit() else lookup("group", group)
    if gid is None:
        raise ConfigError(f"security.run_as_group: {group or user!r} has no group in the "
                          "image's /etc/group", details="give a numeric gid")
    if uid == 0 or gid == 0:
        raise _refuse("security.run_as_user", f"{user!r} resolves to root (uid {uid}, gid "
                      f"{gid})", "use a non-root user, or type='docker'")
    return uid, gid


def _tmpfs(entries: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out: dict[str, tuple[str, ...]] = {}
    for entry, path, options in tmpfs_entries(entries):
        args: list[str] = []
        for opt in filter(None, options.split(",")):
            key, _, value = opt.partition("=")
            if key == "size" and value.isdigit():
                args += ["--size", value]
            elif key == "mode" and value and all(c in "01234567" for c in value):
                args += ["--perms", value.rjust(4, "0")]
            elif opt not in ("rw", "exec", "noexec", "nosuid", "nodev"):
                raise _refuse("security.tmpfs_paths", f"option {opt!r} of {entry!r} is not "
                              "supported here (only size=<bytes> and mode=<octal>)")
        out[path] = tuple(args)
    return tuple(out.items())


@attrs.frozen(kw_only=True)
class Limits:
    """How one sandbox's limits are held: a cgroup, per-command rlimits (a fork sets them),
    sandbox rlimits (the zygote takes them, every command inherits them) and, per defaulted
    limit, what holds it (`ProcessBackend.limits`)."""

    cgroup: ResourceLimits | None
    rlimits: tuple[tuple[int, int, int], ...]
    sandbox_rlimits: tuple[tuple[int, int, int], ...]
    held: tuple[tuple[str, str], ...]
    unbounded: tuple[str, ...]  # what allow_unbounded let go unenforced


def _limits(cfg: SandboxConfig, cgroup_problem: str, host: tuple[int, int],
            uid: int) -> Limits:
    """The defaults of `_limits` (the same as Docker's), in a cgroup when this process can
    make one, else as rlimits: RLIMIT_AS per command for memory, RLIMIT_NPROC (counted per
    uid in the sandbox's own user namespace: that sandbox only) and RLIMIT_NOFILE; a CPU
    limit nothing can hold is refused unless ``resources.allow_unbounded`` names it."""
    res = cfg.resources
    for field in ("disk_limit", "disk_request", "network_in_limit", "network_out_limit"):
        if getattr(res, field):
            raise _refuse(f"resources.{field}", "nothing in the process backend enforces it")
    if res.memory_request and res.memory_limit and res.memory_request > res.memory_limit:
        raise ConfigError("resources.memory_request is above resources.memory_limit")
    ncpu, _ = host
    eff = with_defaults(res, *host)
    rlimits: list[tuple[int, int, int]] = []
    sandbox: list[tuple[int, int, int]] = []
    held: dict[str, str] = {}
    unbounded: list[str] = []
    if res.file_limit:  # per command: a small one would starve the zygote of descriptors
        rlimits.append((resource.RLIMIT_NOFILE, res.file_limit, res.file_limit))
    else:
        sandbox.append((resource.RLIMIT_NOFILE, eff.file_limit, eff.file_limit))
    held["file_limit"] = f"{eff.file_limit} open files per process (RLIMIT_NOFILE)"
    cpu = res.cpu_time_limit.total_seconds()
    if cpu > 0:
        soft = math.ceil(cpu)
        rlimits.append((resource.RLIMIT_CPU, soft, soft + 1))
    cgroup: ResourceLimits | None = None
    if not cgroup_problem:
        cgroup = eff
        held["memory_limit"] = f"{eff.memory_limit} bytes for the sandbox (cgroup)"
        held["process_limit"] = f"{eff.process_limit} processes (pids cgroup)"
        held["cpu_limit"] = f"{eff.cpu_limit:g} cores (cgroup CFS quota)"
    else:
        for field in ("cpu_limit", "cpu_request", "memory_request"):
            if getattr(res, field):
                raise _refuse(f"resources.{field}", f"needs a cgroup of the sandbox's own, and "
                              f"{cgroup_problem}", "leave it 0 here, run as root, or use "
                              "type='docker'")
        rlimits.append((resource.RLIMIT_AS, eff.memory_limit, eff.memory_limit))
        held["memory_limit"] = (f"{eff.memory_limit} bytes of address space per process "
                                "(RLIMIT_AS), not a total: no cgroup")
        sandbox.append((resource.RLIMIT_NPROC, eff.process_limit, eff.process_limit))
        held["process_limit"] = (f"{eff.process_limit} processes (RLIMIT_NPROC of uid {uid} "
                                 "in the sandbox's own user namespace)")
        if ncpu and eff.cpu_limit >= ncpu:
            held["cpu_limit"] = f"{eff.cpu_limit:g} cores: all of this host's, nothing to hold"
        elif "cpu_limit" in res.allow_unbounded:
            held["cpu_limit"] = "unbounded, as resources.allow_unbounded accepts: no cgroup"
            unbounded.append("cpu_limit")
        else:
            raise LimitNotEnforceable(
                f"resources.cpu_limit: the default of {eff.cpu_limit:g} cores (of this host's "
                f"{ncpu or 'unknown number of'} CPUs) needs a cgroup of the sandbox's own, and "
                f"{cgroup_problem}; no rlimit bounds a CPU rate",
                details="run the SDK as root, use type='docker', or accept it unbounded with "
                        "ResourceLimits(allow_unbounded=('cpu_limit',))")
    return Limits(cgroup=cgroup, rlimits=tuple(rlimits), sandbox_rlimits=tuple(sandbox),
                  held=tuple(held.items()), unbounded=tuple(unbounded))


def _seccomp(cfg: SandboxConfig, problem: str) -> str:
    """The filter every command gets: Docker's rules for what a profile may be, Docker's
    default policy when none is named (none at all when libseccomp is missing here)."""
    options = seccomp_options(cfg.security, gvisor=False)  # validated as on Docker
    if not options:
        return "" if problem else "default"
    profile = options[0].removeprefix("seccomp=")
    if profile == "unconfined":
        return ""
    if problem:
        raise _refuse("security.seccomp_profile", f"a profile needs libseccomp here: {problem}",
                      "install libseccomp2, leave it empty, or use type='docker'")
    return profile


def _security(cfg: SandboxConfig) -> None:
    sec, net = cfg.security, cfg.network
    if sec.add_capabilities:
        raise _refuse("security.add_capabilities", "commands in a process sandbox hold no "
                      "capability, and none can be added")
    for field in ("apparmor_profile", "selinux_context"):
        if getattr(sec, field):
            raise _refuse(f"security.{field}", "bubblewrap applies no LSM profile")
    if not sec.isolate_process or sec.allow_host_pid:
        raise _refuse("security.isolate_process", "the process sandbox always has its own "
                      "pid namespace")
    for owner, obj in (("security", sec), ("network", net)):
        for field in ("allowed_hosts", "blocked_hosts", "allowed_ports"):
            if getattr(obj, field):
                raise _refuse(f"{owner}.{field}", "there is no egress filter here")
    for field in ("ingress_limit", "egress_limit", "dns_servers", "dns_search",
                  "port_mappings"):
        if getattr(net, field):
            raise _refuse(f"network.{field}", "the process backend has no network of its own")


def plan_sandbox(cfg: SandboxConfig, *, image_user: str = "", lookup: Lookup,
                 cgroup_problem: str, architecture: str | None = None,
                 overlay_problem: str = "", seccomp_problem: str = "",
                 host: tuple[int, int] | None = None) -> ProcessPlan:
    """Decide the process sandbox for ``cfg``, or refuse what it cannot enforce.

    ``cgroup_problem`` says why no cgroup can be made ("" when one can); ``overlay_problem``
    why no writable (overlay) root can; ``host`` is (CPUs, bytes of memory) the defaults are
    sized from (this host's when None).
    """
    if cfg.runtime not in ("", DEFAULT_RUNTIME):  # the default means "no preference" here
        raise _refuse("runtime", f"{cfg.runtime!r} names a Docker OCI runtime; the process "
                      "backend runs bubblewrap", "leave runtime empty, or use type='docker'")
    host_arch = architecture or _ARCH.get(platform.machine(), platform.machine())
    if cfg.architecture and cfg.architecture.removeprefix("linux/") != host_arch:
        raise _refuse("architecture", f"{cfg.architecture!r} is not this host's "
                      f"({host_arch}); the process backend runs no emulator")
    if cfg.pull_policy == "always":
        raise _refuse("pull_policy", "'always' pulls, and the process backend never pulls",
                      "pull with Docker first and use pull_policy='missing' or 'never'")
    repo = cfg.repository
    for field in ("owner", "group"):
        if repo is not None and getattr(repo, field):
            raise _refuse(f"repository.{field}", "a process sandbox has one user (its user "
                          "namespace maps no other), so files cannot get another owner",
                          "leave it empty (the sandbox user owns a writable copy), or use "
                          "type='docker'")
    for field in ("tools", "mcp_servers"):
        if getattr(cfg, field):
            raise _refuse(field, "nothing provides them yet")
    reserved = [key for key in cfg.labels if key.startswith(LABEL_PREFIX)]
    if reserved:
        raise ConfigError(f"labels: keys starting with {LABEL_PREFIX!r} are reserved for the "
                          f"SDK: {', '.join(sorted(reserved))}")
    _security(cfg)
    if not cfg.security.read_only_root and overlay_problem:
        raise _refuse("security.read_only_root", f"False needs a writable root, and "
                      f"{overlay_problem}", "set security.read_only_root=True (the working "
                      "dir, /tmp, the home and tmpfs_paths stay writable), run the SDK as "
                      "root, or use type='docker'")
    host_network = False
    if is_networked(cfg):
        if cfg.network.bridge != "host":
            raise _refuse("security.allow_networking", "the process backend has no network "
                          "of its own: only none (the default) or the host's own network",
                          "set network.bridge='host' to share the host's network (no "
                          "isolation), or use type='docker'")
        host_network = True
    uid, gid = _ids(cfg, image_user, lookup)
    limits = _limits(cfg, cgroup_problem, host or host_size(), uid)
    workdir = posixpath.normpath(cfg.working_dir or "/")
    if not workdir.startswith("/"):
        raise ConfigError(f"working_dir: {cfg.working_dir!r} must be an absolute path")
    env = {}
    for field in ("http_proxy", "https_proxy", "no_proxy"):
        if value := getattr(cfg.network, field):
            env[field] = env[field.upper()] = value
    return ProcessPlan(
        uid=uid, gid=gid, hostname=(cfg.name or "sandbox")[:HOSTNAME_MAX],
        host_network=host_network, working_dir=workdir,
        tmpfs=_tmpfs(cfg.security.tmpfs_paths),
        read_only_paths=tuple(posixpath.normpath(p) for p in cfg.security.read_only_paths),
        masked_paths=tuple(posixpath.normpath(p) for p in cfg.security.masked_paths),
        cgroup=limits.cgroup, rlimits=limits.rlimits, env=env,
        sandbox_rlimits=limits.sandbox_rlimits, limits=limits.held, unbounded=limits.unbounded,
        writable_root=not cfg.security.read_only_root,
        seccomp=_seccomp(cfg, seccomp_problem),
        repository_mount=posixpath.normpath(repo.mount_point) if repo is not None else "",
    )
