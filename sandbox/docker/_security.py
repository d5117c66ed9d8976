"""Map `SecurityPolicy` to the engine's privilege options: capabilities, seccomp, AppArmor,
SELinux and the PID namespace.

Pure, like the rest of the create plan (`_plan`), whose docstring table lists each field's
mapping and the measured engine behaviour behind the refusals here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from .._errors import ConfigError, SandboxInitFailed, SecurityViolation
from .._models import SecurityPolicy

if TYPE_CHECKING:
    from ._facts import EngineFacts

__all__ = [
    "DEFAULT_CAP_DROP", "ESCALATING_CAPABILITIES", "KNOWN_CAPABILITIES", "NO_NEW_PRIVILEGES",
    "security_options",
]

NO_NEW_PRIVILEGES: Final = "no-new-privileges:true"
#: Every capability is dropped (the bounding set is empty, for root too); add_capabilities
#: adds back only what it lists.
DEFAULT_CAP_DROP: Final = ("ALL",)
#: Capabilities that let a process leave or weaken the container; prevent_escalation refuses them.
ESCALATING_CAPABILITIES: Final = frozenset(
    {
        "ALL", "BPF", "DAC_READ_SEARCH", "MAC_ADMIN", "MAC_OVERRIDE", "PERFMON", "SYS_ADMIN",
        "SYS_BOOT", "SYS_MODULE", "SYS_PTRACE", "SYS_RAWIO",
        # Lets root raise hard rlimits: file_limit, cpu_time_limit and runsc's process_limit.
        "SYS_RESOURCE",
    }
)
#: Linux capability names (without CAP_), as of Linux 5.9.
KNOWN_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_CONTROL", "AUDIT_READ", "AUDIT_WRITE", "BLOCK_SUSPEND", "BPF",
        "CHECKPOINT_RESTORE", "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID",
        "IPC_LOCK", "IPC_OWNER", "KILL", "LEASE", "LINUX_IMMUTABLE", "MAC_ADMIN",
        "MAC_OVERRIDE", "MKNOD", "NET_ADMIN", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_RAW",
        "PERFMON", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_ADMIN", "SYS_BOOT",
        "SYS_CHROOT", "SYS_MODULE", "SYS_NICE", "SYS_PACCT", "SYS_PTRACE", "SYS_RAWIO",
        "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "SYSLOG", "WAKE_ALARM",
    }
)
_SELINUX_KEYS: Final = ("user", "role", "type", "level")
#: Seccomp default actions that let a syscall through ("": no filter is installed at all).
_SECCOMP_ALLOWING: Final = frozenset({"", "SCMP_ACT_ALLOW", "SCMP_ACT_LOG"})
_SECCOMP_DENYING: Final = frozenset({
    "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_TRAP",
})


def security_options(
    sec: SecurityPolicy, gvisor: bool, engine: EngineFacts, host: dict[str, Any]
) -> tuple[str, ...]:
    """Fill capabilities, security options and the PID namespace of `host`; return the
    capability opt-ins."""
    options: list[str] = []
    if sec.no_new_privileges or sec.prevent_escalation:
        options.append(NO_NEW_PRIVILEGES)

    add = _capabilities("add_capabilities", sec.add_capabilities)
    drop = _capabilities("drop_capabilities", sec.drop_capabilities)
    both = [cap for cap in add if cap in drop]
    if both:
        raise ConfigError(
            f"security.add_capabilities and security.drop_capabilities both name "
            f"{', '.join(both)}"
        )
    if sec.prevent_escalation:
        escalating = [cap for cap in add if cap in ESCALATING_CAPABILITIES]
        if escalating:
            raise SecurityViolation(
                f"security.add_capabilities: {', '.join(escalating)} would let the sandbox "
                "escalate its privileges",
                details="set security.prevent_escalation=False to allow it",
            )
    # Everything is dropped whatever drop_capabilities says; CapAdd is applied after it.
    host["CapDrop"] = list(DEFAULT_CAP_DROP)
    opt_ins: tuple[str, ...] = ()
    if add:
        host["CapAdd"] = add
        opt_ins = (f"security.add_capabilities: {', '.join(add)}",)

    options.extend(_seccomp(sec, gvisor))
    if sec.apparmor_profile:
        if gvisor:
            # runsc logs "AppArmor profile %q is being ignored" and starts anyway.
            raise SandboxInitFailed(
                "security.apparmor_profile: gVisor (runsc) ignores AppArmor profiles",
                details="use runtime 'runc' on an engine with AppArmor, or leave it empty",
            )
        if not engine.has_security_option("apparmor"):
            raise SecurityViolation(
                "security.apparmor_profile: AppArmor is not enabled on this engine",
                details="leave it empty; the engine reports "
                f"{', '.join(engine.security_options) or 'no security options'}",
            )
        options.append(f"apparmor={sec.apparmor_profile}")
    if sec.selinux_context:
        if not engine.has_security_option("selinux"):
            raise SecurityViolation(
                "security.selinux_context: SELinux is not enabled on this engine",
                details="leave it empty; the engine reports "
                f"{', '.join(engine.security_options) or 'no security options'}",
            )
        options.extend(_selinux_labels(sec.selinux_context))
    if options:
        host["SecurityOpt"] = options

    if not sec.isolate_process:
        if not sec.allow_host_pid or sec.prevent_escalation:
            raise SecurityViolation(
                "security.isolate_process=False shares the host's PID namespace",
                details="allow it with security.allow_host_pid=True and "
                "security.prevent_escalation=False",
            )
        if gvisor:
            raise SandboxInitFailed(
                "security.isolate_process=False: gVisor (runsc) cannot share the host's PIDs"
            )
        host["PidMode"] = "host"
    return opt_ins


def _capabilities(field: str, names: Sequence[str]) -> list[str]:
    """Normalize capability names ("cap_net_admin" -> "NET_ADMIN"), keeping order, no repeats."""
    result: list[str] = []
    for raw in names:
        cap = raw.strip().upper().removeprefix("CAP_")
        if cap != "ALL" and cap not in KNOWN_CAPABILITIES:
            raise ConfigError(f"security.{field}: unknown capability {raw!r}")
        if cap not in result:
            result.append(cap)
    return result


def seccomp_options(sec: SecurityPolicy, gvisor: bool) -> list[str]:
    """The engine's seccomp option for ``sec`` ([] for its default), validated; the process
    backend reads the same rules."""
    return _seccomp(sec, gvisor)


def _seccomp(sec: SecurityPolicy, gvisor: bool) -> list[str]:
    profile = sec.seccomp_profile.strip()
    if profile in ("", "runtime/default"):
        return []
    if profile == "unconfined":
        if sec.prevent_escalation:
            raise SecurityViolation(
                "security.seccomp_profile: 'unconfined' removes the syscall filter",
                details="set security.prevent_escalation=False to allow it",
            )
        return ["seccomp=unconfined"]
    if gvisor:
        raise SandboxInitFailed(
            "security.seccomp_profile: gVisor (runsc) on this engine ignores seccomp profiles",
            details="gVisor filters syscalls in its own kernel; use runtime 'runc' for a "
            "custom profile, or leave it empty",
        )
    if profile.startswith("{"):
        source, text = "inline JSON", profile
    else:
        source = profile
        try:
            with open(profile, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise SandboxInitFailed(
                f"security.seccomp_profile: cannot read {profile!r}", details=str(exc), cause=exc
            ) from exc
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SandboxInitFailed(
            f"security.seccomp_profile: {source!r} is not valid JSON", details=str(exc), cause=exc
        ) from exc
    if not isinstance(document, dict):
        raise SandboxInitFailed(
            f"security.seccomp_profile: {source!r} must hold a JSON object"
        )
    if sec.prevent_escalation and not _seccomp_denies(document):
        raise SecurityViolation(
            f"security.seccomp_profile: {source!r} allows every syscall by default and no rule "
            "denies one, which is as good as 'unconfined'",
            details="add a rule with action SCMP_ACT_ERRNO, SCMP_ACT_KILL* or SCMP_ACT_TRAP, or "
            "set security.prevent_escalation=False",
        )
    # The engine wants the content, not a path: a path fails at start (measured).
    return ["seccomp=" + json.dumps(document, separators=(",", ":"))]


def _seccomp_denies(document: Mapping[str, Any]) -> bool:
    """Tell whether a profile denies anything: by default, or by an unconditional rule.

    Measured: ``{}`` installs no filter at all, and a rule with no names denies nothing.
    Rules with ``includes``/``excludes`` apply only on some arches, kernels or capabilities.
    """
    default = document.get("defaultAction") or ""
    if not isinstance(default, str) or default not in _SECCOMP_ALLOWING:
        return True  # A malformed action fails at start: the engine says why.
    rules = document.get("syscalls")
    for rule in rules if isinstance(rules, list) else ():
        if (
            isinstance(rule, Mapping)
            and isinstance(rule.get("action"), str)
            and rule["action"] in _SECCOMP_DENYING
            and (rule.get("names") or rule.get("name"))
            and not rule.get("includes")
            and not rule.get("excludes")
        ):
            return True
    return False


def _selinux_labels(context: str) -> list[str]:
    """Turn "type:t,level:s0:c1,c2" style parts or a full "u:r:t:level" into label= options."""
    if context == "disable":
        return ["label=disable"]
    parts: list[str] = []
    for piece in context.split(","):
        piece = piece.strip()
        key, _, value = piece.partition(":")
        if key in _SELINUX_KEYS and value:
            parts.append(piece)
        elif parts and parts[-1].startswith("level:") and piece:
            parts[-1] += f",{piece}"  # A level holds commas: "s0:c1,c2".
        else:
            parts = []
            break
    if parts:
        return [f"label={p}" for p in parts]
    fields = context.split(":", 3)
    if len(fields) == 4 and all(fields) and fields[0] not in _SELINUX_KEYS:
        return [f"label={key}:{value}" for key, value in zip(_SELINUX_KEYS, fields, strict=True)]
    raise ConfigError(
        f"security.selinux_context: {context!r} must be 'user:role:type:level', parts like "
        "'type:svirt_t,level:s0:c1', or 'disable'"
    )
