"""The Docker backend: one container per sandbox, driven through the Engine API.

Example:
    async with aiodocker.Docker(url="unix:///run/docker.sock") as client:
        config = SandboxConfig(image="sandbox-busybox:latest")
        async with Sandbox(backend=DockerBackend(config, docker=client)) as sb:
            await sb.execute_command("echo hi")

``Sandbox(config)`` (and its ``docker=`` keyword, kept as a convenience) builds one for you.
"""

from .._backend import BackendFactory
from ._sandbox import DockerBackend

__all__ = ["DockerBackend"]

#: What `sandbox._registry` builds this backend with; declared as a `BackendFactory` so that
#: ``mypy --strict`` checks the class has every member of `Backend` and that constructor.
FACTORY: BackendFactory = DockerBackend
