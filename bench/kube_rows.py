"""The Kubernetes rows of bench/run.py (``--only kube``): the real local cluster side by side
with Docker and the process backend, in the same run, interleaved repetition by repetition.

For each backend: create to first command (``Sandbox`` entered and one ``true``), command
round trip (``true`` in a running sandbox), 20 sandboxes created concurrently (wall time until
all 20 answered a command), pool acquire (from a warm ``SandboxPool``; the wait for the refill
is not timed). The cluster is scripts/kube.sh's (``make kube``); its Pods use the SDK's busybox
imported as ``sandbox-busybox:local``, never pulled. It measures; it asserts nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from common import warm_acquires

from sandbox import IMAGE_BUSYBOX, ResourceLimits, Sandbox, SandboxConfig, SandboxPool

KUBE_CACHE = Path(os.environ.get("KUBE_CACHE", "/var/cache/sandbox-sdk/kube"))
KUBECONFIG = KUBE_CACHE / "run" / "kubeconfig"
KUBE_IMAGE = "sandbox-busybox:local"
CONCURRENT = 20


def configs() -> dict[str, SandboxConfig]:
    """The three backends with the same busybox; Kubernetes only while the cluster runs."""
    out = {"docker": SandboxConfig(image=IMAGE_BUSYBOX),
           "process": SandboxConfig(type="process", image=IMAGE_BUSYBOX)}
    if KUBECONFIG.is_file():
        # The backend reads KUBECONFIG (namespace "default"); the pool makes its sandboxes the
        # same way, so every Kubernetes sandbox here is alike.
        os.environ["KUBECONFIG"] = str(KUBECONFIG)
        # Requests stated: with only limits (2 CPUs by default) Kubernetes reserves the limit,
        # and the 2-core node would schedule one sandbox at a time.
        out["kubernetes"] = SandboxConfig(
            type="kubernetes", image=KUBE_IMAGE, pull_policy="never",
            resources=ResourceLimits(cpu_request=0.01, memory_request=16 * 1024 * 1024))
    return out


async def _first_command(config: SandboxConfig) -> float:
    t0 = time.perf_counter()
    box = Sandbox(config)
    try:
        await box.initialize()
        await box.execute_command(["true"])
        return time.perf_counter() - t0
    finally:
        await box.cleanup()


async def _concurrent(config: SandboxConfig, n: int) -> float:
    """Seconds until N sandboxes created at once have each answered a command."""
    boxes = [Sandbox(config) for _ in range(n)]
    t0 = time.perf_counter()
    try:
        async with anyio.create_task_group() as tg:
            for box in boxes:
                async def one(box: Sandbox = box) -> None:
                    await box.initialize()
                    await box.execute_command(["true"])
                tg.start_soon(one)
        return time.perf_counter() - t0
    finally:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for box in boxes:
                    tg.start_soon(box.cleanup)


async def _pool_acquire(config: SandboxConfig, reps: int) -> list[float]:
    async with SandboxPool(config, min_ready=2, max_size=4) as pool:
        measured = await warm_acquires(pool, reps, command=["true"], patience=300, poll=0.02)
    return measured.acquire


async def run(bench: Any, row: Callable[..., Any]) -> None:
    """Add the rows to BENCH (bench/run.py's Bench); ROW makes one of its Row objects."""
    kinds = configs()
    if "kubernetes" not in kinds:
        print(f"  (no local cluster: {KUBECONFIG} absent; `make kube` starts it)", flush=True)
    names = list(kinds)
    unit_notes = {"kubernetes": "Kubernetes 1.20 single node (scripts/kube.sh)"}

    def add(scenario: str, kind: str, unit: str, samples: list[float]) -> None:
        bench.add(row(f"kube: {scenario}", kind, unit, samples, note=unit_notes.get(kind, "")))

    for kind in names:  # warm-up: image export (process), page cache, the API connection
        await _first_command(kinds[kind])
    create: dict[str, list[float]] = {k: [] for k in names}
    for rep in range(bench.reps(10, 3)):
        for kind in names[rep % len(names):] + names[:rep % len(names)]:
            create[kind].append(await _first_command(kinds[kind]) * 1000)
    for kind in names:
        add("create to first command", kind, "ms", create[kind])

    boxes = {kind: Sandbox(config) for kind, config in kinds.items()}
    try:
        for box in boxes.values():
            await box.initialize()
        trips: dict[str, list[float]] = {k: [] for k in names}
        for _ in range(bench.reps(100, 20)):
            for kind, box in boxes.items():
                t0 = time.perf_counter()
                await box.execute_command(["true"])
                trips[kind].append((time.perf_counter() - t0) * 1000)
        for kind in names:
            add("command round trip", kind, "ms", trips[kind])
    finally:
        for box in boxes.values():
            await box.cleanup()

    for kind in names:
        samples = [await _concurrent(kinds[kind], CONCURRENT) for _ in range(bench.reps(2, 1))]
        add(f"{CONCURRENT} sandboxes created concurrently", kind, "s", samples)

    for kind in names:
        add("pool acquire (warm)", kind, "ms",
            await _pool_acquire(kinds[kind], bench.reps(10, 4)))
