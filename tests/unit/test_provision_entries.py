"""Pure logic of sandbox/_provisions.py: server entries, and the tool check's (untrusted)
output. The behaviour on the engine is in tests/integration/test_provisions.py."""

from __future__ import annotations

import anyio
import pytest

from sandbox import ConfigError, SandboxInfo, SandboxInitFailed
from sandbox._provisions import (
    McpServerSpec,
    _LineQueue,
    _parse_found,
    parse_mcp_server,
    parse_mcp_servers,
)


@pytest.mark.parametrize(("entry", "name", "argv"), [
    ("fs=mcp-fs --root /w", "fs", ("mcp-fs", "--root", "/w")),
    ("mcp-fs --root /w", "mcp-fs", ("mcp-fs", "--root", "/w")),
    ("/opt/bin/srv", "srv", ("/opt/bin/srv",)),
    ("python3 -c 'x=1'", "python3", ("python3", "-c", "x=1")),
    ("py=python3 -c 'print(\"a b\")'", "py", ("python3", "-c", 'print("a b")')),
])
def test_entries(entry: str, name: str, argv: tuple[str, ...]) -> None:
    assert parse_mcp_server(entry) == McpServerSpec(name, argv)


@pytest.mark.parametrize(("entry", "needle"), [
    ("", "names no command"), ("fs=", "names no command"), ("fs='unclosed", "cannot parse"),
    ("fs=../bin/x", "not an executable name"), ("fs=-x", "not an executable name"),
    ("/", "not a usable server name"),
])
def test_bad_entries(entry: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_mcp_server(entry)


def test_two_servers_with_one_name() -> None:
    with pytest.raises(ConfigError, match="two servers are named 'srv'"):
        parse_mcp_servers(["srv --a", "/usr/bin/srv"])


def test_found_paths() -> None:
    assert _parse_found("/bin/sh\n\n/usr/bin/git\n", ["sh", "cargo", "git"]) == {
        "sh": "/bin/sh", "git": "/usr/bin/git"}


@pytest.mark.parametrize("stdout", [
    "/bin/sh\n",  # a line short
    "/bin/sh\n/bin/git\n/x\n",  # a line too many
    "/bin/sh\n/bin/git",  # no final newline
    "sh\n/bin/git\n",  # not absolute
    "/bin/sh\n/bin/evil\n",  # another program than the one asked for
    "/bin/sh\n/bin/\x1b[2Jgit\n",  # terminal escapes
])
def test_unexpected_check_output_is_refused(stdout: str) -> None:
    with pytest.raises(SandboxInitFailed, match="tool check printed"):
        _parse_found(stdout, ["sh", "git"])


def test_info_lists_tools_from_annotations() -> None:
    info = SandboxInfo(id="x", status="running",
                       annotations={"io.sandbox.tool/git": "/usr/bin/git", "note": "n"})
    assert info.tools == {"git": "/usr/bin/git"}


@pytest.mark.asyncio
async def test_queued_lines_are_bounded_in_bytes() -> None:
    """What waits for an MCP client is bounded in bytes: a put past the bound waits for a
    reader; one line longer than the bound still passes an empty queue."""
    queue = _LineQueue(10)
    await queue.put(b"123456")
    async with anyio.create_task_group() as tg:
        tg.start_soon(queue.put, b"78901")  # 11 bytes in all: waits
        await anyio.wait_all_tasks_blocked()
        assert queue.queued_bytes == 6
        assert await queue.get() == b"123456"
    assert await queue.get() == b"78901"
    await queue.put(b"x" * 50)  # alone, over the bound
    queue.clear()
    assert queue.queued_bytes == 0
    await queue.put(b"last")
    queue.end()
    assert [await queue.get() for _ in range(3)] == [b"last", None, None]
    queue.clear()
    assert await queue.get() is None  # the end stays
