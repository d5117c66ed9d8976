"""Rows for the Docker hot paths of issue 29, the SDK beside raw aiodocker in one run.

- ``execcpu``: client CPU per exec `true` (this process's CPU time over blocks of execs,
  interleaved; the sandbox's own background work counts for both, as it is the same box).
- ``copy``: copy_files in of 1,000 small files as the sandbox's default user (raw aiodocker
  runs the same tar as the same uid:gid), one exec each for both.
- ``cleanup``: remove right after a command has run (the case the create row does not see).
- ``batch``: open 100 sandboxes in batches of 10 (each batch concurrent), then close them.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from common import Box, make_small_tree, tar_tree

from sandbox import IMAGE_BUSYBOX

#: The SDK's default user; raw aiodocker execs as it too where the rows compare like for like.
SANDBOX_USER = "1000:1000"


async def _raw_exec(docker: Any, cid: str, cmd: list[str], *, user: str = "",
                    stdin: bytes | None = None) -> int:
    """One exec through raw aiodocker: create, start attached, read to the end, inspect."""
    ex = await docker.containers.container(cid).exec(cmd, stdin=stdin is not None, user=user)
    async with ex.start(detach=False) as stream:
        if stdin is not None:
            for off in range(0, len(stdin), 1 << 20):
                await stream.write_in(stdin[off: off + (1 << 20)])
            stream._resp.connection.transport.write_eof()
        while await stream.read_out() is not None:
            pass
    while True:
        info = await ex.inspect()
        if not info["Running"] and info["ExitCode"] is not None:
            return int(info["ExitCode"])
        await anyio.sleep(0.01)


async def exec_cpu(bench: Any) -> None:
    from run import Row

    sdk, raw = bench.impls[0], bench.impls[1]
    [box] = await bench.open_boxes(IMAGE_BUSYBOX, 1)
    per_block = 20
    cpu: dict[str, list[float]] = {sdk.name: [], raw.name: []}
    try:
        for impl in (sdk, raw):
            for _ in range(3):
                await impl.exec_true(box)
        for rep in range(bench.reps(10, 4)):
            for impl in ((sdk, raw) if rep % 2 == 0 else (raw, sdk)):
                c0 = time.process_time()
                for _ in range(per_block):
                    await impl.exec_true(box)
                cpu[impl.name].append((time.process_time() - c0) * 1000 / per_block)
    finally:
        await bench.close_boxes([box])
    extra = sorted(a - b for a, b in zip(cpu[sdk.name], cpu[raw.name], strict=True))
    for impl in (sdk, raw):
        note = f"SDK - raw per block: median {extra[len(extra) // 2]:+.2f} ms" \
            if impl is sdk else ""
        bench.add(Row("exec `true` client CPU", impl.name, "ms CPU", cpu[impl.name],
                      note=note))


async def copy_as_user(bench: Any) -> None:
    sdk = bench.impls[0]
    docker = bench.impls[1].docker
    [box] = await bench.open_boxes(IMAGE_BUSYBOX, 1)
    counter = iter(range(10**6))

    class Raw:
        name = "aiodocker"

        async def put_tree(self, box: Box, src: Path, dest: str) -> None:
            parent, name = dest.rsplit("/", 1)
            archive = await anyio.to_thread.run_sync(tar_tree, src, name)
            code = await _raw_exec(docker, box.cid, [
                "/bin/sh", "-c", 'mkdir -p "$1" && tar -x -f - -C "$1"', "t", parent],
                user=SANDBOX_USER, stdin=archive)
            assert code == 0

    try:
        with tempfile.TemporaryDirectory() as tmp:
            tree = make_small_tree(Path(tmp) / "tree")

            async def put(impl: Any) -> None:
                await impl.put_tree(box, tree, f"/workspace/t{next(counter)}")

            await bench.interleaved("copy in 1,000 files, sandbox user", bench.reps(9, 3),
                                    put, impls=[sdk, Raw()])
            check = await box.sb.execute_command("find /workspace -type f | wc -l")
            assert int(check.stdout) == 1000 * next(counter), check.stdout
    finally:
        await bench.close_boxes([box])


async def cleanup_after_command(bench: Any) -> None:
    sdk, raw = bench.impls[0], bench.impls[1]
    gone: dict[str, list[float]] = {sdk.name: [], raw.name: []}
    for rep in range(bench.reps(30, 16) + 1):  # the first round warms caches
        took: dict[str, float] = {}
        for impl in ((sdk, raw) if rep % 2 == 0 else (raw, sdk)):
            handle = await impl.create(IMAGE_BUSYBOX)
            cid = handle.backend.container_id if impl is sdk else handle.id
            sb = handle if impl is sdk else None
            counted = bool(rep)
            try:
                await impl.exec_true(Box(sb, cid))
            except AssertionError:  # another bench run's sweep took the raw container
                print(f"  {impl.name}: the command failed; round {rep} not counted")
                counted = False
            t0 = time.perf_counter()
            await impl.remove(handle)
            if counted:
                took[impl.name] = (time.perf_counter() - t0) * 1000
        if len(took) == 2:  # both sides or neither: the per-round ratios stay paired
            for name, ms in took.items():
                gone[name].append(ms)
    bench._paired_rows("cleanup right after a command", gone)


async def batches(bench: Any) -> None:
    """100 sandboxes opened 10 at a time (each batch concurrent), the SDK and raw in turn.

    Each implementation runs twice, in the order SDK, raw, raw, SDK, quick run or not: run
    once each with the SDK always first, three quick runs in a row read 1.20, 1.08, 1.07x,
    and a full run's four read 9.6, 10.2, 7.3, 8.1 s in that order (the first runs slow
    whichever goes there).
    """
    from run import Row

    sdk, raw = bench.impls[0], bench.impls[1]
    total, size = 100, 10
    order = (sdk, raw, raw, sdk)
    times: dict[str, list[float]] = {}
    notes: dict[str, list[str]] = {}
    for impl in order:
        handles: list[Any] = []
        failed: list[str] = []  # (another bench run's sweep removes raw containers)

        async def one(impl: Any = impl, handles: list[Any] = handles,
                      failed: list[str] = failed) -> None:
            try:
                handles.append(await impl.create(IMAGE_BUSYBOX))
            except Exception as exc:
                failed.append(f"{type(exc).__name__}: {exc}"[:200])

        async def drop(impl: Any = impl, handle: Any = None) -> None:
            with contextlib.suppress(Exception):
                await impl.remove(handle)

        t0 = time.perf_counter()
        try:
            for _ in range(total // size):
                async with anyio.create_task_group() as tg:
                    for _ in range(size):
                        tg.start_soon(one)
            opened = time.perf_counter() - t0
        finally:
            t1 = time.perf_counter()
            for start in range(0, len(handles), size):
                async with anyio.create_task_group() as tg:
                    for handle in handles[start: start + size]:
                        tg.start_soon(drop, impl, handle)
            closed = time.perf_counter() - t1
        times.setdefault(impl.name, []).append(opened)
        notes.setdefault(impl.name, []).append(
            f"closed in {closed:.1f} s" + (f"; {len(failed)} creates failed, first: "
                                           f"{failed[0]}" if failed else ""))
    for impl in (sdk, raw):
        runs = ", ".join(f"{t:.1f}" for t in times[impl.name])
        bench.add(Row(f"{total} sandboxes opened in batches of {size}", impl.name, "s",
                      times[impl.name], headline="mean",
                      note="; ".join(notes[impl.name]) + f" (runs: {runs} s)"))


__all__ = ["batches", "cleanup_after_command", "copy_as_user", "exec_cpu"]
