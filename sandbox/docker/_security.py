"""Map `SecurityPolicy` to the engine's privilege options: capabilities, seccomp, AppArmor,
SELinux and the PID namespace (the capability names and seccomp rules every backend shares
are `sandbox._privileges`').

Pure, like the rest of the create plan (`_plan`), whose docstring table lists each field's
mapping and the measured engine behaviour behind the refusals here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .._errors import ConfigError, SandboxInitFailed, SecurityViolation
from .._models import SecurityPolicy
from .._privileges import ESCALATING_CAPABILITIES, capability_names, seccomp_options

if TYPE_CHECKING:
    from ._facts import EngineFacts

__all__ = ["DEFAULT_CAP_DROP", "NO_NEW_PRIVILEGES", "security_options"]

NO_NEW_PRIVILEGES: Final = "no-new-privileges:true"
#: Every capability is dropped (the bounding set is empty, for root too); add_capabilities
#: adds back only what it lists.
DEFAULT_CAP_DROP: Final = ("ALL",)
_SELINUX_KEYS: Final = ("user", "role", "type", "level")


def security_options(
    sec: SecurityPolicy, gvisor: bool, engine: EngineFacts, host: dict[str, Any]
) -> tuple[str, ...]:
    """Fill capabilities, security options and the PID namespace of `host`; return the
    capability opt-ins."""
    options: list[str] = []
    if sec.no_new_privileges or sec.prevent_escalation:
        options.append(NO_NEW_PRIVILEGES)

    add = capability_names("add_capabilities", sec.add_capabilities)
    drop = capability_names("drop_capabilities", sec.drop_capabilities)
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

    options.extend(seccomp_options(sec, gvisor))
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
