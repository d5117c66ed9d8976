"""The backends the behaviour suite (`sandbox.testing.CHECKS`) runs on here, what each claims,
and how each is looked at from the host after cleanup."""

from __future__ import annotations

from pathlib import Path

import anyio

from sandbox import IMAGE_BUSYBOX, ResourceLimits, Sandbox, SandboxConfig, SandboxStatus
from sandbox._contract import CAPABILITIES, BackendUnderTest
from sandbox.process._state import base_dir
from sandbox.testing import FakeSandbox
from tests.conftest import docker_cli
from tests.kubernetes._cluster import Target, real_target

#: Where the kube-infra helper's real cluster announces itself (scripts/kube.sh).

#: Every backend of the suite, in the order the tests run.
NAMES = ("fake", "docker", "docker+gvisor", "process", "kubernetes-fake-api", "kubernetes")


def _host_processes(marker: str) -> list[str]:
    """Host processes whose argv holds ``marker`` (a sandbox's processes are host processes
    for runc, bubblewrap and containerd; gVisor keeps them inside its sentry)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in argv:
            found.append(f"pid {entry.name}: {b' '.join(argv).decode(errors='replace')}")
    return found


async def _docker_leftovers(sb: Sandbox, marker: str) -> list[str]:
    ids = await anyio.to_thread.run_sync(lambda: docker_cli(
        "ps", "-aq", "--filter", f"label=io.sandbox.id={sb.id}").split())
    return [f"container {i}" for i in ids] + _host_processes(marker)


async def _process_leftovers(sb: Sandbox, marker: str) -> list[str]:
    states = [f"state dir {p}" for p in base_dir().glob(f"*{sb.id}*")] \
        if base_dir().exists() else []
    return states + _host_processes(marker)


#: Seconds the kubelet gets to kill a deleted Pod's processes (it does so after the API server
#: answered the delete, within milliseconds on an idle node, seconds at a load of 30).
KUBELET_KILL_PATIENCE = 60.0


def _kube_leftovers(target: Target, *, host_visible: bool):
    async def probe(sb: Sandbox, marker: str) -> list[str]:
        pod = await target.pod(sb.backend.pod_name)
        found = [f"pod {sb.backend.pod_name}"] if pod is not None else []
        if not host_visible:
            return found
        processes = _host_processes(marker)
        if sb.status is SandboxStatus.DESTROYED and not found:
            # The Pod is gone from the API at once (grace period 0); its processes die when
            # the kubelet acts on that, asynchronously: wait for that (bounded), not a sleep.
            with anyio.move_on_after(KUBELET_KILL_PATIENCE):
                while processes:
                    await anyio.sleep(0.1)
                    processes = _host_processes(marker)
        return found + processes
    return probe


#: The real cluster the suite runs on (``--kubeconfig``, else the local one while it runs),
#: chosen as the Kubernetes tests choose it.
real_cluster = real_target


def subject(name: str, *, kube: Target | None = None) -> BackendUnderTest:
    """The `BackendUnderTest` for ``name`` (a Kubernetes one needs its ``kube`` target)."""
    busybox = SandboxConfig(image=IMAGE_BUSYBOX)
    if name == "fake":
        return BackendUnderTest(name=name, config=SandboxConfig(type="fake"),
                                make=FakeSandbox, supports=frozenset(), refusal_name="fake")
    if name == "docker":
        return BackendUnderTest(name=name, config=busybox, leftovers=_docker_leftovers)
    if name == "docker+gvisor":
        # A reset cannot look into gVisor from the host: its sandboxes are never reused.
        return BackendUnderTest(name=name, config=SandboxConfig(image=IMAGE_BUSYBOX,
                                                                runtime="runsc"),
                                supports=CAPABILITIES - {"pool_reuse"}, refusal_name="runsc",
                                leftovers=_docker_leftovers)
    if name == "process":
        return BackendUnderTest(
            name=name, config=SandboxConfig(type="process", image=IMAGE_BUSYBOX),
            supports=CAPABILITIES - {"command_user", "pool_reuse", "checkpoint"},
            leftovers=_process_leftovers)
    assert kube is not None
    local = kube.image.endswith(":local")  # the local cluster: its images are never pulled
    return BackendUnderTest(
        # Half a core each: the default limit (2 cores) is also the Pod's request, so one
        # default sandbox fills the 2-core node and the shared sandbox would leave no room for
        # the fresh ones (they stay Pending).
        name=name, config=SandboxConfig(type="kubernetes", image=kube.image,
                                        pull_policy="never" if local else "",
                                        resources=ResourceLimits(cpu_limit=0.5,
                                                                 memory_limit=256 << 20)),
        make=lambda cfg: Sandbox(backend=kube.backend(cfg)),
        supports=CAPABILITIES - {"command_user", "pool_reuse", "checkpoint"},
        leftovers=_kube_leftovers(kube, host_visible=kube.fake is None))
