"""Where the Kubernetes tests run: the in-process fake API server, or a real cluster when
pytest is given ``--kubeconfig`` (see docs/kubernetes.md)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from sandbox import SandboxConfig
from sandbox.kubernetes import KubernetesBackend
from sandbox.kubernetes._gateway import Cluster, KubeNotFound
from tests.kubernetes._fake_apiserver import FakeApiServer


@attrs.frozen
class Target:
    """A cluster to test on; ``fake`` is None for a real one."""

    kubeconfig: str
    namespace: str
    image: str
    fake: FakeApiServer | None

    def config(self, **fields: Any) -> SandboxConfig:
        fields.setdefault("image", self.image)
        return SandboxConfig(type="kubernetes", **fields)

    def backend(self, config: SandboxConfig | None = None, **options: Any) -> KubernetesBackend:
        return KubernetesBackend(config or self.config(), kubeconfig=self.kubeconfig,
                                 namespace=self.namespace, **options)

    async def get(self, path: str) -> dict[str, Any] | None:
        """GET an object from the API server (None if absent), as a client would see it."""
        cluster = await Cluster.connect(kubeconfig=self.kubeconfig, context=None,
                                        in_cluster=False)
        try:
            return await cluster.call("test lookup", "GET", path)
        except KubeNotFound:
            return None
        finally:
            await cluster.close()

    async def pod(self, name: str) -> dict[str, Any] | None:
        return await self.get(f"/api/v1/namespaces/{self.namespace}/pods/{name}")

    async def policy(self, name: str) -> dict[str, Any] | None:
        return await self.get(
            f"/apis/networking.k8s.io/v1/namespaces/{self.namespace}/networkpolicies/{name}")


@contextlib.asynccontextmanager
async def cluster(tmp: Path, config: pytest.Config, **fake: Any) -> AsyncIterator[Target]:
    """The fake API server (with ``fake`` options), or the ``--kubeconfig`` cluster."""
    real = config.getoption("kubeconfig")
    if real:
        yield Target(real, config.getoption("kube_namespace"), config.getoption("kube_image"),
                     None)
        return
    server = FakeApiServer(tmp / "fake-cluster", **fake)
    await server.start()
    try:
        yield Target(str(server.kubeconfig(tmp / "kubeconfig")), "sandboxes",
                     "sandbox-busybox:latest", server)
    finally:
        await server.stop()
