"""``sandbox.gc()`` on Kubernetes: a killed owner's Pod and NetworkPolicy are collected, a live
owner's are spared, in a namespace gc learns only from the dead owner's record of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

import sandbox
from sandbox import Sandbox, to_json
from sandbox.kubernetes import gc as kube_gc
from tests.kubernetes._cluster import Target

pytestmark = pytest.mark.asyncio

ROOT = Path(__file__).resolve().parents[2]

#: Opens a Kubernetes sandbox from argv (kubeconfig, namespace, config JSON), prints its Pod's
#: name and waits to be killed.
CHILD = """
import asyncio, sys
from sandbox import Sandbox, SandboxConfig, from_json
from sandbox.kubernetes import KubernetesBackend

async def main():
    config = from_json(sys.argv[3], SandboxConfig)
    backend = KubernetesBackend(config, kubeconfig=sys.argv[1], namespace=sys.argv[2])
    async with Sandbox(backend=backend):
        print(backend.pod_name, flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def killed_owner(kube: Target) -> tuple[str, int]:
    """A child process that made a sandbox on ``kube`` and was SIGKILLed: (its Pod, its pid)."""
    proc = await anyio.to_thread.run_sync(lambda: subprocess.Popen(
        [sys.executable, "-c", CHILD, kube.kubeconfig, kube.namespace, to_json(kube.config())],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = await anyio.to_thread.run_sync(proc.stdout.readline)
        if not line:
            await anyio.to_thread.run_sync(proc.wait, 30)
            raise AssertionError(f"the child failed: {proc.stderr.read()}")
    finally:
        proc.kill()  # SIGKILL: no cleanup runs
        await anyio.to_thread.run_sync(proc.communicate)
    return line.strip(), proc.pid


async def run_cli(*args: str) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(120):
        return await anyio.run_process([sys.executable, "-m", "sandbox", *args], cwd=ROOT,
                                       check=False)


async def test_gc_collects_a_killed_owners_pod_and_spares_a_live_ones(kube: Target) -> None:
    orphan, pid = await killed_owner(kube)
    try:
        assert await kube.pod(orphan) is not None and await kube.policy(orphan) is not None
        async with Sandbox(backend=kube.backend()) as live:
            mine = live.backend.pod_name
            dry = await sandbox.gc(dry_run=True)
            would = {(i.kind, i.name): i.reason for i in dry.removed}
            assert f"pid {pid}) has exited" in would[("container", orphan)]
            assert ("network", orphan) in would
            kept = {(i.kind, i.name): i.reason for i in dry.kept}
            assert "(this process) is alive" in kept[("container", mine)]
            assert await kube.pod(orphan) is not None  # a dry run removes nothing

            # The command line sees the same, from another process.
            out = await run_cli("gc", "--dry-run")
            assert out.returncode == 0, out.stderr.decode()
            assert f"would remove container {orphan}: its owner (pid {pid}) has exited" \
                in out.stdout.decode()

            report = await sandbox.gc()
            assert {("container", orphan), ("network", orphan)} <= \
                {(i.kind, i.name) for i in report.removed}
            assert not [i for i in report.removed if i.name == mine]
            assert not report.failed
            assert await kube.pod(orphan) is None and await kube.policy(orphan) is None
            pod = await kube.pod(mine)
            assert pod is not None and (pod.get("metadata") or {}).get("deletionTimestamp") \
                is None
            assert (await live.execute_command("echo still")).stdout == "still\n"
    finally:
        await kube_gc(namespace=kube.namespace, kubeconfig=kube.kubeconfig)
