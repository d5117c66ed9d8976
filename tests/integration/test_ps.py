"""`sandbox ps --json` and `sandbox top --json` checked against sandboxes this test runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, Sandbox, SandboxConfig
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

MiB = 1024 * 1024


async def cli(*args: str) -> Any:
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "-m", "sandbox", *args, "--owner", str(os.getpid())],
            check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.returncode == 0, proc
    return proc.stdout.decode()


async def test_ps_json_lists_this_process_sandboxes() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as a, \
            Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as b:
        rows = {r["name"]: r for r in json.loads(await cli("ps", "--json"))}
        for sb, image in ((a, IMAGE_BUSYBOX), (b, IMAGE_PYTHON)):
            info = await sb.get_info()
            row = rows.pop(info.name)
            inspect = json.loads(docker_cli("inspect", sb.backend.container_id))[0]
            assert row["container_id"] == inspect["Id"] and row["id"] == sb.id
            assert row["image"] == image and row["state"] == inspect["State"]["Status"]
            assert row["owner"] == "alive" and row["owner_pid"] == os.getpid()
            assert 0 <= row["age_seconds"] < 600
        assert rows == {}  # nothing else of this process's
        await b.cleanup()
        assert [r["name"] for r in json.loads(await cli("ps", "--json"))] == \
            [(await a.get_info()).name]


async def test_top_json_shows_memory_and_pids_as_they_are() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as big, \
            Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as small:
        # 48 MiB kept in tmpfs (charged to the sandbox's memory) and five sleepers.
        filled = await big.execute_command(
            "head -c 50331648 /dev/zero > /dev/shm/fill && "
            "for i in 1 2 3 4 5; do sleep 300 >/dev/null 2>&1 & done")
        assert filled.exit_code == 0, filled
        lines = (await cli("top", "--json", "-n", "2")).splitlines()
        assert len(lines) == 2
        frame = {r["name"]: r for r in json.loads(lines[-1])["sandboxes"]}
        assert set(frame) == {(await big.get_info()).name, (await small.get_info()).name}
        b, s = frame[(await big.get_info()).name], frame[(await small.get_info()).name]
        assert b["memory_bytes"] >= 48 * MiB > s["memory_bytes"] > 0
        assert b["pids"] >= 5 + 1 > s["pids"] >= 1
        assert b["cpu_percent"] >= 0 and b["owner"] == "alive"
