"""Audit records for what a sandbox was asked to do, what it refused and which limits it hit.

`SecurityPolicy` decides what is written, to the ``sandbox.audit`` logger at INFO:

==========================  ===================================================================
``enable_audit_log``        every event below
``log_security_events``     only ``refused``, ``limit`` and ``opt_in`` events
==========================  ===================================================================

Each event is one log record. Its message is one line (``audit event=command argv=[...]
...``, values JSON-encoded, so a newline in an argument cannot forge a second record) and the
same fields are a dict in the record's ``audit`` attribute, for handlers that ship structure::

    class Handler(logging.Handler):
        def emit(self, record):
            send(record.audit)

Events and their fields (every record also has ``event`` and ``sandbox_id``):

* ``command``: ``argv``, ``user``, ``cwd``, ``env_keys``, ``exit_code``, ``signal``,
  ``duration`` (seconds), ``timed_out``, ``oom_killed``, ``truncated``, ``error``.
* ``file``: ``op`` (``write``, ``read``, ``list``, ``copy_in``, ``copy_out``), ``path`` (in
  the sandbox), ``bytes`` (when known), ``ok``, ``error``; copies add the host side as
  ``source`` or ``dest``.
* ``refused``: ``rule`` (the setting that refused), ``asked`` (what was requested),
  ``error`` (the exception raised).
* ``limit``: ``limit`` (``timeout``, ``memory``, ``cpu_time``, ``wall_time``, ``output``),
  ``detail``.
* ``live_mount``: ``found`` (``setid_stripped``: a setuid/setgid bit set during the
  sandbox's life in a live ``local_path`` mount, removed at cleanup; ``symlink_outside``: a
  link made there that points outside the directory; ``incomplete``: the scan ran out of
  time), ``path`` (on the host), ``detail`` (the old mode, or the link's target). Also logged
  at WARNING on ``sandbox.security`` whatever the policy says.
* ``resources``: ``limits`` (per defaulted limit, what holds it: a cgroup, an rlimit, or
  nothing where ``resources.allow_unbounded`` accepts that), once at create; a security
  event. The process backend writes it (its enforcement depends on the host).
* ``opt_in``: ``setting`` (``security.run_as_user``, ``security.run_as_group``,
  ``security.add_capabilities``, ``resources.allow_unbounded``), ``granted`` (root, the
  capabilities added, or the limit left unenforced). Also logged at WARNING on
  ``sandbox.security`` whatever the policy says.

Environment values are never logged, only their names: they are where secrets live.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ._models import CommandResult, SecurityPolicy

__all__ = ["Auditor"]

log = logging.getLogger("sandbox.audit")
security_log = logging.getLogger("sandbox.security")

E = TypeVar("E", bound=BaseException)


def _line(record: Mapping[str, Any]) -> str:
    return " ".join(f"{key}={json.dumps(value, default=str)}" for key, value in record.items())


class Auditor:
    """Write the audit records of one sandbox, as its security policy asks.

    Args:
        sandbox_id: The sandbox's id, put in every record.
        policy: ``enable_audit_log`` turns on every event, ``log_security_events`` the
            refusals and limit hits.
    """

    def __init__(self, sandbox_id: str, policy: SecurityPolicy) -> None:
        self.sandbox_id = sandbox_id
        self.activity = policy.enable_audit_log
        self.security = policy.enable_audit_log or policy.log_security_events

    def _emit(self, event: str, fields: Mapping[str, Any]) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        record = {"event": event, "sandbox_id": self.sandbox_id, **fields}
        log.info("audit %s", _line(record), extra={"audit": record})

    def command(
        self, argv: Sequence[str], *, user: str, cwd: str, env: Mapping[str, str],
        result: CommandResult | None = None, error: BaseException | None = None,
    ) -> None:
        """Record a command that ran (`result`) or could not run (`error`), and its limits."""
        if self.activity:
            fields: dict[str, Any] = {
                "argv": list(argv), "user": user, "cwd": cwd, "env_keys": sorted(env),
            }
            if result is not None:
                fields.update(
                    exit_code=result.exit_code, signal=result.signal,
                    duration=round(result.duration.total_seconds(), 3),
                    timed_out=result.timed_out, oom_killed=result.oom_killed,
                    truncated=result.truncated, error=result.error,
                )
            else:
                fields.update(exit_code=None, error=_describe(error))
            self._emit("command", fields)
        if result is None:
            return
        if result.timed_out:
            self.limit("timeout", result.error, argv=argv)
        if result.oom_killed:
            self.limit("memory", result.error, argv=argv)
        if result.signal == "SIGXCPU":
            self.limit("cpu_time", result.error or "killed by SIGXCPU", argv=argv)
        if result.truncated:
            self.limit("output", "output truncated at max_output_bytes", argv=argv)

    @contextlib.contextmanager
    def file_op(self, op: str, path: str, size: int | None = None) -> Iterator[dict[str, Any]]:
        """Record a file operation when the block ends; set ``["bytes"]`` inside if known."""
        fields: dict[str, Any] = {"op": op, "path": path, "bytes": size}
        try:
            yield fields
        except BaseException as exc:
            fields.update(ok=False, error=_describe(exc))
            if self.activity:
                self._emit("file", fields)
            raise
        fields.update(ok=True, error="")
        if self.activity:
            self._emit("file", fields)

    def refused(self, rule: str, asked: str, exc: E) -> E:
        """Record a refused request and return `exc` for the caller to raise."""
        if self.security:
            self._emit("refused", {"rule": rule, "asked": asked, "error": _describe(exc)})
        return exc

    def opt_in(self, setting: str, granted: str) -> None:
        """Record a privilege the config asked for explicitly: root, or added capabilities."""
        security_log.warning("sandbox %s runs with %s, as %s asks", self.sandbox_id, granted,
                             setting)
        if self.security:
            self._emit("opt_in", {"setting": setting, "granted": granted})

    def live_mount(self, found: str, path: str, detail: str) -> None:
        """Record what the cleanup of a live mount found there (see `_live_mount`)."""
        security_log.warning("sandbox %s left %s in its live mount: %s (%s)", self.sandbox_id,
                             found, path, detail)
        if self.security:
            self._emit("live_mount", {"found": found, "path": path, "detail": detail})

    def resources(self, limits: Mapping[str, str]) -> None:
        """Record what holds each default limit of this sandbox."""
        if self.security:
            self._emit("resources", {"limits": dict(limits)})

    def egress(self, decision: str, fields: Mapping[str, Any]) -> None:
        """Record one egress proxy decision: a refusal as a security event, the rest as
        activity."""
        if self.security if decision == "refused" else self.activity:
            self._emit("egress", {"decision": decision, **fields})

    def limit(self, limit: str, detail: str, *, argv: Sequence[str] | None = None) -> None:
        """Record a limit that stopped a command or the sandbox."""
        if self.security:
            fields: dict[str, Any] = {"limit": limit, "detail": detail}
            if argv is not None:
                fields["argv"] = list(argv)
            self._emit("limit", fields)


def _describe(exc: BaseException | None) -> str:
    return "" if exc is None else f"{type(exc).__name__}: {exc}"
