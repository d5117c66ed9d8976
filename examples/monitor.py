"""Watch CPU and memory live while a CPU-heavy and a memory-heavy command run.

Shows the background sampler: `on_sample` is called about once a second with a
`ResourceUsage`, whatever the sandbox is doing, and `usage_history()` keeps the samples for a
summary afterwards. Each `CommandResult` also carries the usage seen while it ran.

    python examples/monitor.py
"""

from __future__ import annotations

import asyncio
import time

import anyio

from sandbox import (
    IMAGE_PYTHON,
    Command,
    ResourceLimits,
    ResourceUsage,
    Sandbox,
    SandboxConfig,
)

MiB = 1 << 20
CPU_HOG = "import time\nt = time.time() + 3\nwhile time.time() < t: pass\nprint('cpu hog done')"
MEMORY_HOG = (
    "import time\nheld = []\n"
    "for i in range(12):\n"
    "    held.append(bytearray(16 << 20)); time.sleep(0.25)\n"
    "print('memory hog held', len(held) * 16, 'MiB')"
)


async def main() -> None:
    started = time.monotonic()

    def show(u: ResourceUsage) -> None:
        print(f"[{time.monotonic() - started:5.1f} s] cpu {u.cpu_usage:6.1f} %  "
              f"memory {u.memory_usage / MiB:7.1f} MiB ({u.memory_percent:4.1f} %)  "
              f"processes {u.process_count}", flush=True)

    config = SandboxConfig(image=IMAGE_PYTHON,
                           resources=ResourceLimits(memory_limit=512 * MiB, cpu_limit=1.0))
    async with Sandbox(config, on_sample=show) as sb:
        async def run(name: str, code: str) -> None:
            result = await sb.execute_command(Command(executable="python3", args=["-c", code],
                                                      timeout=20))
            print(f"{name}: {result.stdout.strip()} (exit {result.exit_code}, "
                  f"{result.duration.total_seconds():.1f} s)", flush=True)

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "cpu", CPU_HOG)
            tg.start_soon(run, "memory", MEMORY_HOG)
        await anyio.sleep(1.2)  # one more sample after both ended
        history = sb.usage_history()
        peak_cpu = max((u.cpu_usage for u in history), default=0.0)
        peak_mem = max((u.memory_peak for u in history), default=0)
        print(f"{len(history)} samples; peak cpu {peak_cpu:.0f} %, "
              f"peak memory {peak_mem / MiB:.0f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
