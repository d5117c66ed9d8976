"""An evaluation run: 50 short tasks through a pool of 4 sandboxes, with the timing.

Each task gets a started sandbox from a `SandboxPool` in milliseconds, instead of paying a
container create and start itself. Here each sandbox serves many tasks (``max_uses``) and is
reset between them: the pool kills what a task left running and removes what it wrote, and
hands the sandbox on only when the engine's change list shows it as it was when new. The
secret each task writes proves it: no later task ever finds one. With ``--fresh`` (the pool's
default, ``max_uses=1``) every task gets a new sandbox instead, made in the background.

    python examples/eval_pool.py [--fresh]
"""

from __future__ import annotations

import asyncio
import sys
import time

import anyio

from sandbox import IMAGE_BUSYBOX, SandboxConfig, SandboxPool

TASKS = 50
POOL = 4


async def solve(pool: SandboxPool, n: int, answers: dict[int, tuple[bool, bool, float]]) -> None:
    """Task n: sum 1..n*100 in the sandbox and check it; also look for an earlier secret."""
    started = time.monotonic()
    async with pool.acquire() as sb:
        # One command: look for an earlier task's secret, leave our own, then do the work.
        result = await sb.execute_command(
            f"[ -e /workspace/secret ] && echo LEAKED; echo 'task {n}' > /workspace/secret; "
            f"seq 1 {n * 100} | awk '{{s += $1}} END {{print s}}'")
    lines = result.stdout.split()
    leaked = "LEAKED" in lines
    expected = n * 100 * (n * 100 + 1) // 2
    answers[n] = (lines[-1:] == [str(expected)], leaked, time.monotonic() - started)


async def main() -> None:
    # No stats sampling: these sandboxes live for a moment, and sampling costs the host.
    config = SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)
    answers: dict[int, tuple[bool, bool, float]] = {}
    max_uses = 1 if "--fresh" in sys.argv[1:] else TASKS
    async with SandboxPool(config, min_ready=POOL, max_size=POOL, max_uses=max_uses) as pool:
        with anyio.fail_after(50):
            while pool.stats().ready < POOL:  # noqa: ASYNC110 (warm-up; counts have no event)
                await anyio.sleep(0.05)
        print(f"pool warm: {POOL} sandboxes ready")
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for n in range(1, TASKS + 1):
                tg.start_soon(solve, pool, n, answers)
        wall = time.monotonic() - started
        stats = pool.stats()

    correct = sum(ok for ok, _, _ in answers.values())
    leaks = sum(leaked for _, leaked, _ in answers.values())
    slowest = max(seconds for _, _, seconds in answers.values())
    print(f"{TASKS} tasks through a pool of {POOL} in {wall:.2f} s "
          f"({TASKS / wall:.1f} tasks/s; slowest task {slowest:.2f} s, queueing included)")
    print(f"{'all' if correct == TASKS else 'only'} {correct} answers correct; "
          f"secrets seen by a later task: {leaks}")
    print(f"acquire p50 {stats.acquire_p50 * 1000:.1f} ms, p95 {stats.acquire_p95 * 1000:.1f} ms "
          f"(waiting for a free sandbox included); {stats.created} sandboxes created, "
          f"{stats.reused} tasks served by a reset sandbox, {stats.failed} failures")


if __name__ == "__main__":
    asyncio.run(main())
