"""Command policy: what a sandbox lets one command do, decided without an engine.

Turns a `Command` and the sandbox's state (its user, working directory, environment,
network) into the `ProcessSpec` a backend runs, refusing what the sandbox does not allow:
network for an isolated sandbox, path restriction that cannot be enforced per command, and
a per-command user that would widen the sandbox user to root. Every refusal is audited.
Per-command settings may only narrow what the sandbox allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from ._audit import Auditor
from ._backend import ProcessSpec
from ._errors import ConfigError, NetworkAccessDenied, SecurityViolation
from ._models import Command, SandboxConfig, check_environment
from ._paths import resolve
from ._protocol import to_command as to_command

__all__ = ["is_networked", "merge_environment", "plan_process", "to_command"]

#: The user a command with ``allow_write=False`` runs as: nobody, who owns nothing.
NOBODY = "65534:65534"


def seconds(value: timedelta) -> float | None:
    """A duration in seconds, with zero (or less) meaning "no limit" (None)."""
    s = value.total_seconds()
    return s if s > 0 else None


#: How a user or group field names root.
ROOT_NAMES = ("0", "root")


def is_root(user: str) -> bool:
    """True when ``user`` ("name", "uid" or "uid:gid") names root as user."""
    return user.split(":", 1)[0] in ROOT_NAMES


def with_group(user: str) -> str:
    """A numeric user without a group gets the same number as group, never the engine's 0.

    The engine would take the group from the image's /etc/passwd, and 0 (root's group) for a
    uid missing there; a name keeps its passwd group, which the backend checks is not 0.
    """
    return f"{user}:{user}" if user.isdigit() else user


def widens(asked: str, sandbox: str) -> bool:
    """True when running as ``asked`` gives root (user or group) the sandbox user lacks."""
    uid, _, gid = asked.partition(":")
    s_uid, _, s_gid = sandbox.partition(":")
    return (uid in ROOT_NAMES and s_uid not in ROOT_NAMES) or \
        (gid in ROOT_NAMES and s_gid not in ROOT_NAMES)


def is_networked(config: SandboxConfig) -> bool:
    """True when the sandbox has a network its commands may use."""
    return not config.network.isolated and config.security.allow_networking \
        and not config.security.isolate_network


def plan_process(
    command: Command, *, config: SandboxConfig, user: str, cwd: str, env: Mapping[str, str],
    audit: Auditor,
) -> ProcessSpec:
    """Decide how ``command`` runs in a sandbox whose commands run as ``user`` in ``cwd``.

    Raises:
        NetworkAccessDenied: The command asks for network in an isolated sandbox.
        SecurityViolation: It asks for ``restrict_paths``, or for a user that would run as
            root (user or group) where the sandbox user is not root.
    """
    argv = (command.executable, *command.args)
    if command.allow_network and not is_networked(config):
        asked = f"allow_network=True for {list(argv)}"
        raise audit.refused("network.isolated", asked, NetworkAccessDenied(
            "Command.allow_network asks for network access, but this sandbox is isolated",
            details="set network.isolated=False and security.allow_networking=True "
                    "in the SandboxConfig to give the sandbox a network",
        ))
    if command.restrict_paths:
        asked = f"restrict_paths={list(command.restrict_paths)} for {list(argv)}"
        raise audit.refused("Command.restrict_paths", asked, SecurityViolation(
            "Command.restrict_paths cannot be enforced for a single command",
            details="use SecurityPolicy.read_only_paths / masked_paths for the sandbox",
        ))
    if command.user and user and not is_root(user) and widens(command.user, user):
        asked = f"user={command.user!r} for {list(argv)}"
        raise audit.refused("security.run_as_user", asked, SecurityViolation(
            f"Command.user={command.user!r} would run as root (user or group) in a sandbox "
            f"that runs as {user!r}", details="per-command settings may only narrow the "
                                              "sandbox's"))
    run_as = with_group(command.user) or user
    if not command.allow_write:
        run_as = NOBODY
    stdin = command.stdin
    if isinstance(stdin, str):
        stdin = stdin.encode()
    if stdin is None and command.stdin_content:
        stdin = command.stdin_content.encode()
    return ProcessSpec(
        argv=argv,
        env={**env, **command.environment},
        workdir=resolve(cwd, command.working_dir) if command.working_dir else cwd,
        user=run_as,
        stdin=stdin,
        max_output_bytes=command.max_output_bytes,
        time_limit=seconds(command.timeout) or seconds(config.timeout),
        idle_timeout=seconds(command.idle_timeout),
    )


def merge_environment(current: Mapping[str, str], changes: Mapping[str, str | None]
                      ) -> dict[str, str]:
    """``current`` with ``changes`` applied: a value sets a variable, None removes it."""
    for key, value in changes.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"environment[{key!r}] must be a string, or None to remove it, "
                              f"not {type(value).__name__}")
    check_environment({k: v for k, v in changes.items() if v is not None})
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged
