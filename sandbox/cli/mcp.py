"""``sandbox mcp``: serve one sandbox to an MCP client (``sandbox._mcp_server``)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

__all__ = ["add"]


def add(sub: Any, common: argparse.ArgumentParser) -> None:
    from .._cli import _add_config_flags

    p = sub.add_parser(
        "mcp", parents=[common], help="serve a sandbox to an MCP client (stdio or HTTP)",
        description="Create a sandbox and offer it as MCP tools (run_command, read_file, "
        "write_file, list_files, resource_usage) on stdin/stdout, or with --http on "
        "streamable HTTP at 127.0.0.1. The sandbox is removed when the client goes away. "
        "Needs the mcp package: pip install 'sandbox[mcp]'.",
    )
    _add_config_flags(p, timeout=True)
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP (path /mcp) instead of stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address, loopback only "
                   "(default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default: 8000)")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from .._cli import _config, _terminated, _usage_error
    from .._errors import ConfigError
    from .._mcp_server import check_loopback, serve

    config = _config(args)
    if args.http:
        try:
            check_loopback(args.host)
        except ConfigError as exc:
            _usage_error(args, str(exc))
    try:
        asyncio.run(serve(config, http=args.http, host=args.host, port=args.port))
    except SystemExit as exc:
        return _terminated(args, exc)
    return 0
