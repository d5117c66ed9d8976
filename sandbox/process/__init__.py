"""The process backend: ``SandboxConfig(type="process")``, a sandbox of Linux namespaces held
by bubblewrap, with no container engine (README, "Backends")."""

from ._sandbox import ProcessBackend

__all__ = ["ProcessBackend"]
