"""``sandbox mcp``: serve one sandbox to an MCP client (``sandbox._mcp_server``)."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

__all__ = ["add"]


def add(sub: Any, common: argparse.ArgumentParser) -> None:
    from ._common import add_config_flags

    p = sub.add_parser(
        "mcp", parents=[common], help="serve a sandbox to an MCP client (stdio or HTTP)",
        description="Create a sandbox and offer it as MCP tools (run_command, read_file, "
        "write_file, list_files, resource_usage) on stdin/stdout, or with --http on "
        "streamable HTTP at 127.0.0.1 (with a bearer token), or with --unix-socket on a "
        "socket only you can use. The sandbox is removed when the client goes away. "
        "Needs the mcp package: pip install 'sandbox[mcp]'.",
    )
    add_config_flags(p, timeout=True)
    p.add_argument("--http", action="store_true",
                   help="serve streamable HTTP (path /mcp) instead of stdio; every request "
                   "must send 'Authorization: Bearer <token>', a random token printed once "
                   "on stderr and written to a file only you can read")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address, loopback only "
                   "(default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (default: 8000)")
    p.add_argument("--token-file", metavar="PATH",
                   help="write the token to this new file (mode 0600) instead of "
                   "$XDG_RUNTIME_DIR/sandbox/mcp-<pid>.token (or ~/.local/state/sandbox/)")
    p.add_argument("--unix-socket", metavar="PATH",
                   help="serve HTTP on a new unix socket of mode 0600 instead of a port "
                   "(only you can connect; no token)")
    p.add_argument("--no-auth", action="store_true",
                   help="serve HTTP without a token: any local user can then drive the "
                   "sandbox (unsafe on a shared machine)")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from .._errors import ConfigError
    from .._mcp_server import check_loopback, serve
    from ._common import config_from_args, terminated, usage_error

    config = config_from_args(args)
    if args.no_auth and (args.token_file or args.unix_socket):
        usage_error(args, "--no-auth goes with neither --token-file nor --unix-socket")
    if args.token_file and args.unix_socket:
        usage_error(args, "--token-file: a --unix-socket server uses no token")
    if not (args.http or args.unix_socket) and (args.no_auth or args.token_file):
        usage_error(args, "--no-auth and --token-file apply to --http only")
    if args.http:
        try:
            check_loopback(args.host)
        except ConfigError as exc:
            usage_error(args, str(exc))
    try:
        asyncio.run(serve(config, http=args.http, host=args.host, port=args.port,
                          auth=not args.no_auth, token_file=args.token_file,
                          unix_socket=args.unix_socket))
    except SystemExit as exc:
        return terminated(args, exc)
    return 0
