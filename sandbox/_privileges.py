"""Privileges every backend maps the same way: Linux capability names and which of them
escalate, and the rules a seccomp profile must meet (`SecurityPolicy`).

Pure; each backend turns the result into its own form (the Engine API's CapAdd and
SecurityOpt, a Pod's securityContext, bubblewrap's arguments).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ._errors import ConfigError, SandboxInitFailed, SecurityViolation
from ._models import SecurityPolicy

__all__ = ["ESCALATING_CAPABILITIES", "KNOWN_CAPABILITIES", "capability_names",
           "seccomp_options"]

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
#: Seccomp default actions that let a syscall through ("": no filter is installed at all).
_SECCOMP_ALLOWING: Final = frozenset({"", "SCMP_ACT_ALLOW", "SCMP_ACT_LOG"})
_SECCOMP_DENYING: Final = frozenset({
    "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_KILL_THREAD",
    "SCMP_ACT_TRAP",
})


def capability_names(field: str, names: Sequence[str]) -> list[str]:
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
