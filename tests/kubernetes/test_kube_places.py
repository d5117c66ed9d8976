"""The places Kubernetes sandboxes record (`sandbox._places`) on a cluster: ``sandbox ps``
lists their Pods with their owners, and gc drops a record once nothing of ours is left there,
never while a live owner's Pod is (or a live owner of this host may be about to make one)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import attrs
import pytest

import sandbox
from sandbox import Sandbox, SandboxError
from sandbox._places import any_recorded, places_dir, recorded, release
from sandbox.kubernetes import gc as kube_gc
from sandbox.kubernetes._gateway import Cluster, KubeNotFound
from tests.kubernetes._cluster import Target
from tests.kubernetes.test_kube_gc import killed_owner, run_cli

pytestmark = pytest.mark.asyncio


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's own records (its child processes inherit the setting)."""
    where = tmp_path / "places"
    monkeypatch.setenv("SANDBOX_PLACES", str(where))
    return where


@contextlib.asynccontextmanager
async def own_namespace(kube: Target) -> AsyncIterator[Target]:
    """``kube`` in a namespace of this test's own (other runs' Pods in the shared one would
    keep its record), deleted afterwards; the fake serves any namespace as it is."""
    name = f"sbx-places-{os.getpid()}-{secrets.token_hex(3)}"
    if kube.fake is not None:
        yield attrs.evolve(kube, namespace=name)
        return
    cluster = await Cluster.connect(kubeconfig=kube.kubeconfig, context=None, in_cluster=False)
    try:
        await cluster.call("create a test namespace", "POST", "/api/v1/namespaces", body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        with anyio.fail_after(120):  # Pods need its default ServiceAccount
            while True:
                try:
                    await cluster.call("look for the namespace's service account", "GET",
                                       f"/api/v1/namespaces/{name}/serviceaccounts/default")
                    break
                except KubeNotFound:
                    await anyio.sleep(0.2)
        yield attrs.evolve(kube, namespace=name)
    finally:
        with contextlib.suppress(SandboxError):
            await cluster.call("delete the test namespace", "DELETE",
                               f"/api/v1/namespaces/{name}")
        await cluster.close()


async def test_ps_lists_the_pods_of_the_recorded_places_with_their_owners(
        kube: Target, places: Path) -> None:
    async with own_namespace(kube) as target:
        ns = target.namespace
        orphan, pid = await killed_owner(target)
        try:
            async with Sandbox(backend=target.backend()) as live:
                mine = live.backend.pod_name
                # From another process, which only the records tell where to look.
                out = await run_cli("ps", "--json")
                assert out.returncode == 0, out.stderr.decode()
                rows = {r["name"]: r for r in json.loads(out.stdout)}
                row = rows[f"{ns}/{mine}"]
                assert (row["type"], row["state"], row["image"], row["owner"],
                        row["owner_pid"]) == \
                    ("kubernetes", "running", target.image, "alive", os.getpid())
                assert row["id"] == live.id and row["place"]["namespace"] == ns
                assert row["place"]["kubeconfig"] == target.kubeconfig
                dead = rows[f"{ns}/{orphan}"]
                assert (dead["owner"], dead["owner_pid"]) == ("gone", pid)

                out = await run_cli("ps", "--owner", str(os.getpid()))
                text = out.stdout.decode()
                assert re.search(rf"(?m)^{ns}/{mine}\s+{re.escape(target.image)}\s+running\s+"
                                 rf"\d+s\s+alive \(pid {os.getpid()}\)$", text), text
                assert orphan not in text
        finally:
            await kube_gc(namespace=ns, kubeconfig=target.kubeconfig)


async def test_a_place_record_is_dropped_once_empty_and_kept_while_a_live_pod_is_there(
        kube: Target, places: Path) -> None:
    async with own_namespace(kube) as target:
        ns = target.namespace
        # A killed owner's Pod: collected, and with it the last thing of ours there.
        orphan, _pid = await killed_owner(target)
        assert [p["namespace"] for p in recorded("kubernetes")] == [ns]
        report = await sandbox.gc()
        assert ("container", orphan) in {(i.kind, i.name) for i in report.removed}
        assert not any_recorded("kubernetes")

        async with Sandbox(backend=target.backend()) as live:
            (record,) = places_dir().iterdir()
            await sandbox.gc()
            assert record.exists()  # held by this process, and its Pod is there
            # Held or not (say another host's owner, or a remove that failed): its Pod keeps it.
            release(str(record))
            report = await sandbox.gc()
            assert live.backend.pod_name in {i.name for i in report.kept}
            assert record.exists()
            assert (await live.execute_command("echo still")).stdout == "still\n"
        # Closed: nothing of ours is left there.
        await sandbox.gc()
        assert not any_recorded("kubernetes")
