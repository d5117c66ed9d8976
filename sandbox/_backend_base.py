"""BackendBase: the set-up and state every backend shares, so each one writes only its engine.

The id, the name, the lifecycle a backend reports to, the audit, the working directory and
environment the set-up prepares, the user commands run as, and the head of ``create()`` (take
the `Sandbox`'s lifecycle, a replacing config or its environment) live here once; a backend
subclasses it and implements the rest of `Backend`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime

from ._audit import Auditor
from ._ids import Identity, identity_of
from ._lifecycle import Lifecycle
from ._models import SandboxConfig, as_config

__all__ = ["BackendBase"]


class BackendBase:
    """The state every backend keeps and the members of `Backend` that only read it."""

    def __init__(self, config: SandboxConfig | None = None, *, sandbox_id: str = "") -> None:
        self._config = as_config(config)
        self.id = sandbox_id or uuid.uuid4().hex[:12]
        self._name = self._config.name or f"sandbox-{self.id}"
        # Replaced by the one `Sandbox` owns at create; this one serves a backend used alone.
        self._life = Lifecycle()
        self._audit = Auditor(self.id, self._config.security)
        self._cwd = self._config.working_dir
        self._env: dict[str, str] = dict(self._config.environment)
        self._user = ""
        self._created_at: datetime | None = None

    @property
    def config(self) -> SandboxConfig:
        """The configuration the sandbox was (or will be) created from."""
        return self._config

    @property
    def user(self) -> str:
        """The user commands run as ("uid:gid" or a name); "" before create."""
        return self._user

    @property
    def identity(self) -> Identity | None:
        """The user's ids, where `user` names them as numbers."""
        return identity_of(self._user)

    @property
    def audit(self) -> Auditor:
        """Where this sandbox's audit events go."""
        return self._audit

    @property
    def working_dir(self) -> str:
        """The working directory the set-up prepared."""
        return self._cwd

    def environment(self) -> dict[str, str]:
        """The environment as the set-up left it."""
        return dict(self._env)

    def begin_create(self, lifecycle: Lifecycle, config: SandboxConfig | None,
                     environment: Mapping[str, str] | None) -> SandboxConfig:
        """The head of every ``create()``: report to ``lifecycle`` from now on; take a
        replacing ``config`` (its name, working directory, environment and audit) or else
        the `Sandbox`'s ``environment``. Returns the config to create from."""
        self._life = lifecycle
        if config is not None:
            self._config = config = as_config(config)
            self._name = config.name or self._name
            self._cwd = config.working_dir
            self._env = dict(config.environment)
            self._audit = Auditor(self.id, config.security)
        elif environment is not None:
            self._env = dict(environment)
        return self._config
