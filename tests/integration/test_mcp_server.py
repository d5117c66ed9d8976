"""`python -m sandbox mcp` driven by the mcp package's own stdio client, on the real engine."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, SandboxConfig, gc, to_json
from sandbox._constants import LABEL_OWNER_PID
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def labelled(mark: str) -> list[dict[str, Any]]:
    """The containers carrying this test's label, as `docker inspect` shows them."""
    ids = docker_cli("ps", "-aq", "--filter", f"label=test.mcp={mark}").split()
    return json.loads(docker_cli("inspect", *ids)) if ids else []


@asynccontextmanager
async def server(tmp_path: Path, *extra: str,
                 image: str = IMAGE_BUSYBOX) -> AsyncIterator[tuple[ClientSession, str]]:
    """The server on stdio, its sandbox labelled with a fresh mark; yields (session, mark)."""
    mark = uuid.uuid4().hex
    config = tmp_path / "config.json"
    config.write_text(to_json(SandboxConfig(image=image, labels={"test.mcp": mark})))
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "sandbox", "mcp", "--config", str(config), *extra],
                                   env={"PYTHONPATH": os.getcwd()})
    with open(tmp_path / "server.err", "w") as errlog:  # noqa: ASYNC230
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            with anyio.fail_after(60):
                await session.initialize()
            yield session, mark


def wait_dead(pid: int, within: float = 60) -> None:
    """Until ``pid`` is gone or a zombie (its parent, the client, reaps it later)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return
        except FileNotFoundError:
            return
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} still runs after {within:g} s")


def text(result: Any) -> str:
    assert not result.is_error, result
    return "".join(c.text for c in result.content)


def structured(result: Any) -> Any:
    assert not result.is_error, result
    return result.structured_content


async def test_tools_run_commands_and_move_files(tmp_path: Path) -> None:
    async with server(tmp_path, "--memory", "256m") as (session, mark):
        tools = {t.name for t in (await session.list_tools()).tools}
        assert tools == {"run_command", "read_file", "write_file", "list_files",
                         "resource_usage", "session_run", "session_poll", "session_write",
                         "session_kill"}
        [container] = labelled(mark)
        assert container["State"]["Running"]
        assert container["HostConfig"]["Memory"] == 256 * 1024 * 1024

        ran = structured(await session.call_tool(
            "run_command", {"command": "echo out; echo err >&2; exit 3"}))
        assert (ran["exit_code"], ran["stdout"], ran["stderr"]) == (3, "out\n", "err\n")
        assert ran["timed_out"] is False

        with anyio.fail_after(30):
            slow = structured(await session.call_tool(
                "run_command", {"command": "sleep 60", "timeout": 1}))
        assert slow["timed_out"] is True

        assert "wrote 6 bytes" in text(await session.call_tool(
            "write_file", {"path": "notes/a.txt", "content": "hello\n"}))
        assert text(await session.call_tool("read_file", {"path": "notes/a.txt"})) == "hello\n"
        listing = structured(await session.call_tool("list_files", {"path": "notes"}))
        assert [(e["name"], e["size"]) for e in listing["result"]] == [("a.txt", 6)]
        # What the tool wrote is really in the container.
        assert docker_cli("exec", container["Id"], "cat", "/workspace/notes/a.txt") == "hello\n"

        usage = structured(await session.call_tool("resource_usage", {}))
        assert usage["memory_usage"] > 0 and usage["process_count"] >= 1

        missing = await session.call_tool("read_file", {"path": "/nope"})
        assert missing.is_error and "/nope" in "".join(c.text for c in missing.content)
    # The client went away (stdin closed): the server removed the sandbox before exiting.
    assert labelled(mark) == []


def vm_kib(pid: int, field: str) -> int:
    """A VmHWM (peak) or VmRSS line of /proc/<pid>/status, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


async def test_read_file_on_a_huge_sparse_file_keeps_the_server_small(tmp_path: Path) -> None:
    """Issue 26: read_file read the whole file (up to 1 GiB) to show max_bytes of it; two
    calls on a sparse 1000 MiB file took the server from 83 MB to over 2 GB."""
    async with server(tmp_path) as (session, mark):
        [container] = labelled(mark)
        owner = int(container["Config"]["Labels"][LABEL_OWNER_PID])
        made = structured(await session.call_tool(
            "run_command", {"command": "printf 'top\\n' > big; truncate -s 1000M big"}))
        assert made["exit_code"] == 0, made
        before = vm_kib(owner, "VmHWM")
        with anyio.fail_after(120):
            for _ in range(2):
                shown = text(await session.call_tool("read_file", {"path": "big"}))
                assert shown.startswith("top\n") and len(shown) < (1 << 20) + 100
                assert shown.endswith(f"[... {1000 * (1 << 20) - (1 << 20)} more bytes not "
                                      "shown]")
            small = text(await session.call_tool("read_file", {"path": "big", "max_bytes": 3}))
            assert small == "top\n[... 1048575997 more bytes not shown]"
        grown_mib = (vm_kib(owner, "VmHWM") - before) / 1024
        assert grown_mib < 200, f"the server's peak RSS grew by {grown_mib:.0f} MiB"
        too_much = await session.call_tool("read_file", {"path": "big", "max_bytes": 1 << 30})
        assert too_much.is_error and "max_bytes" in too_much.content[0].text


def ps(container: dict[str, Any]) -> str:
    """The container's process list, as `docker top` shows it (not through the SDK)."""
    return docker_cli("top", container["Id"])


async def test_session_tools_keep_state_and_come_back_to_jobs(tmp_path: Path) -> None:
    # bash: a started command runs in the shell itself (lastpipe); under a POSIX sh its cd
    # and export would be lost (README, Sessions).
    async with server(tmp_path, image=IMAGE_PYTHON) as (session, mark):
        [container] = labelled(mark)
        with anyio.fail_after(60):
            ran = structured(await session.call_tool("session_run", {"command": "cd /tmp"}))
            assert (ran["status"], ran["exit_code"]) == ("exited", 0)
            ran = structured(await session.call_tool(
                "session_run", {"command": "export GREETING=hi; pwd; echo $GREETING"}))
            assert (ran["exit_code"], ran["stdout"], ran["cwd"]) == (0, "/tmp\nhi\n", "/tmp")

            # Not done within yield_after: a job id and the output so far, then its end.
            ran = structured(await session.call_tool(
                "session_run", {"command": "echo early; sleep 2; echo done",
                                "yield_after": 0.5}))
            assert ran["status"] == "running" and ran["output"] == "early\n"
            job = ran["job_id"]
            refused = await session.call_tool("session_run", {"command": "true"})
            assert refused.is_error and job in refused.content[0].text
            polled = structured(await session.call_tool(
                "session_poll", {"job_id": job, "yield_after": 30}))
            assert (polled["status"], polled["exit_code"]) == ("exited", 0)
            assert polled["stdout"] == "early\ndone\n"
            gone = await session.call_tool("session_poll", {"job_id": job})
            assert gone.is_error and "no running session job" in gone.content[0].text

            # Input to a job waiting for it.
            ran = structured(await session.call_tool(
                "session_run", {"command": "read line; echo got $line", "yield_after": 0.2}))
            assert ran["status"] == "running"
            assert "wrote 4 bytes" in text(await session.call_tool(
                "session_write", {"job_id": ran["job_id"], "text": "abc\n"}))
            polled = structured(await session.call_tool(
                "session_poll", {"job_id": ran["job_id"], "yield_after": 30}))
            assert (polled["exit_code"], polled["stdout"]) == (0, "got abc\n")

            # A killed job ends, with what it started, and the session lives on.
            ran = structured(await session.call_tool(
                "session_run", {"command": "sleep 100", "yield_after": 0.2}))
            assert ran["status"] == "running" and "sleep 100" in ps(container)
            killed = structured(await session.call_tool("session_kill",
                                                        {"job_id": ran["job_id"]}))
            assert killed["status"] == "exited" and killed["exit_code"] != 0
            assert "sleep 100" not in ps(container)
            ran = structured(await session.call_tool("session_run", {"command": "pwd"}))
            assert ran["stdout"] == "/tmp\n"

            # Two at once: one job, one refusal naming it (not a call stuck behind the job).
            calls: list[Any] = []

            async def call() -> None:
                calls.append(await session.call_tool(
                    "session_run", {"command": "sleep 100", "yield_after": 1}))

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                tg.start_soon(call)
            [job] = [structured(c)["job_id"] for c in calls if not c.is_error]
            [refused] = [c for c in calls if c.is_error]
            assert job in refused.content[0].text
            await session.call_tool("session_kill", {"job_id": job})

            # Output given to the model is bounded, keeping its head and tail.
            ran = structured(await session.call_tool(
                "session_run", {"command": "echo first; seq 1 200000; echo last"}))
            assert len(ran["stdout"]) < 20_000 and "omitted" in ran["stdout"]
            assert ran["stdout"].startswith("first\n") and ran["stdout"].endswith("last\n")

            bad = await session.call_tool("session_run", {"command": "true",
                                                          "yield_after": -1})
            assert bad.is_error and "yield_after" in bad.content[0].text

            # A job still running when the client goes away does not keep the server.
            ran = structured(await session.call_tool(
                "session_run", {"command": "sleep 100", "yield_after": 0}))
            assert ran["status"] == "running"
            started = time.monotonic()
    assert time.monotonic() - started < 60
    assert labelled(mark) == []


async def test_a_killed_server_leaves_a_sandbox_gc_finds(tmp_path: Path) -> None:
    async with server(tmp_path) as (_session, mark):
        [container] = labelled(mark)
        owner = int(container["Config"]["Labels"][LABEL_OWNER_PID])
        os.kill(owner, signal.SIGKILL)
        await anyio.to_thread.run_sync(wait_dead, owner)
    try:
        assert [c["Id"] for c in labelled(mark)] == [container["Id"]]
        report = await gc(dry_run=True)
        assert container["Id"] in [item.id for item in report.removed]
    finally:
        docker_cli("rm", "-f", container["Id"])


async def test_sigterm_removes_the_sandbox(tmp_path: Path) -> None:
    async with server(tmp_path) as (_session, mark):
        [container] = labelled(mark)
        owner = int(container["Config"]["Labels"][LABEL_OWNER_PID])
        os.kill(owner, signal.SIGTERM)
        # While the client still holds stdin open: the signal alone ends it.
        await anyio.to_thread.run_sync(wait_dead, owner)
    assert labelled(mark) == []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_streamable_http_on_loopback(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    config = tmp_path / "config.json"
    config.write_text(to_json(SandboxConfig(image=IMAGE_BUSYBOX, labels={"test.mcp": mark})))
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    proc = await anyio.open_process(
        [sys.executable, "-m", "sandbox", "mcp", "--http", "--port", str(port),
         "--config", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with anyio.fail_after(60):
            while True:  # until it listens
                try:
                    await (await anyio.connect_tcp("127.0.0.1", port)).aclose()
                    break
                except OSError:
                    assert proc.returncode is None, "the server exited"
                    await anyio.sleep(0.1)
            async with streamable_http_client(url) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                ran = structured(await session.call_tool("run_command",
                                                         {"command": "echo over http"}))
                assert ran["stdout"] == "over http\n"
            assert len(labelled(mark)) == 1
            proc.send_signal(signal.SIGTERM)
            assert await proc.wait() == 143
        assert labelled(mark) == []
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.aclose()
        for c in labelled(mark):
            docker_cli("rm", "-f", c["Id"])


async def test_http_refuses_an_address_other_than_loopback() -> None:
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "-m", "sandbox", "mcp", "--http", "--host", "0.0.0.0"],
            check=False)
    assert proc.returncode == 2
    assert b"loopback only" in proc.stderr
