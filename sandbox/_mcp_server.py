"""``python -m sandbox mcp``: one sandbox offered to an MCP client as tools.

Built on the official ``mcp`` package (``pip install 'sandbox[mcp]'``). The server creates the
sandbox from a `SandboxConfig` when it starts and removes it when the client goes away (end of
stdin on stdio, or a signal); a server killed outright leaves a container whose owner process is
gone, which ``sandbox gc`` removes.

Tools: ``run_command`` (a shell command with a timeout), ``read_file``, ``write_file``,
``list_files`` and ``resource_usage``; with a persistent session (``_mcp_session``),
``session_run``, ``session_poll``, ``session_write`` and ``session_kill``. A failed
operation comes back as a tool error naming what went wrong; a command's own failure is a
normal result with its exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError, SandboxError
from ._json import to_json
from ._mcp_http import http_guard
from ._mcp_session import SessionTools, add_session_tools, session_tools
from ._models import Command, SandboxConfig
from ._sandbox import Sandbox
from ._signals import cleanup_on_signals

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["DEFAULT_READ_BYTES", "MAX_READ_BYTES", "build_server", "check_loopback", "serve"]

#: read_file returns at most this much unless asked for more.
DEFAULT_READ_BYTES = 1 << 20
#: ... and never more than this (one tool result, held whole and then as JSON).
MAX_READ_BYTES = 16 << 20
#: The longest stdin line (one MCP message) the stdio server reads.
MAX_STDIN_LINE = 64 * 1024 * 1024
#: run_command's timeout when the client gives none, in seconds.
DEFAULT_COMMAND_TIMEOUT = 60.0
INSTRUCTIONS = (
    "An isolated Linux sandbox (a container). run_command runs a shell command in it and "
    "returns its exit code and output; read_file, write_file and list_files work on its "
    "files; resource_usage shows its CPU, memory and processes. Relative paths start at the "
    "sandbox's working directory. session_run runs a command in one persistent shell (cd and "
    "export carry over) and returns within yield_after seconds: its exit code, or a job_id "
    "and the output so far, to follow with session_poll, session_write or session_kill."
)


def _import_server() -> type[MCPServer[Any]]:
    try:
        from mcp.server.mcpserver import MCPServer
    except ImportError as exc:
        raise ConfigError("the MCP server needs the mcp package",
                          details="install it with: pip install 'sandbox[mcp]'") from exc
    return MCPServer


def check_loopback(host: str) -> str:
    """Refuse an HTTP address other than loopback: the tools run code, so the server must
    not be reachable from other machines."""
    if host == "localhost":
        return host
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host
    except ValueError:
        pass
    raise ConfigError(f"--host {host!r}: the MCP server listens on loopback only",
                      details="use 127.0.0.1, ::1 or localhost")


@contextlib.contextmanager
def _reported() -> Iterator[None]:
    """Let the client see what went wrong: the SDK's errors become tool errors with their
    message (the mcp package hides other exceptions' text)."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        yield
    except SandboxError as exc:
        raise ToolError(" ".join(str(exc).split())) from exc


async def _rest(sb: Sandbox, path: str, shown: int) -> str:
    """How much of a file read_file did not show, as the sandbox's listing tells it."""
    with contextlib.suppress(SandboxError):
        entries = await sb.list_files(path)
        if len(entries) == 1 and entries[0].size > shown:
            return f"{entries[0].size - shown} more bytes"
    return "more bytes"


def _wire(value: Any) -> Any:
    return json.loads(to_json(value))


def build_server(sb: Sandbox, *, name: str = "sandbox",
                 sessions: SessionTools | None = None) -> MCPServer[Any]:
    """An MCP server whose tools act on ``sb`` (already initialized); with ``sessions``, also
    the persistent session tools."""
    server = _import_server()(name, instructions=INSTRUCTIONS)

    @server.tool()
    async def run_command(command: str, timeout: float = DEFAULT_COMMAND_TIMEOUT,  # noqa: ASYNC109
                          working_dir: str = "") -> dict[str, Any]:
        """Run a shell command (/bin/sh -c) in the sandbox and wait for it, at most
        `timeout` seconds (then it and all it started are killed and timed_out is true).
        Returns exit_code, stdout, stderr, timed_out and truncated."""
        with _reported():
            if not timeout > 0:
                raise ConfigError(f"timeout must be a positive number of seconds, "
                                  f"not {timeout!r}")
            result = await sb.execute_command(
                Command.shell(command, timeout=timeout, working_dir=working_dir))
            return {"exit_code": result.exit_code, "stdout": result.stdout,
                    "stderr": result.stderr, "timed_out": result.timed_out,
                    "truncated": result.truncated, "error": result.error}

    @server.tool()
    async def read_file(path: str, max_bytes: int = DEFAULT_READ_BYTES) -> str:
        """Read a text file in the sandbox (invalid UTF-8 is replaced); at most `max_bytes`
        (up to 16 MiB) are read and returned, with a note when there was more."""
        with _reported():
            if not 0 < max_bytes <= MAX_READ_BYTES:
                raise ConfigError(f"max_bytes must be from 1 to {MAX_READ_BYTES}, "
                                  f"not {max_bytes}")
            # One byte more than shown tells whether there was more; the sandbox's file
            # may be huge (sparse), so no more than that is read.
            data = await sb.read_file(path, max_bytes=max_bytes + 1)
            text = data[:max_bytes].decode("utf-8", "replace")
            if len(data) > max_bytes:
                text += f"\n[... {await _rest(sb, path, max_bytes)} not shown]"
            return text

    @server.tool()
    async def write_file(path: str, content: str) -> str:
        """Write a text file in the sandbox, creating parent directories."""
        with _reported():
            await sb.write_file(path, content)
            return f"wrote {len(content.encode())} bytes to {path}"

    @server.tool()
    async def list_files(path: str = ".") -> list[dict[str, Any]]:
        """List a directory in the sandbox: name, path, size, is_dir and more per entry."""
        with _reported():
            return [_wire(entry) for entry in await sb.list_files(path)]

    @server.tool()
    async def resource_usage() -> dict[str, Any]:
        """The sandbox's current CPU, memory, process and I/O figures."""
        with _reported():
            return dict(_wire(await sb.get_resource_usage()))

    if sessions is not None:
        add_session_tools(server, sessions, _reported)
    return server


async def serve(config: SandboxConfig, *, http: bool = False, host: str = "127.0.0.1",
                port: int = 8000, auth: bool = True, token_file: str | None = None,
                unix_socket: str | None = None) -> None:
    """Create the sandbox, serve MCP on stdio (or streamable HTTP on loopback, or on a unix
    socket) until the client goes away, then remove the sandbox.

    Over HTTP every request needs the bearer token written to ``token_file`` (default: a new
    file in a private directory, see `_mcp_http`), unless ``auth`` is False; a unix socket
    is made 0600 instead."""
    http = http or bool(unix_socket)
    if http:
        check_loopback(host)
    _import_server()
    with contextlib.ExitStack() as stack:
        run_http = stack.enter_context(http_guard(
            host=host, port=port, auth=auth, token_file=token_file,
            unix_socket=unix_socket)) if http else None
        async with cleanup_on_signals(), Sandbox(config) as sb, session_tools(sb) as sessions:
            server = build_server(sb, sessions=sessions)
            if run_http is not None:
                await run_http(server)
            else:
                await _run_stdio(server)


class _Lines:
    """stdin's lines as `stdio_server` reads them (``async for line in stdin``), from an
    asyncio pipe reader rather than a thread: a thread blocked reading stdin cannot be
    cancelled, so SIGTERM would not remove the sandbox until the client closed stdin."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> _Lines:
        return self

    async def __anext__(self) -> str:
        try:
            line = await self._reader.readline()
        except ValueError:  # a line past the limit: no MCP message is that long
            raise StopAsyncIteration from None
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", "replace")


async def _run_stdio(server: MCPServer[Any]) -> None:
    """`MCPServer.run_stdio_async`, with stdin read so that a cancel ends it at once."""
    from mcp.server.stdio import stdio_server

    lowlevel = getattr(server, "_lowlevel_server", None)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_STDIN_LINE)
    try:
        pipe = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    except (AttributeError, OSError, ValueError):
        pipe = None
    transport = None
    if pipe is not None:
        try:
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), pipe)
        except (OSError, ValueError):  # a regular file: no pipe reader for it
            pipe.close()
    if transport is None or lowlevel is None:
        await server.run_stdio_async()  # reads stdin in a thread; still correct
        return
    try:
        async with stdio_server(stdin=_Lines(reader)) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
    finally:
        transport.close()
