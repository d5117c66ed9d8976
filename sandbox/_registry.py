"""Which backend serves which ``SandboxConfig.type``: one typed table, imported lazily.

A new backend adds a loader here (and nothing to `Sandbox`); its class is built as
``cls(config, on_sample=...)`` (`BackendFactory`), so its own options stay on its
constructor. Each loader returns the class as a `BackendFactory`, so ``mypy --strict``
checks that every registered class has every member of `Backend` and that constructor.
Importing is lazy so that ``import sandbox`` loads no engine client; this is the one core
module that names the backends.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeAlias

from ._backend import Backend, BackendFactory
from ._errors import SandboxInitFailed
from ._models import ResourceUsage, SandboxConfig
from ._owner import HostCollector

__all__ = ["BACKENDS", "CheckpointStore", "EngineClient", "backend_class", "backend_for",
           "check_type", "checkpoint_store", "host_collectors"]


def _docker() -> BackendFactory:
    from .docker import DockerBackend

    return DockerBackend


def _kubernetes() -> BackendFactory:
    from .kubernetes import KubernetesBackend

    return KubernetesBackend


def _process() -> BackendFactory:
    from .process import ProcessBackend

    return ProcessBackend


#: A client of the engine a host-wide operation talks to (``aiodocker.Docker`` for the Docker
#: engine's gc and checkpoint store), given by the caller or opened by the backend.
EngineClient: TypeAlias = Any

#: ``config.type`` -> a loader of the class of its backend.
BACKENDS: Mapping[str, Callable[[], BackendFactory]] = {
    "docker": _docker,
    "kubernetes": _kubernetes,
    "process": _process,
    # A VM-isolated OCI runtime the engine lists (kata, firecracker), else refused by name.
    "vm": _docker,
}


def check_type(kind: str) -> None:
    """Refuse a type no backend serves, naming the ones that exist."""
    if kind not in BACKENDS:
        raise SandboxInitFailed(f"unknown sandbox type {kind!r}",
                                details=f"available types: {', '.join(sorted(BACKENDS))}")


def backend_class(kind: str) -> BackendFactory:
    """The class (a `BackendFactory`) of the backend that serves ``kind``."""
    check_type(kind)
    return BACKENDS[kind]()


def backend_for(config: SandboxConfig, *,
                on_sample: Callable[[ResourceUsage], object] | None = None) -> Backend:
    """A new backend object for ``config.type``."""
    return backend_class(config.type)(config, on_sample=on_sample)


def host_collectors() -> list[HostCollector]:
    """Each backend's gc of what dead owners left on this host, in the order `sandbox.gc`
    runs them (a cluster's objects are `sandbox.kubernetes.gc`'s: they are not on this
    host)."""
    from .docker._gc import collect as docker_collect
    from .process._gc import collect as process_collect

    return [process_collect, docker_collect]


class CheckpointStore(Protocol):
    """Where checkpoints are kept as images (the Docker engine's image store)."""

    async def list_entries(self, docker: Any) -> list[Mapping[str, Any]]:
        """The image list entries labelled as checkpoints."""
        ...

    async def remove_entry(self, ref: str, docker: Any) -> None:
        """Remove one checkpoint image; `CheckpointFailed` if it is none or in use."""
        ...

    async def remove_if_same(self, image: str, image_id: str) -> None:
        """Remove ``image`` if it is still the image ``image_id``."""
        ...


def checkpoint_store() -> CheckpointStore:
    """The store checkpoints live in (loaded lazily: listing them needs an engine client)."""
    from .docker import _checkpoint

    return _checkpoint
