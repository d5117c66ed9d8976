"""`Sandbox.mcp_client`: an ``mcp.ClientSession`` over an MCP server's stdin and stdout.

The transport is the one MCP's stdio client uses (one JSON-RPC message per line), but the
process is an `McpServer` in the sandbox (``sandbox._provisions``), reached through the
backend-neutral `Process` handle. Needs the optional ``mcp`` package (``sandbox[mcp]``).

A message the server prints that is not valid JSON-RPC goes to the session as an exception
value (the session reports it; it is never trusted). When the server ends, the session's
pending and later requests fail; the block then raises `McpServerFailed`, which says how the
server ended (exit status, the end of its stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio

from ._errors import ConfigError, McpServerFailed
from ._tasks import cancel_and_wait

if TYPE_CHECKING:
    from mcp import ClientSession

    from ._provisions import McpServer

__all__ = ["open_client"]


def _import_mcp() -> Any:
    try:
        import mcp
    except ImportError as exc:
        raise ConfigError("Sandbox.mcp_client needs the mcp package",
                          details="install it with: pip install 'sandbox[mcp]'") from exc
    return mcp


@contextlib.asynccontextmanager
async def open_client(server: McpServer, **session_options: Any) -> AsyncIterator[ClientSession]:
    """Yield an initialized ``ClientSession`` talking to ``server``; one at a time."""
    mcp = _import_mcp()
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter

    if server.ended.is_set():
        raise server.failure()
    if server.attached:
        raise McpServerFailed(f"MCP server {server.name!r} already has a client",
                              server=server.name,
                              details="a stdio server serves one session at a time")
    server.attached = True
    server.drain()
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)

    async def reader() -> None:
        async with read_send:
            while (line := await server.receive_line()) is not None:
                try:
                    item: Any = SessionMessage(
                        jsonrpc_message_adapter.validate_json(line, by_name=False))
                except ValueError as exc:
                    item = McpServerFailed(f"MCP server {server.name!r} printed a line that is "
                                           f"not JSON-RPC: {line[:200]!r}", server=server.name,
                                           cause=exc)
                await read_send.send(item)

    async def writer() -> None:
        async with write_recv:
            async for message in write_recv:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await server.send(data.encode() + b"\n")

    async def guarded(body: Any) -> None:
        # The session sees the connection close when the server ends or cannot be written.
        with contextlib.suppress(McpServerFailed, anyio.ClosedResourceError,
                                 anyio.BrokenResourceError):
            await body()
        await read_send.aclose()

    tasks = [asyncio.ensure_future(guarded(reader)), asyncio.ensure_future(guarded(writer))]
    try:
        async with mcp.ClientSession(read_recv, write_send, **session_options) as session:
            try:
                await session.initialize()
            except Exception as exc:
                if server.ended.is_set():
                    raise server.failure() from exc
                raise
            yield session
    except Exception as exc:
        # Whatever failed in the block, a server that ended is the news.
        if server.ended.is_set() and not isinstance(exc, McpServerFailed):
            raise server.failure() from exc
        raise
    finally:
        await cancel_and_wait(tasks)
        with anyio.CancelScope(shield=True):
            await write_send.aclose()
            await read_recv.aclose()
            server.attached = False
            server.drain()  # nobody will read them: free them, and let the server print on
