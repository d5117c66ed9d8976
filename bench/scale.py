"""Scale rows of the benchmark (issue 29): what idle sandboxes cost, many at once.

* ``idleproc``: N process sandboxes opened (10 at a time) and closed (all at once); while
  they idle, the SDK process's CPU over a window and a command's round trip; with the
  background sampler on (the default) and off (``stats_interval=0``) in the same run.
* ``idledocker``: N idle Docker sandboxes against N raw aiodocker containers: CPU of this
  process, dockerd and containerd over a window while they idle.

Used by run.py (``--only idleproc,idledocker``); each function returns rows as dicts for
run.py's ``Row``. It measures; it asserts nothing about the numbers.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import anyio
from common import warm_acquires

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig

RowDict = dict[str, Any]
#: Seconds of idling measured.
WINDOW = 10.0


def self_cpu() -> float:
    """CPU seconds used by this process so far (all threads)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _docker_containerd(dockerd: list[int]) -> list[int]:
    """The containerd that serves dockerd: the one dockerd started where it did (another,
    such as the local Kubernetes' own, is not Docker's cost; after the ``kube`` scenario
    its teardown put 2-3 % of a core into whichever window came first), else every one."""
    every = _pids_named("containerd")
    children = [pid for pid in every if _ppid(pid) in dockerd]
    return children or every


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _pids_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().strip() == name:
                        found.append(int(entry))
            except OSError:
                pass
    return found


def proc_cpu(pids: list[int]) -> float:
    """CPU seconds used so far by ``pids`` (utime + stime)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / tick


async def cpu_over(window: float, pids: dict[str, list[int]]) -> dict[str, float]:
    """Percent of one core used during ``window`` seconds by this process and by ``pids``."""
    before = {"sdk": self_cpu(), **{k: proc_cpu(v) for k, v in pids.items()}}
    t0 = time.monotonic()
    await anyio.sleep(window)
    span = time.monotonic() - t0
    after = {"sdk": self_cpu(), **{k: proc_cpu(v) for k, v in pids.items()}}
    return {k: (after[k] - before[k]) / span * 100.0 for k in before}


async def _quiet(pids: dict[str, list[int]], *, below: float = 1.0,
                 limit: float = 30.0) -> float:
    """Wait until ``pids`` together use under ``below`` % of a core over a second (at most
    ``limit`` s); returns the seconds waited. Work left by earlier scenarios (removals,
    containerd's garbage collection after them) must not land in one kind's window."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit:
        cpu = await cpu_over(1.0, pids)
        if sum(value for who, value in cpu.items() if who != "sdk") < below:
            break
    return time.monotonic() - t0


async def _open_many(make: Callable[[], Awaitable[Any]], n: int, at_once: int,
                     failures: list[str] | None = None) -> list[Any]:
    """Open ``n``, ``at_once`` at a time; a failed one is noted in ``failures`` if given."""
    out: list[Any] = []
    limiter = anyio.CapacityLimiter(at_once)

    async def one() -> None:
        async with limiter:
            try:
                out.append(await make())
            except Exception as exc:
                if failures is None:
                    raise
                failures.append(f"{type(exc).__name__}: {exc}"[:200])

    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one)
    return out


async def _close_all(close: Callable[[Any], Awaitable[Any]], items: list[Any]) -> None:
    """Close every item at once; failures are printed (the first), not raised."""
    failed: list[str] = []

    async def one(item: Any) -> None:
        try:
            await close(item)
        except Exception as exc:
            failed.append(f"{type(exc).__name__}: {exc}"[:300])

    async with anyio.create_task_group() as tg:
        for item in items:
            tg.start_soon(one, item)
    if failed:
        print(f"  {len(failed)} of {len(items)} failed to close, first: {failed[0]}", flush=True)


async def _round_trips(sb: Sandbox, n: int = 30) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await sb.execute_command(["true"])
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def idle_process(n: int, window: float = WINDOW) -> list[RowDict]:
    """Rows for N idle process sandboxes, sampler on and off, in one run."""
    rows: list[RowDict] = []
    for label, interval in (("sdk", 1.0), ("sdk, sampler off", 0.0)):
        cfg = SandboxConfig(type="process", image=IMAGE_BUSYBOX,
                            stats_interval=timedelta(seconds=interval))

        async def make(cfg: SandboxConfig = cfg) -> Sandbox:
            sb = Sandbox(cfg)
            await sb.__aenter__()
            return sb

        t0 = time.perf_counter()
        boxes: list[Sandbox] = []
        try:
            boxes = await _open_many(make, n, 10)
            opened = time.perf_counter() - t0
            await anyio.sleep(2)  # past the first samples
            cpu = (await cpu_over(window, {}))["sdk"]
            trips = await _round_trips(boxes[0])
        finally:
            t1 = time.perf_counter()
            await _close_all(lambda sb: sb.cleanup(), boxes)
            closed = time.perf_counter() - t1
        rows += [
            {"scenario": f"{n} idle process sandboxes: open", "impl": label, "unit": "s",
             "samples": [opened], "note": "10 at a time"},
            {"scenario": f"{n} idle process sandboxes: close", "impl": label, "unit": "s",
             "samples": [closed], "note": "all at once"},
            {"scenario": f"{n} idle process sandboxes: SDK CPU", "impl": label,
             "unit": "% core", "samples": [cpu], "note": f"over {window:g} s"},
            {"scenario": f"{n} idle process sandboxes: round trip", "impl": label,
             "unit": "ms", "samples": trips, "note": "`true`, while they idle"},
        ]
    return rows


async def idle_docker(n: int, raw: Any, window: float = WINDOW) -> list[RowDict]:
    """Rows for N idle Docker sandboxes against N raw aiodocker containers."""
    dockerd = _pids_named("dockerd")
    daemons = {"dockerd": dockerd, "containerd": _docker_containerd(dockerd)}
    rows: list[RowDict] = []

    async def make_sdk() -> Sandbox:
        sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
        await sb.__aenter__()
        return sb

    kinds: list[tuple[str, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[Any]]]] = [
        ("sdk", make_sdk, lambda sb: sb.cleanup()),
        ("aiodocker", lambda: raw.create(IMAGE_BUSYBOX), raw.remove),
    ]
    for label, make, close in kinds:
        items: list[Any] = []
        failed: list[str] = []
        waited = await _quiet(daemons)  # the same rule for each kind, before and after open
        try:
            items = await _open_many(make, n, 10, failed)
            if failed:
                print(f"  {label}: {len(failed)} of {n} failed to open, first: {failed[0]}",
                      flush=True)
            await anyio.sleep(3)
            waited += await _quiet(daemons)
            cpu = await cpu_over(window, daemons)
        finally:
            await _close_all(close, items)
        for who, value in cpu.items():
            note = f"over {window:g} s after the daemons were quiet (waited {waited:.0f} s)" + \
                (f"; {len(failed)} failed to open" if failed else "")
            rows.append({"scenario": f"{n} idle Docker sandboxes: {who} CPU", "impl": label,
                         "unit": "% core", "samples": [value], "note": note})
    return rows


async def pool_knee(cycles: int, levels: tuple[int, ...]) -> list[RowDict]:
    """Throughput of `cycles` acquire/`true`/release (max_uses=1) for each create concurrency:
    creates in flight against sandboxes per second, to pick the knee on this host."""
    from sandbox import SandboxPool

    config = SandboxConfig(image=IMAGE_BUSYBOX)
    rows: list[RowDict] = []
    for level in levels:
        async with SandboxPool(config, min_ready=max(4, level), max_size=max(8, 3 * level),
                               create_concurrency=level) as pool:
            with anyio.fail_after(300):
                while pool.stats().ready < max(4, level):  # noqa: ASYNC110 (untimed: the fill)
                    await anyio.sleep(0.05)
            t0 = time.perf_counter()
            for _ in range(cycles):
                async with pool.acquire() as sb:
                    await sb.execute_command(["true"])
            took = time.perf_counter() - t0
        rows.append({"scenario": f"{cycles} cycles acquire/true/release by create_concurrency",
                     "impl": f"sandbox SDK (pool, {level} at once)", "unit": "s",
                     "samples": [took], "note": f"{cycles / took:.1f} sandboxes/s"})
    return rows


async def warm_pools(reps: int) -> list[RowDict]:
    """Warm acquire, and acquire to the first command's result, from a pool with a sandbox
    ready (the refill between repetitions is not timed): process and Docker backends."""
    from sandbox import SandboxPool

    rows: list[RowDict] = []
    for kind in ("process", "docker"):
        async with SandboxPool(SandboxConfig(type=kind, image=IMAGE_BUSYBOX), min_ready=2,
                               max_size=4) as pool:
            measured = await warm_acquires(pool, reps, command=["true"])
        rows += [
            {"scenario": "pool warm acquire", "impl": f"sandbox SDK ({kind} pool)",
             "unit": "ms", "samples": measured.acquire},
            {"scenario": "pool acquire to first command", "impl": f"sandbox SDK ({kind} pool)",
             "unit": "ms", "samples": measured.first},
        ]
    return rows
