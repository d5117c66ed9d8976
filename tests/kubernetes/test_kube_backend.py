"""The Kubernetes backend's life on the fake API server: what it creates, files both ways,
usage, refusals before any request, cleanup and gc."""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from sandbox import Sandbox, SandboxStatus
from sandbox._errors import (
    LimitNotEnforceable,
    SandboxAlreadyExists,
    SandboxInitFailed,
    SandboxNotRunning,
    SandboxPermissionDenied,
    SecurityViolation,
)
from sandbox._models import ResourceLimits, ResourceUsage, SecurityPolicy
from sandbox.kubernetes import KubernetesBackend, gc
from sandbox.kubernetes._gateway import Cluster, KubeApiError, KubeNotFound
from tests.kubernetes._cluster import Target

pytestmark = pytest.mark.asyncio


async def test_create_records_the_pod_and_policy_then_cleanup_removes_both(
        kube: Target) -> None:
    backend = kube.backend(kube.config(resources=ResourceLimits(memory_limit=256 << 20)))
    async with Sandbox(backend=backend) as sb:
        name = backend.pod_name
        pod = await kube.pod(name)
        assert pod is not None and pod["status"]["phase"] == "Running"
        c = pod["spec"]["containers"][0]
        assert c["securityContext"]["runAsUser"] == 1000
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
        assert c["resources"]["limits"]["memory"] == str(256 << 20)
        assert pod["spec"]["automountServiceAccountToken"] is False
        labels = pod["metadata"]["labels"]
        assert labels["io.sandbox.id"] == sb.id
        assert pod["metadata"]["annotations"]["io.sandbox.owner.pid"] == str(os.getpid())
        policy = await kube.policy(name)
        assert policy is not None
        assert policy["spec"]["podSelector"]["matchLabels"]["io.sandbox.id"] == sb.id
        # Deny-all both ways is both policy types with no rules: the API server drops empty
        # rule lists (omitempty), so an absent list and [] are the same policy.
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        assert spec.get("egress", []) == [] and spec.get("ingress", []) == []
        info = await sb.get_info()
        assert info.type == "kubernetes" and info.status is SandboxStatus.RUNNING
        assert info.ip_address and info.allocated_resources.memory_limit == 256 << 20
        # The commands really run as the Pod's user, in the working dir's emptyDir.
        result = await sb.execute_command("id -u; touch made && echo ok")
        assert result.stdout == "1000\nok\n"
        if kube.fake is not None:
            fake_pod = kube.fake.pods[(kube.namespace, name)]
    assert await kube.pod(name) is None and await kube.policy(name) is None
    assert sb.status is SandboxStatus.DESTROYED
    if kube.fake is not None:
        assert fake_pod.processes() == []  # deleting the Pod killed everything in it


async def test_files_both_ways(kube: Target, tmp_path: Path) -> None:
    tree = tmp_path / "src"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "a.txt").write_text("alpha")
    (tree / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (tree / "run.sh").chmod(0o755)
    async with Sandbox(backend=kube.backend()) as sb:
        await sb.copy_files(str(tree), "sandbox:/workspace/in")
        assert await sb.read_file("in/sub/a.txt") == b"alpha"
        assert (await sb.execute_command("./in/run.sh")).stdout == "ran\n"
        await sb.write_file("out/deep/b.bin", bytes(range(256)) * 1000, mode=0o600)
        listing = {i.name: i for i in await sb.list_files("out/deep")}
        assert listing["b.bin"].size == 256_000 and listing["b.bin"].mode == 0o600
        await sb.copy_files("sandbox:/workspace/out", str(tmp_path / "back"))
        assert (tmp_path / "back" / "deep" / "b.bin").read_bytes() == bytes(range(256)) * 1000


async def test_read_only_root_keeps_workdir_and_tmp_writable(kube: Target) -> None:
    config = kube.config(security=SecurityPolicy(read_only_root=True,
                                                 tmpfs_paths=("/cache",)))
    async with Sandbox(backend=kube.backend(config)) as sb:
        with pytest.raises(SandboxPermissionDenied):
            await sb.write_file("/etc-new", "x")
        for path in ("/workspace/a", "/tmp/b", "/cache/c"):
            await sb.write_file(path, "ok")


@pytest.mark.parametrize("sized", [True, False], ids=["sized-node", "1.20-node"])
async def test_a_tmpfs_size_is_enforced_or_refused(kube: Target, sized: bool) -> None:
    """A tmpfs size is the mount's size, or the sandbox is refused: a 1.20 kubelet mounts a
    memory emptyDir unsized whatever its sizeLimit (the fake plays both kinds of node; a real
    cluster is the one it is)."""
    if kube.fake is not None:
        kube.fake.sized_memory_volumes = sized
    elif not sized:
        pytest.skip("a real cluster is one kind of node: the other case covers it")
    config = kube.config(security=SecurityPolicy(tmpfs_paths=("/cache:size=1m",)))
    backend = kube.backend(config)
    try:
        sb = await Sandbox(backend=backend).__aenter__()
    except LimitNotEnforceable as exc:
        assert kube.fake is None or not sized
        assert "'/cache'" in exc.message and "not enforced" in exc.message
        assert await kube.pod(backend.pod_name) is None
        return
    try:
        assert kube.fake is None or sized
        result = await sb.execute_command("head -c 2000000 /dev/zero > /cache/big")
        assert result.exit_code != 0  # the emptyDir's sizeLimit, as the tmpfs size
    finally:
        await sb.__aexit__(None, None, None)


async def test_usage_from_the_metrics_api_or_the_node(kube: Target) -> None:
    """Usage from the metrics API, or without metrics-server (this local cluster) from the
    node's summary API; with neither, a typed error, never a sample of zeros."""
    samples: list[ResourceUsage] = []
    async with Sandbox(backend=kube.backend(on_sample=samples.append)) as sb:
        with anyio.fail_after(60):
            while True:  # a real kubelet lists a new container's stats after a few seconds
                try:
                    usage = await sb.get_resource_usage()
                    break
                except KubeApiError as exc:
                    assert kube.fake is None and "does not list" in exc.message
                    await anyio.sleep(1)
        assert usage.timestamp is not None and usage.memory_usage > 0
        assert sb.usage_history()[-1] == usage and samples[-1] == usage
        if kube.fake is not None:
            kube.fake.metrics = False  # a cluster without metrics-server
            bare = await sb.get_resource_usage()
            assert bare.memory_usage > 0 and bare.uptime > timedelta(0)
            assert bare.cpu_time == timedelta(microseconds=123456.789)
            kube.fake.node_stats = False  # and no nodes/proxy for this user
            with pytest.raises(KubeApiError, match="no metrics API"):
                await sb.get_resource_usage()


async def test_refusals_come_before_any_request(kube: Target) -> None:
    for config, error in (
            (kube.config(resources=ResourceLimits(process_limit=64)), SandboxInitFailed),
            (kube.config(security=SecurityPolicy(add_capabilities=("SYS_ADMIN",))),
             SecurityViolation)):
        before = len(kube.fake.requests) if kube.fake else 0
        with pytest.raises(error):
            await Sandbox(backend=kube.backend(config)).initialize()
        if kube.fake is not None:
            assert kube.fake.requests[before:] == []


async def test_a_pod_that_cannot_pull_fails_fast_and_is_removed(kube: Target) -> None:
    image = "sandbox-no-such-image:local"
    if kube.fake is not None:
        kube.fake.missing_images.add(image)
    # On a real node: an absent image with pull policy never (ErrImageNeverPull); no pull.
    backend = kube.backend(kube.config(image=image, pull_policy="never"))
    with anyio.fail_after(60), pytest.raises(SandboxInitFailed,
                                             match=r"ErrImage(Never)?Pull"):
        await Sandbox(backend=backend).initialize()
    assert await kube.pod(backend.pod_name) is None
    assert await kube.policy(backend.pod_name) is None


async def test_cancelled_create_leaves_nothing(kube: Target) -> None:
    if kube.fake is not None:
        kube.fake.start_delay = 2.0
    backend = kube.backend()
    task = asyncio.ensure_future(Sandbox(backend=backend).initialize())
    with anyio.fail_after(20):
        while await kube.pod(backend.pod_name) is None:  # noqa: ASYNC110 (polls the server)
            await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await kube.pod(backend.pod_name) is None
    assert await kube.policy(backend.pod_name) is None


async def test_type_kubernetes_selects_the_backend(kube: Target,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", kube.kubeconfig)
    async with Sandbox(kube.config()) as sb:
        assert isinstance(sb.backend, KubernetesBackend)
        assert sb.backend.namespace == "default"
        assert (await sb.execute_command("echo hi")).stdout == "hi\n"


async def test_gc_removes_what_a_dead_owner_left(kube: Target) -> None:
    ns = kube.namespace
    labels = {"io.sandbox.managed-by": "sandbox-sdk", "io.sandbox.id": "orphan"}
    dead = {"io.sandbox.owner.host": os.uname().nodename, "io.sandbox.owner.pid": "999999999"}
    cluster = await Cluster.connect(kubeconfig=kube.kubeconfig, context=None, in_cluster=False)
    try:
        await cluster.call("make an orphan", "POST", f"/api/v1/namespaces/{ns}/pods", body={
            "metadata": {"name": "orphan", "labels": labels, "annotations": dead},
            "spec": {"containers": [{"name": "sandbox", "image": kube.image,
                                     "command": ["sleep", "600"]}]}})
        await cluster.call("make an orphan policy", "POST",
                           f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
                           body={"metadata": {"name": "orphan", "labels": labels,
                                              "annotations": dead},
                                 "spec": {"podSelector": {"matchLabels": labels}}})
    finally:
        await cluster.close()
    async with Sandbox(backend=kube.backend()) as live:
        dry = await gc(namespace=ns, kubeconfig=kube.kubeconfig, dry_run=True)
        assert [i.name for i in dry.removed] == ["orphan", "orphan"]
        assert await kube.pod("orphan") is not None
        report = await gc(namespace=ns, kubeconfig=kube.kubeconfig)
        assert {(i.kind, i.name) for i in report.removed} == {("container", "orphan"),
                                                              ("network", "orphan")}
        kept = {i.name: i.reason for i in report.kept}
        assert "is alive" in kept[live.backend.pod_name]
        assert await kube.pod("orphan") is None and await kube.policy("orphan") is None
        assert (await live.execute_command("true")).success


async def test_wall_time_limit_ends_the_pod_and_says_so(kube: Target) -> None:
    """A 1 s limit may end the Pod before it runs (a real node counts pull and start in it):
    then creation fails naming the limit; else the next command does. Never a start failure
    of the command."""
    if kube.fake is not None:
        kube.fake.status_lag = 1.0  # the node stops the container before the phase says so
    config = kube.config(resources=ResourceLimits(wall_time_limit=timedelta(seconds=1)))
    sb = Sandbox(backend=kube.backend(config))
    try:
        await sb.initialize()
    except SandboxInitFailed as exc:
        assert kube.fake is None  # the fake's Pod runs in well under 1 s
        assert "wall_time_limit of 1 s" in str(exc)
        assert await kube.pod(sb.backend.pod_name) is None
        return
    try:
        pod = await kube.pod(sb.backend.pod_name)
        assert pod is not None and pod["spec"]["activeDeadlineSeconds"] == 1
        with anyio.fail_after(60):
            while True:  # the kubelet ends the Pod; the next command says why
                try:
                    await sb.execute_command("true")
                except SandboxNotRunning as exc:
                    error = exc
                    break
                await anyio.sleep(0.2)
        assert "wall_time_limit of 1 s" in str(error)
        assert sb.status is SandboxStatus.FAILED
        assert "wall_time_limit" in (await sb.get_info()).status_reason
    finally:
        await sb.cleanup()


async def test_a_name_taken_by_someone_else_is_refused_and_left_alone(kube: Target) -> None:
    ns, name = kube.namespace, "sandbox-taken-name"
    cluster = await Cluster.connect(kubeconfig=kube.kubeconfig, context=None, in_cluster=False)
    try:
        await cluster.call("make someone else's Pod", "POST", f"/api/v1/namespaces/{ns}/pods",
                           body={"metadata": {"name": name, "labels": {"app": "theirs"}},
                                 "spec": {"containers": [{"name": "c", "image": kube.image,
                                                          "command": ["sleep", "600"]}]}})
        backend = kube.backend(kube.config(name=name))
        with pytest.raises(SandboxAlreadyExists, match="already exists"):
            await Sandbox(backend=backend).initialize()
        theirs = await kube.pod(name)
        assert theirs is not None and theirs["metadata"]["labels"] == {"app": "theirs"}
        assert await kube.policy(name) is None  # ours was made first, and removed
    finally:
        with contextlib.suppress(KubeNotFound):
            await cluster.call("remove their Pod", "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
        await cluster.close()


async def test_the_start_is_watched_not_polled(fake_kube: Target) -> None:
    """Fake only: it counts the requests the server received."""
    kube = fake_kube
    assert kube.fake is not None
    kube.fake.start_delay = 0.6  # polling would GET the Pod several times meanwhile
    async with Sandbox(backend=kube.backend()) as sb:
        path = f"/api/v1/namespaces/{kube.namespace}/pods/{sb.backend.pod_name}"
        assert kube.fake.requests.count(("GET", path)) == 0
        assert kube.fake.watches == 1


async def test_a_pod_that_does_not_start_in_time_is_removed(fake_kube: Target) -> None:
    """Fake only: fault injection (a node that takes 30 s to start the Pod)."""
    kube = fake_kube
    assert kube.fake is not None
    kube.fake.start_delay = 30.0
    backend = kube.backend(start_timeout=0.5)
    with anyio.fail_after(20), pytest.raises(SandboxInitFailed, match="did not run within"):
        await Sandbox(backend=backend).initialize()
    assert kube.fake.pods == {} and kube.fake.policies == {}
