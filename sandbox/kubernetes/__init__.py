"""The Kubernetes backend: one Pod and one NetworkPolicy per sandbox, through the API server.

Example:
    config = SandboxConfig(type="kubernetes", image="python:3.12-slim")
    backend = KubernetesBackend(config, kubeconfig="~/.kube/config", namespace="agents",
                                runtime_classes={"runsc": "gvisor"})
    async with Sandbox(backend=backend) as sb:
        await sb.execute_command("echo hi")

``Sandbox(SandboxConfig(type="kubernetes"))`` builds one with the defaults: the kubeconfig in
KUBECONFIG (or ~/.kube/config), or the Pod's service account when running in a cluster, and
namespace "default". Needs the extra: ``pip install 'sandbox[kubernetes]'``.
"""

from .._backend import BackendFactory
from ._gc import gc
from ._sandbox import KubernetesBackend

__all__ = ["KubernetesBackend", "gc"]

#: What `sandbox._registry` builds this backend with; declared as a `BackendFactory` so that
#: ``mypy --strict`` checks the class has every member of `Backend` and that constructor.
FACTORY: BackendFactory = KubernetesBackend
