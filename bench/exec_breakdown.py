"""Where the SDK's client CPU per Docker exec goes, over raw aiodocker's (issue 29's row
"exec client CPU <= raw + 0.3 ms"), for ``execute_command(["true"])`` in one sandbox.

Three parts, each measured right after an exec (cold caches, as the bench row runs):

* ``reads``: each pread of the exact per-command usage's cgroup counter files, by file and by
  side (before the command, after it), timed around the system call (kernel time: callgrind
  does not see it);
* ``stages``: the SDK's own synchronous steps of an exec, each timed around its call (nested:
  ``_build`` holds ``measure``, which holds the after read; medians, cold);
* ``variants``: client CPU per exec (``time.process_time`` over blocks of 20, the bench's
  method) of the SDK as it is, the SDK with the exact usage's reads switched off (the
  sampler's window instead: what an option to skip them would save at most), and raw
  aiodocker, the three rotating block by block in one process, against the same sandbox.

Comparing trees: run it alternately with ``PYTHONPATH`` pointing at each. It measures the
private steps by name, so a step renamed shows as absent; it asserts nothing about numbers.

    python bench/exec_breakdown.py [--reps 200] [--blocks 24] [--only reads,stages,variants]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from common import Box
from impl_aiodocker import RawAiodocker
from impl_sdk import SDK

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

#: (module, class or None, function): the SDK's own synchronous steps of one exec.
STAGES = (
    ("sandbox._sandbox", "Sandbox", "_plan"),
    ("sandbox.docker._finish", "ResultFinisher", "finalizer_now"),
    ("sandbox._cgroup_usage", "HostCgroup", "read_raw"),
    ("sandbox.docker._exec", None, "check_exec_size"),
    ("sandbox.docker._exec", "ExecProcess", "__init__"),
    ("sandbox._process_base", "ProcessBase", "lifetime"),
    ("sandbox.docker._exec", "ExecProcess", "_output_ended"),
    ("sandbox.docker._exec", "ExecProcess", "_build"),
    ("sandbox.docker._finish", "CommandFinalizer", "measure"),
    ("sandbox._process_base", None, "make_result"),
    ("sandbox.docker._exec", "_OpenExec", "_close"),
    ("sandbox._sandbox", "Sandbox", "_audit_command"),
)


def _timed(mod: str, owner: str | None, name: str,
           into: dict[str, list[int]]) -> Callable[[], None]:
    """Wrap a step with a timer; returns what undoes it."""
    holder: Any = importlib.import_module(mod)
    if owner is not None:
        holder = getattr(holder, owner)
    original = getattr(holder, name)
    key = f"{owner or mod.rsplit('.', 1)[-1]}.{name}"
    times = into.setdefault(key, [])
    clock = time.perf_counter_ns

    @functools.wraps(original)
    def step(*args: Any, **kwargs: Any) -> Any:
        t0 = clock()
        try:
            return original(*args, **kwargs)
        finally:
            times.append(clock() - t0)

    setattr(holder, name, step)
    return lambda: setattr(holder, name, original)


async def reads(sb: Sandbox, reps: int) -> None:
    finisher = sb.backend._finisher
    cgroup = finisher._cgroup if finisher is not None else None
    kept = cgroup._kept if cgroup is not None else None
    if cgroup is None or kept is None:
        print("reads: no kept cgroup files (a remote engine, or the fd budget spent)")
        return
    names = {fd: os.path.basename(path) for fd, path in zip(kept.fds, cgroup._files,
                                                             strict=True)}
    calls: list[tuple[int, int]] = []
    real, clock = os.pread, time.perf_counter_ns

    def pread(fd: int, size: int, offset: int) -> bytes:
        t0 = clock()
        data = real(fd, size, offset)
        calls.append((fd, clock() - t0))
        return data

    os.pread = pread
    try:
        for _ in range(reps):
            await sb.execute_command(["true"])
    finally:
        os.pread = real
    per = len(calls) // reps
    print(f"reads: {len(calls) / reps:.1f} preads per exec, median us each (n={reps}):")
    for at in range(per):
        fd = calls[at][0]
        took = [calls[i * per + at][1] for i in range(reps)]
        print(f"  {at:2d} {names.get(fd, fd)!s:45} {statistics.median(took) / 1000:6.1f}")
    medians = [statistics.median(calls[i * per + at][1] for i in range(reps)) for at in range(per)]
    print(f"  total per exec (sum of the medians) {sum(medians) / 1000:.1f} us")


async def stages(sb: Sandbox, reps: int) -> None:
    times: dict[str, list[int]] = {}
    undo = [_timed(*stage, times) for stage in STAGES if _exists(*stage)]
    try:
        c0 = time.process_time()
        for _ in range(reps):
            await sb.execute_command(["true"])
        cpu = (time.process_time() - c0) * 1000 / reps
    finally:
        for step in undo:
            step()
    print(f"stages (nested; cold, n={reps}; {cpu:.3f} ms CPU per exec with the timers):")
    for key, took in times.items():
        print(f"  {key:38} calls/exec {len(took) / reps:4.1f}  median "
              f"{statistics.median(took) / 1000:6.1f} us  mean {sum(took) / reps / 1000:6.1f} us")


def _exists(mod: str, owner: str | None, name: str) -> bool:
    holder: Any = importlib.import_module(mod)
    if owner is not None:
        holder = getattr(holder, owner, None)
    return holder is not None and hasattr(holder, name)


async def variants(sb: Sandbox, blocks: int, per_block: int = 20) -> None:
    sdk, raw = SDK(), RawAiodocker({})
    await raw.open()
    box = Box(sb, sb.backend.container_id)
    finisher = sb.backend._finisher
    cgroup = finisher._cgroup if finisher is not None else None
    names = ("sdk", "sdk, no exact usage", "aiodocker")
    cpu: dict[str, list[float]] = {name: [] for name in names}
    try:
        for impl in (sdk, raw):
            for _ in range(3):
                await impl.exec_true(box)
        for rep in range(blocks):
            for name in names[rep % 3:] + names[:rep % 3]:
                impl = raw if name == "aiodocker" else sdk
                if finisher is not None:
                    finisher._cgroup = None if name == "sdk, no exact usage" else cgroup
                c0 = time.process_time()
                for _ in range(per_block):
                    await impl.exec_true(box)
                cpu[name].append((time.process_time() - c0) * 1000 / per_block)
    finally:
        if finisher is not None:
            finisher._cgroup = cgroup
        await raw.close()
    print(f"variants (ms CPU per exec, medians of {blocks} blocks of {per_block}):")
    for name in names:
        extra = [a - b for a, b in zip(cpu[name], cpu["aiodocker"], strict=True)]
        print(f"  {name:22} {statistics.median(cpu[name]):.3f}  minus aiodocker per block: "
              f"median {statistics.median(extra):+.3f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=24)
    parser.add_argument("--only", default="reads,stages,variants")
    args = parser.parse_args()
    parts = set(args.only.split(","))
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
    await sb.__aenter__()
    try:
        for _ in range(5):
            await sb.execute_command(["true"])
        if "reads" in parts:
            await reads(sb, args.reps)
        if "stages" in parts:
            await stages(sb, args.reps)
        if "variants" in parts:
            await variants(sb, args.blocks)
    finally:
        await sb.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
