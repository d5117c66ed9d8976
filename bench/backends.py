"""Benchmark the SDK's backends side by side: process (bubblewrap) against Docker.

Both run in the same process and the same run, interleaved repetition by repetition, so drift
on the shared host hits them alike. Measured for each backend:

* create-to-first-command: ``Sandbox(...)`` entered and one ``true`` run (cleanup not counted);
* command round trip: ``execute_command(["true"])`` in a running sandbox, each process
  command right after a Docker exec (an untimed one where the timed Docker command is not
  just before: both process kinds measured alike), and back to back in one sandbox;
* create and remove in sequence: N sandboxes, each created, one command, removed;
* the floor under a command round trip (column "bare"): the image's own busybox ``true``
  run from this process with ``posix_spawn`` and ``waitpid``, no sandbox, no SDK, in the
  same two positions (right after a Docker exec, and back to back).

Prints a Markdown table (p50, p90) and writes bench/results/backends.json.

    python bench/backends.py            # about 2 minutes here
    python bench/backends.py --quick

It measures; it asserts nothing about the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SecurityPolicy

RESULTS = Path(__file__).resolve().parent / "results" / "backends.json"
#: "process" is the default config (a writable overlay root, as on Docker); "process-ro" the
#: same with read_only_root=True (the image bound read-only: no overlay to mount).
KINDS = ("process", "process-ro", "docker")
PROCESS_KINDS = ("process", "process-ro")


def config(kind: str) -> SandboxConfig:
    if kind == "process-ro":
        return SandboxConfig(type="process", image=IMAGE_BUSYBOX,
                             security=SecurityPolicy(read_only_root=True))
    return SandboxConfig(type=kind, image=IMAGE_BUSYBOX)


def bare_true(path: str) -> float:
    """Seconds to run ``path true`` from this process and reap it (the floor, no sandbox)."""
    t0 = time.perf_counter()
    os.waitpid(os.posix_spawn(path, [path, "true"], {}), 0)
    return time.perf_counter() - t0


def export_busybox(into: str) -> str:
    """The busybox binary of IMAGE_BUSYBOX, copied out of a created (never started)
    container into ``into``."""
    cid = subprocess.run(["docker", "create", IMAGE_BUSYBOX], check=True, capture_output=True,
                         text=True).stdout.strip()
    try:
        subprocess.run(["docker", "cp", "-L", f"{cid}:/bin/busybox", into], check=True,
                       capture_output=True)
    finally:
        subprocess.run(["docker", "rm", cid], check=True, capture_output=True)
    return os.path.join(into, "busybox")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def first_command(kind: str) -> tuple[float, float]:
    """(seconds to the first command's result, seconds to remove)."""
    t0 = time.perf_counter()
    box = Sandbox(config(kind))
    await box.initialize()
    await box.execute_command(["true"])
    t1 = time.perf_counter()
    await box.cleanup()
    return t1 - t0, time.perf_counter() - t1


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    reps = 10 if args.quick else 30
    rt_reps = 50 if args.quick else 200
    seq = {"process": 100, "process-ro": 100, "docker": 10 if args.quick else 20}
    rows: dict[str, dict[str, list[float]]] = {k: {} for k in KINDS}

    for kind in KINDS:  # warm-up: the image export (process) and the page cache
        await first_command(kind)
    for _ in range(reps):
        for kind in KINDS:
            create, remove = await first_command(kind)
            rows[kind].setdefault("create-to-first-command", []).append(create)
            rows[kind].setdefault("remove", []).append(remove)
    boxes = {kind: Sandbox(config(kind)) for kind in KINDS}
    for box in boxes.values():
        await box.initialize()
    bare: dict[str, list[float]] = {}
    scratch = tempfile.TemporaryDirectory(prefix="bench-backends-")
    try:
        busybox = export_busybox(scratch.name)
        for rep in range(rt_reps):
            # Each process kind (and the bare floor) right after a Docker exec, in alternating
            # order: taking the kinds in turn measured process-ro right after a process command
            # (caches warm), which read as ~1 ms of overlay cost that a paired A/B does not
            # show (~0.1 ms).
            order = PROCESS_KINDS if rep % 2 else PROCESS_KINDS[::-1]
            for kind in (*order, "bare", "docker"):
                if kind != "docker":
                    await boxes["docker"].execute_command(["true"])
                if kind == "bare":
                    bare.setdefault("command round trip", []).append(bare_true(busybox))
                    continue
                t0 = time.perf_counter()
                await boxes[kind].execute_command(["true"])
                rows[kind].setdefault("command round trip", []).append(time.perf_counter() - t0)
        # The same command back to back in one sandbox (nothing else between): the row above
        # measures each process command right after a Docker exec, whose daemons' work (and
        # our caches gone cold meanwhile) costs it 0.6-1.2 ms here, overlay or not: the bare
        # floor pays ~0.6 ms of it too.
        for kind, box in boxes.items():
            for _ in range(rt_reps if kind != "docker" else rt_reps // 5):
                t0 = time.perf_counter()
                await box.execute_command(["true"])
                rows[kind].setdefault("command round trip, back to back", []).append(
                    time.perf_counter() - t0)
        for _ in range(rt_reps):
            bare.setdefault("command round trip, back to back", []).append(bare_true(busybox))
    finally:
        scratch.cleanup()
        for box in boxes.values():
            await box.cleanup()
    for kind in KINDS:
        t0 = time.perf_counter()
        for _ in range(seq[kind]):
            async with Sandbox(config(kind)) as box:
                await box.execute_command(["true"])
        rows[kind]["create+command+remove, in sequence (per sandbox)"] = [
            (time.perf_counter() - t0) / seq[kind]]

    print(f"| scenario | {' | '.join(f'{k} p50 | {k} p90' for k in KINDS)} | docker/process "
          "| bare p50 | process/bare |")
    print(f"|---|{'---|---|' * len(KINDS)}---|---|---|")
    out: dict[str, dict[str, dict[str, float]]] = {}
    for scenario in rows["process"]:
        cells, p50s = [], {}
        for kind in KINDS:
            values = rows[kind][scenario]
            p50s[kind] = statistics.median(values)
            out.setdefault(scenario, {})[kind] = {"p50": p50s[kind], "p90": pct(values, 0.9),
                                                  "n": len(values)}
            cells += [f"{p50s[kind] * 1000:.1f} ms", f"{pct(values, 0.9) * 1000:.1f} ms"]
        ratio = p50s["docker"] / p50s["process"] if p50s["process"] else 0.0
        floor = ["", ""]
        if floors := bare.get(scenario):
            p50 = statistics.median(floors)
            out[scenario]["bare"] = {"p50": p50, "p90": pct(floors, 0.9), "n": len(floors)}
            floor = [f"{p50 * 1000:.2f} ms", f"{p50s['process'] / p50:.1f}x"]
        print(f"| {scenario} | {' | '.join(cells)} | {ratio:.0f}x | {' | '.join(floor)} |")
    print(f"\n(sequence: {seq['process']} process and {seq['docker']} docker sandboxes)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
