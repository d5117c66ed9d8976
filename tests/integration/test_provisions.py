"""SandboxConfig.tools and mcp_servers on the real engine: checked at start, served inside.

The MCP server is examples/servers/tiny_mcp_server.py (standard library only), run in the
python image with ``python3 -c``; the client is the mcp package's own ClientSession.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    ConfigError,
    McpServerFailed,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
)
from tests.conftest import docker_cli, sandbox_containers

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

SERVER = (Path(__file__).resolve().parents[2] / "examples/servers/tiny_mcp_server.py").read_text()
TINY = "tiny=" + shlex.join(["python3", "-c", SERVER])


def server_pids(sb: Sandbox) -> list[str]:
    """Pids (in the container) of the tiny server's processes, from outside the SDK."""
    out = docker_cli("exec", sb.backend.container_id, "ps", "-eo", "pid,args")
    return [line.split()[0] for line in out.splitlines() if "A tiny MCP server" in line]


async def test_tools_are_listed_with_their_paths() -> None:
    config = SandboxConfig(image=IMAGE_BUSYBOX, tools=["sh", "wget", "/bin/busybox"])
    async with Sandbox(config) as sb:
        info = await sb.get_info()
    assert info.tools == {"sh": "/bin/sh", "wget": "/usr/bin/wget",
                          "/bin/busybox": "/bin/busybox"}


async def test_a_missing_tool_fails_initialize_naming_it() -> None:
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, tools=["sh", "git", "cargo"],
                               mcp_servers=["fs=mcp-server-fs --root /"]))
    with anyio.fail_after(60), pytest.raises(SandboxInitFailed) as ei:
        await sb.initialize()
    message = str(ei.value)
    assert "tools: 'git'" in message and "tools: 'cargo'" in message
    assert "mcp_servers['fs']: 'mcp-server-fs'" in message and "'sh'" not in message
    assert sandbox_containers(sb.id) == []


async def test_a_bad_entry_is_a_config_error() -> None:
    for config in (SandboxConfig(image=IMAGE_BUSYBOX, tools=["../sh"]),
                   SandboxConfig(image=IMAGE_BUSYBOX, mcp_servers=["a=x", "a=y"])):
        sb = Sandbox(config)
        with pytest.raises(ConfigError):
            await sb.initialize()
        assert sandbox_containers(sb.id) == []


async def test_mcp_server_runs_inside_and_is_reached_by_the_mcp_client() -> None:
    # A default command timeout of 1 s does not apply to the server, which serves for the
    # sandbox's life.
    config = SandboxConfig(image=IMAGE_PYTHON, mcp_servers=[TINY], timeout=1,
                           security=SecurityPolicy(run_as_user="1000"))
    async with Sandbox(config) as sb:
        with anyio.fail_after(60):
            async with sb.mcp_client("tiny") as session:
                tools = await session.list_tools()
                assert [t.name for t in tools.tools] == ["add", "run_python", "whoami", "crash"]
                added = await session.call_tool("add", {"a": 2, "b": 40})
                assert [c.text for c in added.content] == ["42"]
                # It runs in the sandbox, as the sandbox's user, in its working directory.
                who = await session.call_tool("whoami", {})
                assert who.content[0].text == "uid=1000 cwd=/workspace"
                await anyio.sleep(1.5)
                ran = await session.call_tool("run_python", {"code": "print(6 * 7)"})
                assert ran.content[0].text == "42\n"
            # A second client after the first left.
            async with sb.mcp_client("tiny") as session:
                assert (await session.call_tool("add", {"a": 1, "b": 1})).content[0].text == "2"
        assert server_pids(sb)
        with pytest.raises(ConfigError, match="no MCP server named 'other'"):
            sb.mcp_client("other")
        container = sb.backend.container_id
    # The server went with the sandbox.
    assert sandbox_containers(sb.id) == []
    assert container not in docker_cli("ps", "-aq", "--no-trunc")


async def test_a_crashed_server_is_reported_with_its_status_and_stderr() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, mcp_servers=[TINY])) as sb:
        with anyio.fail_after(60):
            with pytest.raises(McpServerFailed) as ei:
                async with sb.mcp_client("tiny") as session:
                    await session.call_tool("crash", {})
            err = ei.value
            # The session's own error ("Connection closed") is kept as the cause.
            assert "Connection closed" in repr(err.__cause__)
            assert "MCP server 'tiny'" in str(err) and "exited with status 3" in str(err)
            assert "crashing as asked" in str(err)
            assert err.exit_code == 3 and err.server == "tiny"
            # Later clients get the same report at once.
            with pytest.raises(McpServerFailed, match="exited with status 3"):
                async with sb.mcp_client("tiny"):
                    pass


async def test_a_server_that_is_no_mcp_server_fails_the_handshake_clearly() -> None:
    config = SandboxConfig(image=IMAGE_BUSYBOX,
                           mcp_servers=["liar=sh -c 'echo not json; echo oops >&2; exit 7'"])
    async with Sandbox(config) as sb:
        with anyio.fail_after(60), pytest.raises(McpServerFailed) as ei:
            async with sb.mcp_client("liar"):
                pass
        assert "exited with status 7" in str(ei.value) and "oops" in str(ei.value)


async def test_a_server_flooding_one_endless_line_is_stopped() -> None:
    """A hostile server cannot make the SDK buffer without bound: 16 MiB per message."""
    config = SandboxConfig(image=IMAGE_BUSYBOX,
                           mcp_servers=["flood=sh -c 'head -c 20000000 /dev/zero; sleep 600'"])
    async with Sandbox(config) as sb:
        with anyio.fail_after(120), pytest.raises(McpServerFailed,
                                                  match="longer than 16777216 bytes"):
            async with sb.mcp_client("flood"):
                pass


def rss_kib() -> int:
    """This process's resident memory now (not its peak: earlier tests may have set that)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


#: A hostile server: 16 MB lines (each under the 16 MiB message bound), counted in /tmp/lines.
NOISY = ("i=0; while :; do head -c 16000000 /dev/zero | tr -c x a; echo; i=$((i+1)); "
         "echo $i > /tmp/lines; done")


async def test_a_server_printing_long_lines_with_no_client_does_not_grow_the_sdk() -> None:
    """Issue 26: lines printed with no client attached were queued, 256 of up to 16 MiB (a
    4 GiB SDK process); now they are dropped, and what waits for a client is bounded in bytes."""
    lines = 24  # 384 MB printed
    before = rss_kib()
    config = SandboxConfig(image=IMAGE_BUSYBOX, mcp_servers=["noisy=sh -c " + shlex.quote(NOISY)])
    async with Sandbox(config) as sb:
        printed = 0
        with anyio.fail_after(600):
            while printed < lines:
                await anyio.sleep(0.5)
                r = await sb.execute_command(["cat", "/tmp/lines"])
                printed = int(r.stdout or "0")
        grown_mib = (rss_kib() - before) / 1024
        assert grown_mib < 200, f"the SDK grew by {grown_mib:.0f} MiB over {printed} lines"
        # The server still runs and can be stopped with the sandbox.
        assert "tr -c x a" in docker_cli("top", sb.backend.container_id)
