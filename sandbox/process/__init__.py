"""The process backend: ``SandboxConfig(type="process")``, a sandbox of Linux namespaces held
by bubblewrap, with no container engine (README, "Backends")."""

from .._backend import BackendFactory
from ._sandbox import ProcessBackend

__all__ = ["ProcessBackend"]

#: What `sandbox._registry` builds this backend with; declared as a `BackendFactory` so that
#: ``mypy --strict`` checks the class has every member of `Backend` and that constructor.
FACTORY: BackendFactory = ProcessBackend
