"""Where a process sandbox's command round trip goes: wall time by what came just before it,
and the CPU each side spends per command.

For ``execute_command(["true"])`` in one process sandbox, interleaved repetition by
repetition:

* wall time right after a Docker exec (the row of issue 29), after 30 ms of idling (no Docker
  work: caches gone cold), and back to back;
* CPU per command, back to back: the SDK's (``time.process_time``), the sandbox's zygote's
  (its own ``/proc`` utime and stime: its Python and syscalls) and the command's (the
  zygote's reaped children's: the vfork child up to ``execve``, then busybox's run).

Comparing trees: run it alternately with ``PYTHONPATH`` pointing at each, and compare the
medians of several runs; the wall rows are noisy on a shared host, the CPU rows much less.

    python bench/process_breakdown.py [--reps 100] [--read-only-root]

It measures the default config (an overlay root); ``--read-only-root`` the image bound
read-only instead, for comparing the two by alternating runs, each row under the same
conditions for both. (Paired, each right after a Docker exec, they were within ~0.1 ms here:
the overlay's own cost, its permission checks and backing file in the command's ``execve``.)

It measures; it asserts nothing about the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SecurityPolicy

_TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            found += [int(child) for child in f.read().split()]
    return found


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read()


def _zygote() -> int:
    """The pid of this process's only zygote (a fork server child that is not a bwrap)."""
    server = next(p for p in _children(os.getpid()) if b"_forkserver" in _cmdline(p))
    zygotes = [p for p in _children(server) if b"bwrap" not in _cmdline(p)]
    if len(zygotes) != 1:
        raise SystemExit(f"expected one zygote under the fork server, found {zygotes}")
    return zygotes[0]


def _cpu(pid: int, *, children: bool = False) -> float:
    """Seconds of CPU of ``pid`` itself, or of its children it reaped."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    first = 13 if children else 11
    return (int(fields[first]) + int(fields[first + 1])) / _TICK


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=100, help="repetitions of each wall row")
    parser.add_argument("--read-only-root", action="store_true",
                        help="security.read_only_root=True (no overlay)")
    args = parser.parse_args()
    box = Sandbox(SandboxConfig(type="process", image=IMAGE_BUSYBOX, security=SecurityPolicy(
        read_only_root=args.read_only_root)))
    docker = Sandbox(SandboxConfig(type="docker", image=IMAGE_BUSYBOX))
    await box.initialize()
    await docker.initialize()
    try:
        for _ in range(5):
            await box.execute_command(["true"])
            await docker.execute_command(["true"])
        zygote = _zygote()
        rows: dict[str, list[float]] = {}
        for _ in range(args.reps):
            for before in ("after a Docker exec", "after 30 ms idle", "back to back"):
                if before == "after a Docker exec":
                    await docker.execute_command(["true"])
                elif before == "after 30 ms idle":
                    time.sleep(0.03)  # noqa: ASYNC251 - the loop is meant to sit idle
                t0 = time.perf_counter()
                await box.execute_command(["true"])
                rows.setdefault(before, []).append(time.perf_counter() - t0)
        count = args.reps * 10
        z0, k0, c0 = _cpu(zygote), _cpu(zygote, children=True), time.process_time()
        for _ in range(count):
            await box.execute_command(["true"])
        z1, k1, c1 = _cpu(zygote), _cpu(zygote, children=True), time.process_time()
    finally:
        await box.cleanup()
        await docker.cleanup()
    out = {f"round trip {k}, p50 ms": statistics.median(v) * 1e3 for k, v in rows.items()}
    out["SDK CPU per command, us"] = (c1 - c0) / count * 1e6
    out["zygote CPU per command, us"] = (z1 - z0) / count * 1e6
    out["command CPU per command, us"] = (k1 - k0) / count * 1e6
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
