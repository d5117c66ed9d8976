"""Peak RSS of a Python process holding N sandboxes open: ``rss.py IMPL N`` prints JSON.

``rss.py sdk-output N`` instead runs one command writing N bytes of random binary data to
stdout and N to stderr under the default output cap; ``peak_mib`` is the peak after it, before
its text is read (then decoded: the peaks after reading stdout and combined are given too).

``rss.py mcp-read N`` runs ``python -m sandbox mcp`` (stdio, the mcp package's client) and
calls its read_file twice on a sparse N MiB file with the default max_bytes: the server's peak.
``rss.py mcp-noisy N`` starts a sandbox whose config's MCP server prints N lines of 16 MB with
no client attached: this process's peak once the server has printed them (or stalled).

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


def vm_mib(pid: int | str, field: str) -> float:
    """VmHWM (peak) or VmRSS of a process, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


async def with_mcp_read(mib: int) -> dict[str, Any]:
    """The MCP server's memory for read_file twice on a sparse ``mib`` MiB file (hostile: the
    file costs the sandbox no disk)."""
    import os
    import tempfile
    import uuid

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from sandbox import SandboxConfig, to_json
    from sandbox._constants import LABEL_OWNER_PID

    mark = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "config.json")
        with open(config, "w") as f:  # noqa: ASYNC230 (before anything runs)
            f.write(to_json(SandboxConfig(image=IMAGE, labels={"bench.rss": mark})))
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "sandbox", "mcp", "--config", config],
                                       env={"PYTHONPATH": os.getcwd()})
        async with stdio_client(params, errlog=sys.stderr) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            found = await anyio.run_process(
                ["docker", "ps", "-q", "--filter", f"label=bench.rss={mark}"])
            owner = "{{index .Config.Labels \"" + LABEL_OWNER_PID + "\"}}"
            pid = (await anyio.run_process(
                ["docker", "inspect", "--format", owner, found.stdout.decode().split()[0]]
            )).stdout.decode().strip()
            made = await session.call_tool("run_command", {"command": f"truncate -s {mib}M big"})
            assert not made.is_error and made.structured_content["exit_code"] == 0, made
            base = vm_mib(pid, "VmHWM")
            shown = []
            for _ in range(2):
                got = await session.call_tool("read_file", {"path": "big"})
                assert not got.is_error, got
                shown.append(sum(len(c.text) for c in got.content))
            peak = vm_mib(pid, "VmHWM")
    return {"peak_mib": peak, "baseline_mib": base, "returned_chars": shown}


NOISY = ("i=0; while :; do head -c 16000000 /dev/zero | tr -c x a; echo; i=$((i+1)); "
         "echo $i > /tmp/lines; done")


async def with_mcp_noisy(lines: int) -> dict[str, Any]:
    """This process's memory while a config MCP server prints ``lines`` lines of 16 MB with no
    client attached; stops early if the server stalls (it is made to wait) for 20 s."""
    import shlex

    from sandbox import Sandbox, SandboxConfig, SandboxFileNotFound

    base = rss_mib()
    cfg = SandboxConfig(image=IMAGE, mcp_servers=[f"noisy=sh -c {shlex.quote(NOISY)}"])
    printed, since, last = 0, time.monotonic(), -1
    async with Sandbox(cfg) as sb:
        while printed < lines and time.monotonic() - since < 20:
            try:
                printed = int((await sb.read_file("/tmp/lines")).strip() or b"0")
            except SandboxFileNotFound:
                printed = 0
            if printed != last:
                since, last = time.monotonic(), printed
            await anyio.sleep(0.2)
        peak = rss_mib()
    return {"peak_mib": peak, "baseline_mib": base, "lines_printed": printed,
            "stalled": printed < lines}


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
    elif impl in ("mcp-read", "mcp-noisy"):
        data = await (with_mcp_read(n) if impl == "mcp-read" else with_mcp_noisy(n))
        print(json.dumps({**data, "seconds": time.monotonic() - t0}))
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
