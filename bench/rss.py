"""Peak RSS of a Python process holding N sandboxes open: ``rss.py IMPL N`` prints JSON.

``rss.py sdk-output N`` instead runs one command writing N bytes of random binary data to
stdout and N to stderr under the default output cap; ``peak_mib`` is the peak after it, before
its text is read (then decoded: the peaks after reading stdout and combined are given too).

Run by run.py in a fresh interpreter per implementation so the numbers do not mix.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio

IMAGE = "sandbox-busybox:latest"
HOLD_SECONDS = 3.0  # long enough for every sandbox's background sampler to deliver samples


def rss_mib() -> float:
    """Peak RSS of this process image (VmHWM; ru_maxrss would carry the parent's peak over)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


async def with_sdk(n: int) -> float:
    from sandbox import Sandbox, SandboxConfig

    base = rss_mib()
    boxes: list[Any] = []
    limiter = anyio.CapacityLimiter(10)

    async def open_one() -> None:
        async with limiter:
            sb = Sandbox(SandboxConfig(image=IMAGE))
            await sb.__aenter__()
            boxes.append(sb)

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(open_one)
        await anyio.sleep(HOLD_SECONDS)
    finally:
        async with anyio.create_task_group() as tg:
            for sb in boxes:
                tg.start_soon(sb.cleanup)
    return base


async def with_sdk_output(n: int) -> tuple[float, dict[str, float]]:
    """One command with N bytes of binary stdout and N of stderr; the cap bounds the memory.

    Returns the baseline and the peaks after the command and after reading its text (random
    bytes decode to about 4 bytes per byte: U+FFFD, and UCS-4 once any 4-byte sequence
    occurs)."""
    from sandbox import Sandbox, SandboxConfig

    base = rss_mib()
    script = f"head -c {n} /dev/urandom; head -c {n} /dev/urandom >&2"
    async with Sandbox(SandboxConfig(image=IMAGE)) as sb:
        result = await sb.execute_command(script)
        assert result.truncated and len(result.stdout_bytes) < n, "output cap not applied"
        peaks = {"after_command_mib": rss_mib()}
        assert result.stdout
        peaks["after_reading_stdout_mib"] = rss_mib()
        assert result.combined
        peaks["after_reading_combined_mib"] = rss_mib()
    return base, peaks


async def with_aiodocker(n: int, body: dict[str, Any]) -> float:
    import aiodocker

    base = rss_mib()
    containers: list[Any] = []
    limiter = anyio.CapacityLimiter(10)
    async with aiodocker.Docker() as docker:

        async def open_one() -> None:
            async with limiter:
                c = await docker.containers.create(body)
                containers.append(c)
                await c.start()

        try:
            async with anyio.create_task_group() as tg:
                for _ in range(n):
                    tg.start_soon(open_one)
            await anyio.sleep(HOLD_SECONDS)
        finally:
            async with anyio.create_task_group() as tg:
                for c in containers:
                    tg.start_soon(lambda c=c: c.delete(force=True, v=True))
    return base


async def with_dockerpy(n: int, kwargs: dict[str, Any], command: list[str]) -> float:
    import docker

    base = rss_mib()
    client = docker.DockerClient(base_url="unix:///var/run/docker.sock", max_pool_size=16)
    containers: list[Any] = []
    limiter = anyio.CapacityLimiter(10)

    def open_one() -> None:
        c = client.containers.create(IMAGE, command, **kwargs)
        containers.append(c)
        c.start()

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(lambda: anyio.to_thread.run_sync(open_one, limiter=limiter))
        await anyio.sleep(HOLD_SECONDS)
    finally:
        async with anyio.create_task_group() as tg:
            for c in containers:
                tg.start_soon(lambda c=c: anyio.to_thread.run_sync(
                    lambda: c.remove(force=True, v=True), limiter=limiter))
        client.close()
    return base


async def main() -> None:
    impl, n = sys.argv[1], int(sys.argv[2])
    spec = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
    t0 = time.monotonic()
    if impl == "sdk":
        base = await with_sdk(n)
    elif impl == "sdk-output":
        base, peaks = await with_sdk_output(n)
        print(json.dumps({"peak_mib": peaks["after_command_mib"], "baseline_mib": base,
                          **peaks, "seconds": time.monotonic() - t0}))
        return
    elif impl == "aiodocker":
        base = await with_aiodocker(n, spec["body"])
    elif impl == "docker-py":
        base = await with_dockerpy(n, spec["kwargs"], spec["command"])
    else:
        raise SystemExit(f"unknown implementation {impl!r}")
    print(json.dumps({"peak_mib": rss_mib(), "baseline_mib": base,
                      "seconds": time.monotonic() - t0}))


if __name__ == "__main__":
    anyio.run(main)
