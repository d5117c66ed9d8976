"""Shared pieces of the benchmark: the target containers, statistics and small helpers."""

from __future__ import annotations

import io
import math
import random
import statistics
import tarfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

#: The sandbox's keep-alive main process, reused by the baselines so every container is alike.
KEEPALIVE = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
#: Every container a baseline creates carries this label; run.py sweeps them at start and end.
BENCH_LABEL = "io.sandbox.bench"
MIB = 1 << 20


@dataclass
class Box:
    """A running sandbox every implementation uses: the SDK through ``sb``, the others by id."""

    sb: Any  # sandbox.Sandbox (kept loose so the baselines need not import the SDK)
    cid: str


def median(values: list[float]) -> float:
    return statistics.median(values)


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile (with few samples it is the maximum)."""
    ordered = sorted(values)
    return ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]


def paired_ratios(ours: list[float], raw: list[float]) -> dict[str, Any]:
    """Per-repetition ratios ``ours[i] / raw[i]`` of runs made side by side (same round), and
    how far their median can be trusted: quartiles and a bootstrap 95 % interval of the
    median (2,000 resamples, fixed seed, so one run's numbers are reproducible from its
    samples).

    A ratio per round cancels the drift both sides saw in that round (the shared engine's
    load moves both); the ratio of two medians does not, and with few rounds it moved by
    more than the targets' margins between runs.
    """
    ratios = [a / b for a, b in zip(ours, raw, strict=True) if b > 0]
    if len(ratios) < 2:
        return {}
    rng = random.Random(29)
    boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(2000))
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    return {"paired_ratio": statistics.median(ratios), "paired_q1": q1, "paired_q3": q3,
            "paired_ci95": [boot[49], boot[1949]], "pairs": len(ratios)}


def paired_note(stats: dict[str, Any]) -> str:
    """`paired_ratios` in a few words, for a row's note."""
    if not stats:
        return ""
    lo, hi = stats["paired_ci95"]
    return (f"median of {stats['pairs']} per-round ratios to raw {stats['paired_ratio']:.3f} "
            f"(quartiles {stats['paired_q1']:.3f}-{stats['paired_q3']:.3f}, 95 % CI of the "
            f"median {lo:.3f}-{hi:.3f})")


def tar_tree(src: Path, arcname: str) -> bytes:
    """Pack a host tree into an uncompressed tar, as docker cp and the SDK do."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(str(src), arcname=arcname, recursive=True)
    return buf.getvalue()


def tar_one(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def untar_one(archive: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r") as tf:
        member = tf.next()
        assert member is not None
        f = tf.extractfile(member)
        assert f is not None
        return f.read()


def untar_tree(archive: bytes, dest: Path) -> None:
    """Unpack a tar from the sandbox into the host directory ``dest``, as the SDK and docker cp
    do (the "tar" filter: nothing outside ``dest``, no setuid bits)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r|") as tf:
        tf.extractall(dest, filter="tar")


def make_small_tree(root: Path, count: int = 1000, size: int = 512) -> Path:
    """Write ``count`` files of ``size`` bytes in 10 sub-directories."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        d = root / f"d{i % 10}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_bytes(bytes([65 + i % 26]) * size)
    return root


@dataclass
class WarmAcquires:
    """What `warm_acquires` measured, in milliseconds, one sample per timed repetition."""

    acquire: list[float] = field(default_factory=list)
    #: Acquire to the command's result (empty without a command).
    first: list[float] = field(default_factory=list)


async def warm_acquires(pool: Any, reps: int, *, command: list[str] | None = None,
                        between: Callable[[], Awaitable[None]] | None = None,
                        patience: float = 120, poll: float = 0.01) -> WarmAcquires:
    """Time ``reps`` acquires from ``pool`` (a `SandboxPool`), each with a sandbox ready: the
    wait for the refill is not timed, nor is one first acquire that warms caches.

    With ``command``, each acquired sandbox runs it and `WarmAcquires.first` has acquire to
    its result. ``between`` runs after each release, untimed (run.py times a fresh create
    there, so the two alternate).
    """
    out = WarmAcquires()
    for rep in range(reps + 1):
        with anyio.fail_after(patience):
            while pool.stats().ready < 1:  # noqa: ASYNC110 (untimed: the refill)
                await anyio.sleep(poll)
        cm = pool.acquire()
        t0 = time.perf_counter()
        sb = await cm.__aenter__()
        t1 = time.perf_counter()
        try:
            if command is not None:
                await sb.execute_command(command)
            t2 = time.perf_counter()
        finally:
            await cm.__aexit__(None, None, None)
        if rep:  # the first warms caches
            out.acquire.append((t1 - t0) * 1000)
            if command is not None:
                out.first.append((t2 - t0) * 1000)
        if between is not None:
            await between()
    return out
