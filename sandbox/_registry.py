"""Which backend serves which ``SandboxConfig.type``: one table, imported lazily.

A new backend adds a line here (and nothing to `Sandbox`); its class is built as
``cls(config, on_sample=...)``, so its own options stay on its constructor. Importing is
lazy so that ``import sandbox`` loads no engine client.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from ._errors import SandboxInitFailed
from ._models import ResourceUsage, SandboxConfig

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["BACKENDS", "backend_for", "check_type"]

#: ``config.type`` -> "module:class" of its backend.
BACKENDS: dict[str, str] = {
    "docker": "sandbox.docker:DockerBackend",
    "kubernetes": "sandbox.kubernetes:KubernetesBackend",
    "process": "sandbox.process:ProcessBackend",
    # A VM-isolated OCI runtime the engine lists (kata, firecracker), else refused by name.
    "vm": "sandbox.docker:DockerBackend",
}


def check_type(kind: str) -> None:
    """Refuse a type no backend serves, naming the ones that exist."""
    if kind not in BACKENDS:
        raise SandboxInitFailed(f"unknown sandbox type {kind!r}",
                                details=f"available types: {', '.join(sorted(BACKENDS))}")


def backend_for(config: SandboxConfig, *,
                on_sample: Callable[[ResourceUsage], object] | None = None) -> Backend:
    """A new backend object for ``config.type``."""
    check_type(config.type)
    module, _, name = BACKENDS[config.type].partition(":")
    cls = getattr(importlib.import_module(module), name)
    backend: Backend = cls(config, on_sample=on_sample)
    return backend
