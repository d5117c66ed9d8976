"""Run 10 tasks in 10 sandboxes at once and print a summary table.

Shows that sandboxes are independent values you can open concurrently (here with an anyio task
group), each with its own limits, and that a failing or timed-out task is a result to report,
not an exception that tears the others down.

    python examples/parallel.py
"""

from __future__ import annotations

import asyncio
import time

import anyio

from sandbox import IMAGE_BUSYBOX, Command, CommandResult, ResourceLimits, Sandbox, SandboxConfig

TASKS: list[tuple[str, str]] = [
    ("count", "seq 1 100000 | wc -l"),
    ("checksum", "head -c 10000000 /dev/zero | md5sum | cut -c1-12"),
    ("primes", "n=0; i=2; while [ $i -lt 400 ]; do j=2; p=1; while [ $((j*j)) -le $i ]; do "
               "[ $((i%j)) -eq 0 ] && p=0 && break; j=$((j+1)); done; n=$((n+p)); i=$((i+1)); "
               "done; echo $n primes"),
    ("hostname", "hostname"),
    ("whoami", "id -un"),
    ("disk", "df -h /workspace | tail -1 | awk '{print $2}'"),
    ("fails", "echo about to fail >&2; exit 3"),
    ("sleepy", "sleep 0.5; echo woke up"),
    ("too slow", "sleep 30"),
    ("files", "mkdir -p a/b && touch a/b/c && find a | wc -l"),
]


async def run_task(name: str, script: str, results: dict[str, tuple[CommandResult, float]]) \
        -> None:
    config = SandboxConfig(image=IMAGE_BUSYBOX,
                           resources=ResourceLimits(memory_limit=64 << 20, cpu_limit=0.5))
    started = time.monotonic()
    async with Sandbox(config) as sb:
        result = await sb.execute_command(Command.shell(script, timeout=2))
    results[name] = (result, time.monotonic() - started)


async def main() -> None:
    results: dict[str, tuple[CommandResult, float]] = {}
    started = time.monotonic()
    async with anyio.create_task_group() as tg:
        for name, script in TASKS:
            tg.start_soon(run_task, name, script, results)
    wall = time.monotonic() - started

    print(f"{'task':<10} {'exit':>4} {'status':<9} {'total s':>7}  output")
    for name, _ in TASKS:
        result, seconds = results[name]
        status = "timeout" if result.timed_out else ("ok" if result.success else "failed")
        output = (result.stdout or result.stderr).strip().splitlines()
        print(f"{name:<10} {result.exit_code:>4} {status:<9} {seconds:>7.2f}  "
              f"{output[0] if output else ''}")
    ok = sum(1 for r, _ in results.values() if r.success)
    print(f"{len(results)} tasks in 10 sandboxes, {ok} succeeded, wall time {wall:.1f} s")


if __name__ == "__main__":
    asyncio.run(main())
