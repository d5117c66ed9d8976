"""Benchmark the SDK against raw aiodocker, docker-py and the docker CLI on the real engine.

Every scenario runs all implementations in the same process and the same run, interleaved
repetition by repetition (so drift in the shared engine hits them alike), against the same
containers where a container is needed. Prints a Markdown table of medians and p95 with the
ratio to raw aiodocker, and writes bench/results/latest.json.

    python bench/run.py                 # full run, about 8 minutes
    python bench/run.py --quick         # fewer repetitions, about 3 minutes
    python bench/run.py --only exec,stream
    python bench/run.py --only pool,checkpoint   # SDK only: warm pool, checkpoints, forks
    python bench/run.py --only rsshostile        # SDK only: memory against hostile content
    python bench/run.py --only kube              # Kubernetes (make kube), Docker, process

It measures; it asserts nothing about the numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import kube_rows
from common import (
    BENCH_LABEL,
    KEEPALIVE,
    MIB,
    Box,
    make_small_tree,
    median,
    p95,
    paired_note,
    paired_ratios,
    warm_acquires,
)
from impl_aiodocker import RawAiodocker
from impl_cli import DockerCLI
from impl_dockerpy import DockerPy
from impl_sdk import SDK

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Sandbox,
    SandboxConfig,
    SandboxPool,
    SecurityPolicy,
    remove_checkpoint,
)
from sandbox.docker import _facts_cache

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.json"
SCENARIOS = ("create", "exec", "exec50", "stream", "files", "copyout", "usage", "rss",
             "rssout", "rsshostile", "pool", "checkpoint", "session", "peers", "kube",
             "idleproc", "idledocker", "poolknee", "warmpools", "execcpu", "copy", "cleanup",
             "batch")
BASELINE = "aiodocker"


@dataclass
class Row:
    scenario: str
    impl: str
    unit: str
    samples: list[float]
    higher_is_better: bool = False
    headline: str = "median"  # or "mean"
    note: str = ""
    value: float = 0.0
    p95: float = 0.0
    ratio: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def finish(self) -> None:
        if self.headline == "mean":
            self.value = statistics.fmean(self.samples)
        else:
            self.value = median(self.samples)
        # For a rate the tail is the slow end: the rate of the 95th-percentile run time.
        self.p95 = (1 / p95([1 / v for v in self.samples]) if self.higher_is_better
                    else p95(self.samples))


Impl = Any  # one of SDK, RawAiodocker, DockerPy, DockerCLI (duck-typed, see impl_*.py)


class Bench:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.rows: list[Row] = []
        self.impls: list[Impl] = []
        self.spec: dict[str, Any] = {}

    def reps(self, full: int, quick: int) -> int:
        return quick if self.quick else full

    def add(self, row: Row) -> None:
        row.finish()
        self.rows.append(row)
        shown = f"{row.value:,.3f}" if row.value < 10 else f"{row.value:,.1f}"
        print(f"  {row.scenario:<28} {row.impl:<30} {shown:>10} {row.unit}", flush=True)

    async def timed(self, fn: Callable[[], Awaitable[Any]]) -> float:
        t0 = time.perf_counter()
        await fn()
        return time.perf_counter() - t0

    async def interleaved(
        self, scenario: str, reps: int, op: Callable[[Impl], Awaitable[Any]], *,
        unit: str = "ms", impls: list[Impl] | None = None, warmup: int = 1,
        rate_mib: float | None = None, paired: bool = False,
    ) -> None:
        """Run ``op`` for every implementation, rotating who goes first each repetition;
        ``paired`` rows also carry their per-round ratios to raw (`paired_ratios`)."""
        impls = impls or self.impls
        samples: dict[str, list[float]] = {i.name: [] for i in impls}
        for _ in range(warmup):
            for impl in impls:
                await op(impl)
        for rep in range(reps):
            for impl in impls[rep % len(impls):] + impls[: rep % len(impls)]:
                seconds = await self.timed(lambda impl=impl: op(impl))
                samples[impl.name].append(rate_mib / seconds if rate_mib else seconds * 1000)
        if paired:
            self._paired_rows(scenario, samples)
            return
        for impl in impls:
            self.add(Row(scenario, impl.name, unit, samples[impl.name],
                         higher_is_better=rate_mib is not None))

    # -- set-up -------------------------------------------------------------------------------

    async def derive_spec(self) -> None:
        """Create one SDK sandbox and copy its container settings to the baselines."""
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
            cid = sb.backend.container_id
            raw = json.loads((await anyio.run_process(["docker", "inspect", cid])).stdout)[0]
            # A bare namespace gets its /etc/hosts written before start; the raw rows write
            # the same file the same way (a tar of the SDK's, `docker cp` to stdout).
            hosts = (await anyio.run_process(["docker", "cp", f"{cid}:/etc/hosts", "-"])).stdout \
                if raw["Config"].get("NetworkDisabled") else None
        cfg, host = raw["Config"], raw["HostConfig"]
        body = {"User": cfg.get("User") or "", "Env": cfg.get("Env") or [],
                "WorkingDir": cfg.get("WorkingDir") or "", "HostConfig": host,
                "Labels": {BENCH_LABEL: "aiodocker"}}
        if cfg.get("NetworkDisabled"):
            # The SDK's bare namespace (`sandbox.docker._netless`): the same body and the same
            # /etc/hosts write for the raw rows (docker-py too; the CLI has no flag for it and
            # keeps --network none, libnetwork's sandbox).
            body["NetworkDisabled"] = True
        kwargs: dict[str, Any] = {"labels": {BENCH_LABEL: "docker-py"}}
        flags: list[str] = []

        def both(key: str, kw: str, flag: str, conv: Callable[[Any], Any] = lambda v: v) -> None:
            value = host.get(key)
            if value:
                kwargs[kw] = conv(value)
                items = value if isinstance(value, list) else [value]
                for item in items:
                    flags.extend([flag] if item is True else [flag, str(conv(item))])

        both("NetworkMode", "network_mode", "--network")
        if cfg.get("NetworkDisabled"):
            kwargs["network_disabled"] = True
        for key, value in (host.get("Sysctls") or {}).items():
            kwargs.setdefault("sysctls", {})[key] = value
            flags += ["--sysctl", f"{key}={value}"]
        both("Init", "init", "--init")
        both("CapDrop", "cap_drop", "--cap-drop")
        both("CapAdd", "cap_add", "--cap-add")
        both("SecurityOpt", "security_opt", "--security-opt")
        both("PidsLimit", "pids_limit", "--pids-limit")
        both("Memory", "mem_limit", "--memory")
        both("ReadonlyRootfs", "read_only", "--read-only")
        both("Runtime", "runtime", "--runtime")
        if host.get("NanoCpus"):
            kwargs["nano_cpus"] = host["NanoCpus"]
            flags += ["--cpus", str(host["NanoCpus"] / 1e9)]
        for path, opts in (host.get("Tmpfs") or {}).items():
            kwargs.setdefault("tmpfs", {})[path] = opts
            flags += ["--tmpfs", f"{path}:{opts}" if opts else path]
        if cfg.get("WorkingDir"):
            kwargs["working_dir"] = cfg["WorkingDir"]
            flags += ["--workdir", cfg["WorkingDir"]]
        self.spec = {"body": {**body, "Image": IMAGE_BUSYBOX, "Cmd": KEEPALIVE},
                     "kwargs": kwargs, "command": KEEPALIVE, "flags": flags}
        self.impls = [SDK(), RawAiodocker(body, etc_tar=hosts), DockerPy(kwargs, etc_tar=hosts),
                      DockerCLI(flags)]
        for impl in self.impls:
            await impl.open()

    async def open_boxes(self, image: str, n: int, *, root: bool = False) -> list[Box]:
        """Open `n` sandboxes; `root` runs the SDK's commands as root (without capabilities),
        as the baselines' execs run: their default user is the container's, root."""
        boxes: list[Box] = []
        security = SecurityPolicy(run_as_user="root") if root else SecurityPolicy()

        async def one() -> None:
            sb = Sandbox(SandboxConfig(image=image, security=security))
            await sb.__aenter__()
            boxes.append(Box(sb, sb.backend.container_id))

        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(one)
        return boxes

    @staticmethod
    async def close_boxes(boxes: list[Box]) -> None:
        async with anyio.create_task_group() as tg:
            for box in boxes:
                tg.start_soon(box.sb.cleanup)

    # -- scenarios ----------------------------------------------------------------------------

    async def s_create(self) -> None:
        """Create to ready and cleanup, the four side by side (who goes first rotating each
        round), then the SDK and raw alone, back to back.

        In the rounds of four every SDK create reads the engine's facts again beside its
        create (`TRUSTED_FOR` 0 turns all trust off: the path of a sandbox opened now and then
        where the daemon cannot be named, or the first after a daemon restart); before, the
        length of a round decided whether a create fell inside the window, so the row mixed
        the two paths in proportions that moved between runs. The back-to-back pairs (order
        alternating) take the path of facts trusted, no read: a burst's, and on a local
        dockerd every create's while the same daemon answers. Each row's note has the median of the
        per-round ratios to raw with its spread (`paired_ratios`), which `targets.py` reads.
        """
        reps = self.reps(30, 16)
        ready: dict[str, list[float]] = {i.name: [] for i in self.impls}
        gone: dict[str, list[float]] = {i.name: [] for i in self.impls}

        async def one(impl: Impl, into: dict[str, list[float]],
                      out: dict[str, list[float]] | None) -> None:
            t0 = time.perf_counter()
            handle = await impl.create(IMAGE_BUSYBOX)
            t1 = time.perf_counter()
            await impl.remove(handle)
            t2 = time.perf_counter()
            into[impl.name].append((t1 - t0) * 1000)
            if out is not None:
                out[impl.name].append((t2 - t1) * 1000)

        trust = _facts_cache.TRUSTED_FOR
        _facts_cache.TRUSTED_FOR = 0.0  # type: ignore[misc]  # every create reads, see above
        try:
            for rep in range(reps + 1):  # the first round warms caches and is dropped
                for impl in self.impls[rep % 4:] + self.impls[: rep % 4]:
                    await one(impl, ready, gone)
                if not rep:
                    for samples in (*ready.values(), *gone.values()):
                        samples.clear()
        finally:
            _facts_cache.TRUSTED_FOR = trust  # type: ignore[misc]
        self._paired_rows("create to ready", ready)
        self._paired_rows("cleanup (remove)", gone)
        pair = [impl for impl in self.impls if impl.name in ("sandbox SDK", BASELINE)]
        burst: dict[str, list[float]] = {i.name: [] for i in pair}
        for rep in range(self.reps(40, 15) + 1):
            for impl in pair if rep % 2 else pair[::-1]:
                await one(impl, burst, None)
            if not rep:
                for samples in burst.values():
                    samples.clear()
        self._paired_rows("create to ready, back to back", burst)

    def _paired_rows(self, scenario: str, samples: dict[str, list[float]]) -> None:
        """One row per implementation, each with its per-round ratios to raw (see
        `paired_ratios`); the samples of one index were taken in the same round."""
        for name, values in samples.items():
            stats = paired_ratios(values, samples[BASELINE]) if name != BASELINE else {}
            self.add(Row(scenario, name, "ms", values, note=paired_note(stats), extra=stats))

    async def s_exec(self) -> None:
        [box] = await self.open_boxes(IMAGE_BUSYBOX, 1)
        try:
            await self.interleaved("exec `true` round trip", self.reps(60, 30),
                                   lambda impl: impl.exec_true(box), warmup=3, paired=True)
        finally:
            await self.close_boxes([box])

    async def s_exec50(self) -> None:
        boxes = await self.open_boxes(IMAGE_BUSYBOX, 10)
        try:
            for label, targets in (("50 execs, 1 sandbox", boxes[:1]),
                                   ("50 execs, 10 sandboxes", boxes)):
                async def burst(impl: Impl, targets: list[Box] = targets) -> None:
                    async with anyio.create_task_group() as tg:
                        for i in range(50):
                            tg.start_soon(impl.exec_true, targets[i % len(targets)])
                await self.interleaved(label, self.reps(5, 2), burst)
        finally:
            await self.close_boxes(boxes)

    async def s_stream(self) -> None:
        [box] = await self.open_boxes(IMAGE_PYTHON, 1)
        sdk = self.impls[0]

        class Capture:
            name = "sandbox SDK (execute_command)"

            async def stream(self, box: Box, nbytes: int) -> int:
                n: int = await sdk.capture(box, nbytes)
                return n

        class Uncaptured:
            name = "sandbox SDK (max_output_bytes=0)"

            async def stream(self, box: Box, nbytes: int) -> int:
                n: int = await sdk.stream_uncaptured(box, nbytes)
                return n

        impls = [*self.impls[:1], Uncaptured(), Capture(), *self.impls[1:]]
        try:
            for mib in (20, 200):
                async def op(impl: Impl, nbytes: int = mib * MIB) -> None:
                    got = await impl.stream(box, nbytes)
                    assert got == nbytes, (impl.name, got)
                await self.interleaved(f"stdout {mib} MiB", self.reps(7, 2) if mib == 200
                                       else self.reps(9, 3), op, unit="MiB/s", impls=impls,
                                       rate_mib=mib)
        finally:
            await self.close_boxes([box])

    async def s_files(self) -> None:
        # Root for all four: the baselines' root (no capabilities) cannot write into the
        # SDK's default user's /workspace.
        [box] = await self.open_boxes(IMAGE_PYTHON, 1, root=True)
        names = {impl.name: f"i{n}" for n, impl in enumerate(self.impls)}
        try:
            for label, size, reps in (("1 MiB", MIB, self.reps(15, 5)),
                                      ("100 MiB", 100 * MIB, self.reps(5, 2))):
                data = os.urandom(size)

                def path(impl: Impl, label: str = label) -> str:
                    return f"/workspace/{names[impl.name]}-{label.replace(' ', '')}"

                async def write(impl: Impl, data: bytes = data) -> None:
                    await impl.write(box, path(impl), data)

                async def read(impl: Impl, data: bytes = data) -> None:
                    got = await impl.read(box, path(impl))
                    assert got == data, (impl.name, len(got))

                await self.interleaved(f"write_file {label}", reps, write)
                await self.interleaved(f"read_file {label}", reps, read)
            with tempfile.TemporaryDirectory() as tmp:
                tree = make_small_tree(Path(tmp) / "tree")
                counter = iter(range(10**6))

                async def put(impl: Impl) -> None:
                    dest = f"/workspace/{names[impl.name]}-tree{next(counter)}"
                    await impl.put_tree(box, tree, dest)

                await self.interleaved("copy in 1,000 files (512 B)", self.reps(7, 3), put)
                check = await box.sb.execute_command(
                    "find /workspace -type f -path '*-tree*' | wc -l")
                runs = self.reps(7, 3) + 1
                assert int(check.stdout) == 1000 * runs * len(self.impls), check.stdout
        finally:
            await self.close_boxes([box])

    async def s_copyout(self) -> None:
        """copy_files("sandbox:/dir", host_dir) of 1,000 small files: one archive out of the
        sandbox, unpacked on the host (each run into a fresh, existing host directory).

        The host side is a tmpfs (/dev/shm) where there is one: creating 1,000 files on a
        shared disk varied up to 3x between runs here and drowned the clients' differences."""
        [box] = await self.open_boxes(IMAGE_PYTHON, 1)
        names = {impl.name: f"i{n}" for n, impl in enumerate(self.impls)}
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        try:
            with tempfile.TemporaryDirectory(dir=shm) as tmp:
                tree = make_small_tree(Path(tmp) / "tree")
                src = "/workspace/out-tree"
                await box.sb.copy_files(str(tree), f"sandbox:{src}")
                check = await box.sb.execute_command(f"find {src} -type f | wc -l")
                assert int(check.stdout) == 1000, check.stdout
                out = Path(tmp) / "out"
                counter = iter(range(10**6))

                async def get(impl: Impl) -> None:
                    dest = out / f"{names[impl.name]}-{next(counter)}"
                    dest.mkdir(parents=True)
                    await impl.get_tree(box, src, dest)

                await self.interleaved("copy out 1,000 files (512 B)", self.reps(7, 3), get)
                runs = self.reps(7, 3) + 1
                for impl in self.impls:
                    got = list(out.glob(f"{names[impl.name]}-*/out-tree/d*/f*.txt"))
                    assert len(got) == 1000 * runs, (impl.name, len(got))
                    assert all(p.stat().st_size == 512 for p in got), impl.name
        finally:
            await self.close_boxes([box])

    async def s_usage(self) -> None:
        [box] = await self.open_boxes(IMAGE_BUSYBOX, 1)
        try:
            with anyio.move_on_after(15):
                # The first published sample; the SDK offers no public event to wait on.
                while not box.sb.usage_history():  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            if not box.sb.usage_history():
                raise RuntimeError("no stats sample within 15 s: the engine's stats are "
                                   "stalled (a paused container on the engine does that)")
            for impl in self.impls:
                calls = 5 if impl.name == "docker CLI" else 20
                samples = [await self.timed(lambda impl=impl: impl.usage(box)) * 1000
                           for _ in range(calls)]
                note = f"mean of {calls} calls"
                self.add(Row("resource usage (1 call)", impl.name, "ms", samples,
                             headline="mean", note=note))
        finally:
            await self.close_boxes([box])

    async def s_rss(self) -> None:
        n = 50
        for impl, key in ((self.impls[0], "sdk"), (self.impls[1], "aiodocker"),
                          (self.impls[2], "docker-py")):
            proc = await anyio.run_process(
                [sys.executable, str(HERE / "rss.py"), key, str(n), json.dumps(self.spec)],
                check=True,
            )
            data = json.loads(proc.stdout)
            row = Row(f"peak RSS, {n} sandboxes open", impl.name, "MiB", [data["peak_mib"]],
                      note=f"{data['baseline_mib']:.0f} MiB after imports",
                      extra=data)
            self.add(row)

    async def s_rssout(self) -> None:
        """Client memory for 100 MB of binary stdout plus 100 MB of stderr under the default
        16 MiB per-stream cap (SDK only: the baselines have no cap to compare)."""
        n = 100_000_000
        proc = await anyio.run_process(
            [sys.executable, str(HERE / "rss.py"), "sdk-output", str(n)], check=True)
        data = json.loads(proc.stdout)
        self.add(Row("peak RSS, 100 MB stdout + 100 MB stderr", self.impls[0].name, "MiB",
                     [data["peak_mib"]], extra=data,
                     note=f"{data['baseline_mib']:.0f} MiB after imports; text unread. "
                          f"Reading stdout: {data['after_reading_stdout_mib']:.0f} MiB, "
                          f"then combined: {data['after_reading_combined_mib']:.0f} MiB"))

    async def s_rsshostile(self) -> None:
        """Memory against hostile sandbox content (SDK only, issue 26): the MCP server's
        read_file, twice on a sparse 1000 MiB file; and an MCP server of the config printing
        16 MB lines with no client attached (this process's peak)."""
        # The MCP server needs mcp 2, which the project's venv has (the bench venv holds
        # openai-agents' mcp); the noisy server needs no mcp package.
        project = HERE.parent / ".venv" / "bin" / "python"
        env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
        cases = (
            ("mcp-read", 1000, str(project) if project.exists() else sys.executable,
             "peak RSS, MCP read_file x2, sparse 1000 MiB file"),
            ("mcp-noisy", 64, sys.executable,
             "peak RSS, MCP server prints 64 x 16 MB lines, no client"),
        )
        for key, n, python, title in cases:
            proc = await anyio.run_process([python, str(HERE / "rss.py"), key, str(n)],
                                           check=True, env=env, cwd=HERE.parent)
            data = json.loads(proc.stdout)
            self.add(Row(title, self.impls[0].name, "MiB", [data["peak_mib"]], extra=data,
                         note=f"{data['baseline_mib']:.0f} MiB before"))

    async def s_pool(self) -> None:
        """A warm pool against fresh sandboxes (SDK only), with the same config throughout.

        Acquire: from a pool with a sandbox ready (the wait for the refill is not timed)
        against `async with Sandbox(...)`'s create-to-ready. Cycles: N times in a row, take a
        sandbox, run `true`, give it back: from a pool (a fresh sandbox per user, made in the
        background; and one sandbox reset between users, max_uses=N) and from scratch.
        """
        config = SandboxConfig(image=IMAGE_BUSYBOX)
        reps = self.reps(30, 8)
        fresh: list[float] = []
        rep = 0

        async def fresh_create() -> None:  # alternating with the pool's acquires
            nonlocal rep
            sb = Sandbox(config)
            t0 = time.perf_counter()
            await sb.__aenter__()
            t1 = time.perf_counter()
            await sb.cleanup()
            if rep:  # the first round warms caches
                fresh.append((t1 - t0) * 1000)
            rep += 1

        async with SandboxPool(config, min_ready=2, max_size=4) as pool:
            warm = (await warm_acquires(pool, reps, between=fresh_create)).acquire
            stats = pool.stats()
        self.add(Row("acquire: warm pool", "sandbox SDK (SandboxPool)", "ms", warm,
                     note=f"pool's own p50 {stats.acquire_p50 * 1000:.1f} ms"))
        self.add(Row("acquire: fresh create", "sandbox SDK (Sandbox)", "ms", fresh))

        # A quick run's 50 (30 before) leave 40 after the ready stock and the first creates'
        # warm-up, which a row of 30 was mostly made of.
        cycles = self.reps(100, 50)
        settle = 10  # cycles before the steady rate: the stock of min_ready is used up

        async def fresh_cycle() -> None:
            async with Sandbox(config) as sb:
                await sb.execute_command(["true"])

        async def run_cycles(pool: SandboxPool | None) -> list[float]:
            """Each cycle's seconds, acquire to release."""
            times: list[float] = []
            for _ in range(cycles):
                t0 = time.perf_counter()
                if pool is None:
                    await fresh_cycle()
                else:
                    async with pool.acquire() as sb:
                        await sb.execute_command(["true"])
                times.append(time.perf_counter() - t0)
            return times

        def steady(times: list[float]) -> dict[str, Any]:
            """Seconds per 100 cycles after the first `settle`, with the standard error of
            that mean (cycles follow each other, so it understates the spread a little)."""
            rest = times[settle:]
            sd = statistics.stdev(rest) if len(rest) > 1 else 0.0
            return {"steady_per_100": 100 * statistics.fmean(rest),
                    "steady_se_per_100": 100 * sd / len(rest) ** 0.5,
                    "steady_cycles": len(rest), "cycle_seconds": times}

        results: dict[str, list[float]] = {}
        results["fresh"] = await run_cycles(None)
        for label, kwargs in (("pool, max_uses=1", {"min_ready": 4, "max_size": 8}),
                              (f"pool, max_uses={cycles}",
                               {"min_ready": 2, "max_size": 3, "max_uses": cycles})):
            async with SandboxPool(config, **kwargs) as pool:  # type: ignore[arg-type]
                with anyio.fail_after(120):
                    while pool.stats().ready < kwargs["min_ready"]:  # noqa: ASYNC110
                        await anyio.sleep(0.05)
                results[label] = await run_cycles(pool)
                reused = pool.stats().reused
            rate = steady(results[label])
            self.add(Row(f"{cycles} cycles acquire/true/release", f"sandbox SDK ({label})",
                         "s", [sum(results[label])], extra=rate,
                         note=f"{sum(results['fresh']) / sum(results[label]):.1f}x faster than "
                              f"fresh; {reused} reused; after the first {settle}: "
                              f"{rate['steady_per_100']:.1f} ± {rate['steady_se_per_100']:.1f} s "
                              "per 100"))
        self.add(Row(f"{cycles} cycles acquire/true/release", "sandbox SDK (fresh Sandbox)",
                     "s", [sum(results["fresh"])], extra=steady(results["fresh"])))

    async def s_checkpoint(self) -> None:
        """Checkpoint a sandbox holding 100 MiB of new data, start one from it, fork 10."""
        config = SandboxConfig(image=IMAGE_PYTHON)
        reps = self.reps(3, 1)
        taken: list[float] = []
        started: list[float] = []
        forked: list[float] = []
        async with Sandbox(config) as sb:
            done = await sb.execute_command(
                "head -c 104857600 /dev/urandom > /workspace/big && sync")
            assert done.exit_code == 0, done
            for rep in range(reps):
                name = f"bench-{sb.id}-{rep}"
                t0 = time.perf_counter()
                point = await sb.checkpoint(name)
                taken.append((time.perf_counter() - t0) * 1000)
                try:
                    t0 = time.perf_counter()
                    async with Sandbox(point.config) as again:
                        started.append((time.perf_counter() - t0) * 1000)
                        size = await again.execute_command("wc -c < /workspace/big")
                        assert size.stdout.strip() == "104857600", size
                    t0 = time.perf_counter()
                    children = await sb.fork(10, name=f"{name}-fork")
                    forked.append((time.perf_counter() - t0) * 1000)
                    async with anyio.create_task_group() as tg:
                        for child in children:
                            tg.start_soon(child.cleanup)
                finally:
                    for gone in (name, f"{name}-fork"):
                        with contextlib.suppress(Exception):
                            await remove_checkpoint(gone)
        self.add(Row("checkpoint (100 MiB written)", "sandbox SDK", "ms", taken))
        self.add(Row("start from that checkpoint", "sandbox SDK", "ms", started))
        self.add(Row("fork x10 (100 MiB written)", "sandbox SDK", "ms", forked,
                     note="checkpoint + 10 sandboxes started"))

    async def s_session(self) -> None:
        """A persistent shell against an exec per command (scenario_session.py)."""
        from scenario_session import session_scenario

        await session_scenario(self)

    async def s_peers(self) -> None:
        """Create-to-first-command and a round trip beside llm-sandbox and openai-agents."""
        from scenario_session import peers_scenario

        await peers_scenario(self)

    async def s_kube(self) -> None:
        """Kubernetes (the local cluster), Docker and process side by side: bench/kube_rows.py."""
        await kube_rows.run(self, Row)

    async def s_execcpu(self) -> None:
        """Client CPU per exec against raw aiodocker (scenario_create.py)."""
        from scenario_create import exec_cpu

        await exec_cpu(self)

    async def s_copy(self) -> None:
        """copy_files in of 1,000 files as the sandbox user (scenario_create.py)."""
        from scenario_create import copy_as_user

        await copy_as_user(self)

    async def s_cleanup(self) -> None:
        """Remove right after a command (scenario_create.py)."""
        from scenario_create import cleanup_after_command

        await cleanup_after_command(self)

    async def s_batch(self) -> None:
        """100 sandboxes opened in batches of 10 (scenario_create.py)."""
        from scenario_create import batches

        await batches(self)

    # -- report -------------------------------------------------------------------------------

    # -- scale (bench/scale.py): what idle sandboxes cost -----------------------------------

    async def s_idleproc(self) -> None:
        import scale
        for row in await scale.idle_process(self.reps(300, 100)):
            self.add(Row(**row))

    async def s_idledocker(self) -> None:
        import scale
        raw = next(i for i in self.impls if i.name == BASELINE)
        for row in await scale.idle_docker(self.reps(100, 30), raw):
            self.add(Row(**row))

    async def s_poolknee(self) -> None:
        import scale
        for row in await scale.pool_knee(self.reps(60, 20), (1, 2, 3, 4, 6, 8)):
            self.add(Row(**row))

    async def s_warmpools(self) -> None:
        import scale
        for row in await scale.warm_pools(self.reps(30, 8)):
            self.add(Row(**row))

    def ratios(self) -> None:
        base = {r.scenario: r.value for r in self.rows if r.impl == BASELINE}
        for row in self.rows:
            if base.get(row.scenario):
                row.ratio = row.value / base[row.scenario]

    def table(self) -> str:
        lines = [
            "| scenario | implementation | median | p95 | unit | ÷ aiodocker |",
            "|---|---|--:|--:|---|--:|",
        ]
        for r in self.rows:
            def fmt(v: float) -> str:
                return f"{v:.3f}" if v < 1 else f"{v:,.2f}" if v < 10 else f"{v:,.0f}"

            ratio = f"{r.ratio:.2f}" if r.ratio is not None else "-"
            if "paired_ratio" in r.extra:  # the median of per-round ratios, and its 95 % CI
                lo, hi = r.extra["paired_ci95"]
                ratio = f"{r.extra['paired_ratio']:.2f} ({lo:.2f}-{hi:.2f})*"
            med = fmt(r.value) + (" (mean)" if r.headline == "mean" else "")
            unit = r.unit + (" ↑" if r.higher_is_better else "")
            lines.append(f"| {r.scenario} | {r.impl} | {med} | {fmt(r.p95)} | {unit} | {ratio} |")
        if any("paired_ratio" in r.extra for r in self.rows):
            lines.append("\n*: the median of per-round ratios to raw aiodocker (runs made side "
                         "by side), with its bootstrap 95 % interval")
        return "\n".join(lines)


def sweep() -> None:
    """Remove containers a baseline left behind (the SDK's own are removed by the SDK)."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={BENCH_LABEL}"],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {SCENARIOS}")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()] or list(SCENARIOS)
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; choose from {SCENARIOS}")
    sweep()
    bench = Bench(args.quick)
    failures: dict[str, str] = {}
    started = time.monotonic()
    try:
        await bench.derive_spec()
        for name in chosen:
            print(f"{name}:", flush=True)
            try:
                await getattr(bench, f"s_{name}")()
            except Exception as exc:  # one broken scenario must not lose the others
                failures[name] = f"{type(exc).__name__}: {exc}"
                print(f"  {name} FAILED: {failures[name]}", flush=True)
    finally:
        for impl in bench.impls:
            await impl.close()
        sweep()
    bench.ratios()
    elapsed = time.monotonic() - started
    print()
    print(bench.table())
    print(f"\n{len(bench.rows)} rows in {elapsed:.0f} s; ratios are implementation ÷ raw "
          "aiodocker (↑: higher is better, otherwise lower is better)")
    version = (await anyio.run_process(["docker", "version", "--format",
                                        "{{.Server.Version}}"])).stdout.decode().strip()
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": args.quick, "scenarios": chosen, "seconds": round(elapsed, 1),
        "python": platform.python_version(), "engine": version, "cpus": os.cpu_count(),
        "rows": [asdict(r) for r in bench.rows], "failures": failures,
        "table": bench.table(),
    }, indent=2) + "\n")
    print(f"results written to {RESULTS.relative_to(HERE.parent)}")
    if failures:
        raise SystemExit(f"{len(failures)} scenario(s) failed: {', '.join(failures)}")


if __name__ == "__main__":
    asyncio.run(main())
