"""Command policy: what a sandbox lets one command do, decided without an engine.

Turns a `Command` and the sandbox's state (its user, working directory, environment,
network) into the `ProcessSpec` a backend runs, refusing what the sandbox does not allow:
network for an isolated sandbox, path restriction that cannot be enforced per command, and
a per-command user or group other than the sandbox user's own or nobody (compared as the
numbers the engine would run, `_ids`). Every refusal is audited.
Per-command settings may only narrow what the sandbox allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from ._audit import Auditor
from ._backend import ProcessSpec, plain_spec
from ._constants import DEFAULT_MAX_OUTPUT_BYTES
from ._errors import ConfigError, NetworkAccessDenied, SecurityViolation
from ._ids import Identity, names_root, narrow_user, split_spec
from ._models import Command, SandboxConfig, check_environment
from ._paths import resolve
from ._protocol import to_command as to_command

__all__ = ["is_networked", "merge_environment", "plan_argv", "plan_process", "to_command"]

#: The user a command with ``allow_write=False`` runs as: nobody, who owns nothing.
NOBODY = "65534:65534"


def seconds(value: timedelta) -> float | None:
    """A duration in seconds, with zero (or less) meaning "no limit" (None)."""
    s = value.total_seconds()
    return s if s > 0 else None


def is_root(user: str) -> bool:
    """True when ``user`` ("name", "uid" or "uid:gid", any spelling) names root as user."""
    return names_root(split_spec(user)[0])


def with_group(user: str) -> str:
    """A numeric user without a group gets the same number as group, never the engine's 0.

    The engine would take the group from the image's /etc/passwd, and 0 (root's group) for a
    uid missing there; a name keeps its passwd group, which the backend checks is not 0.
    """
    return f"{user}:{user}" if user.isdigit() else user


def is_networked(config: SandboxConfig) -> bool:
    """True when the sandbox has a network its commands may use."""
    return not config.network.isolated and config.security.allow_networking \
        and not config.security.isolate_network


def plan_process(
    command: Command, *, config: SandboxConfig, user: str, cwd: str, env: Mapping[str, str],
    audit: Auditor, identity: Identity | None = None,
) -> ProcessSpec:
    """Decide how ``command`` runs in a sandbox whose commands run as ``user`` in ``cwd``.

    ``identity`` is the sandbox user's real uid and gid (and their names at create) where the
    backend knows them; a per-command user is compared with them as numbers
    (`_ids.narrow_user`).

    Raises:
        NetworkAccessDenied: The command asks for network in an isolated sandbox.
        SecurityViolation: It asks for ``restrict_paths``, or, where the sandbox user is not
            root, for a user or group other than the sandbox's own or nobody.
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
    run_as = user
    if command.user and user and not is_root(user) and not (identity and identity.uid == 0):
        run_as, why = narrow_user(command.user, own_user=user, own=identity)
        if why:
            asked = f"user={command.user!r} for {list(argv)}"
            raise audit.refused("security.run_as_user", asked, SecurityViolation(
                f"Command.user={command.user!r} would run with ids the sandbox user "
                f"{user!r} does not have: {why}",
                details="per-command users may only narrow the sandbox's; leave Command.user "
                        "empty, use allow_write=False (nobody), or set security.run_as_user "
                        "for the whole sandbox"))
    elif command.user:
        run_as = with_group(command.user)
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


def plan_argv(argv: object, *, config: SandboxConfig, user: str, cwd: str,
              env: Mapping[str, str]) -> ProcessSpec | None:
    """`plan_process` of ``Command.argv(argv)`` without building the `Command`, for the
    usual call, a plain list or tuple of strings; None for anything else (the caller takes
    the full path, whose checks and messages then apply).

    Such a command has every setting at its default, so no refusal can apply and the plan is
    the sandbox's: its user, directory, environment and timeout. What `Command` would check
    is checked here (a non-empty executable, str items, no NUL); building and validating the
    `Command` cost more than the rest of the plan.
    """
    if type(argv) is not list and type(argv) is not tuple:
        return None
    if not argv or not argv[0]:
        return None
    for item in argv:
        if type(item) is not str or "\0" in item:
            return None
    return plain_spec(tuple(argv), dict(env), cwd, user, DEFAULT_MAX_OUTPUT_BYTES,
                      seconds(config.timeout))


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
