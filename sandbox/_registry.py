"""Which backend serves which ``SandboxConfig.type``: one typed table, imported lazily.

A new backend adds a line here (and nothing to `Sandbox`); its class is built as
``cls(config, on_sample=...)`` (`BackendFactory`), so its own options stay on its
constructor. Importing is lazy, by module name, so that ``import sandbox`` loads no engine
client and no core module imports a backend: the backends import the core, never the other
way (``tests/unit/test_layout.py`` checks both, and that every entry satisfies `Backend`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

from ._backend import Backend, BackendFactory, CheckpointStore, ImageStore
from ._errors import SandboxInitFailed
from ._models import ResourceUsage, SandboxConfig
from ._owner import HostCollector
from ._places import any_recorded
from ._ps_rows import PlaceLister

__all__ = [
    "BACKENDS",
    "CHECKPOINT_STORE",
    "HOST_COLLECTORS",
    "IMAGE_STORE",
    "PLACE_COLLECTORS",
    "PLACE_LISTERS",
    "EngineClient",
    "backend_class",
    "backend_for",
    "check_type",
    "checkpoint_store",
    "gc_collectors",
    "host_collectors",
    "image_store",
    "place_listers",
]


#: A client of the engine a host-wide operation talks to (``aiodocker.Docker`` for the Docker
#: engine's gc and checkpoint store), given by the caller or opened by the backend.
EngineClient: TypeAlias = Any

#: ``config.type`` -> the module whose ``FACTORY`` builds its backend. Each backend declares
#: ``FACTORY: BackendFactory = TheClass`` in its package, where ``mypy --strict`` checks that the
#: class has every member of `Backend` and the constructor above.
BACKENDS: Mapping[str, str] = {
    "docker": "sandbox.docker",
    "kubernetes": "sandbox.kubernetes",
    "process": "sandbox.process",
    # A VM-isolated OCI runtime the engine lists (kata, firecracker), else refused by name.
    "vm": "sandbox.docker",
}
#: The modules whose ``COLLECTOR`` (a `HostCollector`) `sandbox.gc` runs, in order: what dead
#: owners left on this host.
HOST_COLLECTORS = ("sandbox.process._gc", "sandbox.docker._gc", "sandbox._session_fifo")
#: Backend -> the module whose ``COLLECTOR`` (a `HostCollector`) collects what dead owners of
#: this host left off it (a cluster's Pods), in the places its sandboxes recorded
#: (`sandbox._places`). `sandbox.gc` runs one, after the host's, only when a place of that
#: backend is recorded: gc never imports a client library no sandbox here used.
PLACE_COLLECTORS: Mapping[str, str] = {"kubernetes": "sandbox.kubernetes._gc"}
#: Backend -> the module whose ``LISTER`` (a `PlaceLister`) ``sandbox ps`` runs in the places
#: its sandboxes recorded, like `PLACE_COLLECTORS` (loaded only when a place is recorded).
PLACE_LISTERS: Mapping[str, str] = {"kubernetes": "sandbox.kubernetes._ps"}
#: The module whose ``STORE`` (a `CheckpointStore`) keeps checkpoint images.
CHECKPOINT_STORE = "sandbox.docker._checkpoint"
#: The module whose ``IMAGES`` (an `ImageStore`) the process backend exports root filesystems
#: from, so that it never imports the Docker backend.
IMAGE_STORE = "sandbox.docker._images"


def check_type(kind: str) -> None:
    """Refuse a type no backend serves, naming the ones that exist."""
    if kind not in BACKENDS:
        raise SandboxInitFailed(f"unknown sandbox type {kind!r}",
                                details=f"available types: {', '.join(sorted(BACKENDS))}")


def backend_class(kind: str) -> BackendFactory:
    """The class (a `BackendFactory`) of the backend that serves ``kind``."""
    check_type(kind)
    factory: BackendFactory = importlib.import_module(BACKENDS[kind]).FACTORY
    return factory


def backend_for(config: SandboxConfig, *,
                on_sample: Callable[[ResourceUsage], object] | None = None) -> Backend:
    """A new backend object for ``config.type``."""
    return backend_class(config.type)(config, on_sample=on_sample)


def host_collectors() -> list[HostCollector]:
    """Each backend's gc of what dead owners left on this host, in the order `sandbox.gc`
    runs them."""
    return [importlib.import_module(name).COLLECTOR for name in HOST_COLLECTORS]


def gc_collectors() -> list[HostCollector]:
    """Every gc `sandbox.gc` runs: this host's (`host_collectors`), then those of the
    backends that recorded places off this host. One whose extra is no longer installed is
    skipped with a warning (nothing could reach its places)."""
    found: list[HostCollector] = _of_recorded(PLACE_COLLECTORS, "COLLECTOR", "gc", "collected")
    return host_collectors() + found


def place_listers() -> list[PlaceLister]:
    """The ``ps`` of each backend that recorded places off this host (none loaded when no
    place is recorded); one whose extra is no longer installed is skipped with a warning."""
    found: list[PlaceLister] = _of_recorded(PLACE_LISTERS, "LISTER", "ps", "listed")
    return found


def _of_recorded(table: Mapping[str, str], name: str, tool: str, done: str) -> list[Any]:
    """``name`` of each module in ``table`` whose backend recorded a place, imported only
    then; an extra no longer installed is a warning on the ``sandbox.<tool>`` logger."""
    found: list[Any] = []
    for backend, module in table.items():
        if not any_recorded(backend):
            continue
        try:
            found.append(getattr(importlib.import_module(module), name))
        except ImportError as exc:
            logging.getLogger(f"sandbox.{tool}").warning(
                "%s: sandboxes of type %r recorded where they put resources, but that "
                "backend cannot be loaded, so they are not %s: %s", tool, backend, done, exc)
    return found


def checkpoint_store() -> CheckpointStore:
    """The store checkpoints live in (loaded lazily: listing them needs an engine client)."""
    store: CheckpointStore = importlib.import_module(CHECKPOINT_STORE).STORE
    return store


def image_store() -> ImageStore:
    """The local image store root filesystems are exported from (loaded lazily)."""
    store: ImageStore = importlib.import_module(IMAGE_STORE).IMAGES
    return store
