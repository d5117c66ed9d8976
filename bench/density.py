"""How many sandboxes fit on this host, and what each costs as the count grows (issue 29).

Opens sandboxes in steps up to a target, each with an idle agent-sized workload started in it
(a shell holding 1 MiB in a variable and a ``sleep``: what an idle agent's tool process
leaves), and after each step records: the step's create time per sandbox, host memory used
since the start (MemAvailable), this process's RSS, fds, threads and asyncio tasks, its CPU
while everything idles, and a command's round trip. Then closes everything.

    python bench/density.py --backend process --target 1000 --step 100
    python bench/density.py --backend docker --target 150 --step 25

Writes bench/results/density-<backend>.json; ``python bench/density_chart.py`` draws
docs/assets/density.svg from the committed copy in docs/assets/density.json. It measures; it
asserts nothing about the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

RESULTS = Path(__file__).resolve().parent / "results"
WORKLOAD = "x=$(head -c 1048576 /dev/zero | tr '\\0' a); exec sleep 1000000"


def meminfo(key: str) -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("process", "docker"), default="process")
    parser.add_argument("--target", type=int, default=1000)
    parser.add_argument("--step", type=int, default=100)
    parser.add_argument("--at-once", type=int, default=10, help="creates in flight")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU measured")
    args = parser.parse_args()
    cfg = SandboxConfig(type=args.backend, image=IMAGE_BUSYBOX)
    boxes: list[Sandbox] = []
    points: list[dict[str, Any]] = []
    base_avail = meminfo("MemAvailable")
    limiter = anyio.CapacityLimiter(args.at_once)
    stopped = ""

    async def open_one() -> None:
        async with limiter:
            sb = Sandbox(cfg)
            await sb.__aenter__()
            boxes.append(sb)
            # Detached from the command's lifetime: it idles in the sandbox until cleanup.
            await sb.execute_command(["sh", "-c", f"({WORKLOAD}) >/dev/null 2>&1 &"])

    try:
        while len(boxes) < args.target:
            n = min(args.step, args.target - len(boxes))
            t0 = time.perf_counter()
            try:
                async with anyio.create_task_group() as tg:
                    for _ in range(n):
                        tg.start_soon(open_one)
            except Exception as exc:  # the limit found: record it and stop
                stopped = f"{type(exc).__name__}: {exc}"[:300]
                print("stopped:", stopped, flush=True)
                break
            took = time.perf_counter() - t0
            await anyio.sleep(2)
            c0, w0 = self_cpu(), time.monotonic()
            await anyio.sleep(args.idle)
            cpu = (self_cpu() - c0) / (time.monotonic() - w0) * 100
            trips = []
            for _ in range(10):
                r0 = time.perf_counter()
                await boxes[-1].execute_command(["true"])
                trips.append((time.perf_counter() - r0) * 1000)
            point = {
                "count": len(boxes), "create_ms_per_sandbox": took / n * 1000,
                "step_seconds": took,
                "host_mem_used_mib": (base_avail - meminfo("MemAvailable")) / 2**20,
                "sdk_rss_mib": status("VmRSS") / 1024, "sdk_fds": len(os.listdir("/proc/self/fd")),
                "sdk_threads": status("Threads"), "asyncio_tasks": len(asyncio.all_tasks()),
                "sdk_cpu_idle_pct": cpu, "round_trip_ms_p50": statistics.median(trips),
            }
            points.append(point)
            print(json.dumps(point), flush=True)
    finally:
        t0 = time.perf_counter()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for sb in boxes:
                    tg.start_soon(sb.cleanup)
        close = time.perf_counter() - t0
        print(f"closed {len(boxes)} in {close:.1f} s", flush=True)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"density-{args.backend}.json"
    out.write_text(json.dumps({
        "when": datetime.now(UTC).isoformat(timespec="seconds"), "backend": args.backend,
        "cpus": os.cpu_count(), "host_mem_gib": meminfo("MemTotal") / 2**30,
        "workload": WORKLOAD, "at_once": args.at_once, "points": points,
        "close_seconds": close, "stopped": stopped,
    }, indent=2) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    asyncio.run(main())
