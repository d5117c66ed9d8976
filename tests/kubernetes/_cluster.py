"""Where the Kubernetes tests run: the real local cluster by default, the in-process fake API
server where asked for (or when no cluster is up), or any cluster given with ``--kubeconfig``.

The local cluster is the single-node Kubernetes 1.20 that ``make kube`` (scripts/kube.sh) starts;
its kubeconfig is ``$KUBE_CACHE/run/kubeconfig`` (default /var/cache/sandbox-sdk/kube) and
exists only while it runs. Its Pods use the SDK's images imported as ``NAME:local`` with
``imagePullPolicy: Never``: nothing is ever pulled. ``--kubeconfig=fake`` forces the fake.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from sandbox import SandboxConfig
from sandbox.kubernetes import KubernetesBackend
from sandbox.kubernetes._gateway import Cluster, KubeNotFound
from tests.kubernetes._fake_apiserver import FakeApiServer

KUBE_CACHE = Path(os.environ.get("KUBE_CACHE", "/var/cache/sandbox-sdk/kube"))
LOCAL_KUBECONFIG = KUBE_CACHE / "run" / "kubeconfig"
LOCAL_NAMESPACE = "sandboxes"
LOCAL_IMAGE = "sandbox-busybox:local"
"""The SDK's busybox image as scripts/kube.sh imports it (a non-latest tag: never pulled)."""
LOCAL_PYTHON_IMAGE = "sandbox-python:local"


def local_kubeconfig() -> Path | None:
    """The local cluster's kubeconfig while it runs (scripts/kube.sh removes it at stop)."""
    return LOCAL_KUBECONFIG if LOCAL_KUBECONFIG.is_file() else None


@attrs.frozen
class Target:
    """A cluster to test on; ``fake`` is None for a real one."""

    kubeconfig: str
    namespace: str
    image: str
    fake: FakeApiServer | None
    pull_policy: str = ""
    """The SandboxConfig pull_policy of every sandbox: "never" on the local cluster."""

    @property
    def local(self) -> bool:
        """The local cluster of scripts/kube.sh (images only from its own import)."""
        return self.fake is None and self.pull_policy == "never"

    def config(self, **fields: Any) -> SandboxConfig:
        fields.setdefault("image", self.image)
        if self.pull_policy:
            fields.setdefault("pull_policy", self.pull_policy)
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


def real_target(config: pytest.Config) -> Target | None:
    """The real cluster the tests run on, or None for the fake: ``--kubeconfig`` when given
    (``fake`` means the fake), else the local cluster while it runs."""
    given = config.getoption("kubeconfig")
    if given == "fake":
        return None
    if given:
        return Target(given, config.getoption("kube_namespace"), config.getoption("kube_image"),
                      None)
    local = local_kubeconfig()
    if local is None:
        return None
    return Target(str(local), LOCAL_NAMESPACE, LOCAL_IMAGE, None, pull_policy="never")


@contextlib.asynccontextmanager
async def cluster(tmp: Path, config: pytest.Config, *, fake_only: bool = False,
                  **fake: Any) -> AsyncIterator[Target]:
    """The real cluster (see real_target), or the fake API server (with ``fake`` options) when
    there is none or the test needs what only the fake can do (``fake_only``)."""
    real = None if fake_only else real_target(config)
    if real is not None:
        yield real
        return
    server = FakeApiServer(tmp / "fake-cluster", **fake)
    await server.start()
    try:
        yield Target(str(server.kubeconfig(tmp / "kubeconfig")), "sandboxes",
                     "sandbox-busybox:latest", server)
    finally:
        await server.stop()
