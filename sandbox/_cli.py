"""Command line: ``python -m sandbox <command>`` (also installed as ``sandbox``).

A thin layer over the public API: parse, call, print. Each subcommand is declared by an
``_add_<name>(subparsers, common)`` function (``register`` declares ``run``, ``shell`` and
``config``: flags and a JSON file become a `SandboxConfig`) that sets ``run`` to its handler,
which returns the exit status; list it in ``SUBCOMMANDS``. Errors print one line and exit
non-zero; ``--debug`` shows the traceback instead.

Exit status of ``run`` and ``shell``: the command's own; 124 when ``--timeout`` killed it (as
GNU ``timeout`` does); 1 when the sandbox failed; 2 for usage errors; 130 on Ctrl-C; 143 on
SIGTERM and 129 on SIGHUP, each after the sandbox is removed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

from ._cli_tty import forward_stdin, is_terminal, run_on_terminal
from ._errors import SandboxError
from ._json import to_json
from ._models import Command, CommandResult, SandboxConfig
from ._progress import PullProgress
from ._signals import cleanup_on_signals
from .cli import images as cli_images
from .cli import mcp as cli_mcp
from .cli import ps as cli_ps
from .cli._common import (
    EXIT_TIMEOUT,
    add_config_flags,
    config_from_args,
    parse_size,
    sandbox_for,
    terminated,
)

if TYPE_CHECKING:
    from ._backend import Process as ExecProcess

__all__ = [
    "build_parser", "cmd_config", "cmd_run", "cmd_shell", "main", "parse_duration",
    "parse_size", "register",
]



# -- arguments ----------------------------------------------------------------------------------


def register(subparsers: Any, common: argparse.ArgumentParser | None = None) -> None:
    """Add ``run``, ``shell`` and ``config`` to a subparsers action."""
    parents = [common] if common is not None else []
    p = subparsers.add_parser(
        "run", parents=parents, help="run one command in a fresh sandbox",
        description="Run CMD in a fresh sandbox, print its output as it comes (stdout to "
        "stdout, stderr to stderr), remove the sandbox and exit with the command's status "
        f"({EXIT_TIMEOUT} on --timeout, 1 if the sandbox failed).",
    )
    add_config_flags(p, timeout=True)
    p.add_argument("-i", "--interactive", action="store_true",
                   help="forward stdin to the command (otherwise it reads EOF at once)")
    p.add_argument("argv", nargs="+", metavar="CMD",
                   help="the command and its arguments; put `--` before it")
    p.set_defaults(run=cmd_run, parser=p)

    p = subparsers.add_parser(
        "shell", parents=parents, help="open a shell in a fresh sandbox",
        description="Start a shell in a fresh sandbox with stdin, stdout and stderr attached; "
        "works with a pipe too (`echo 'ls; exit 3' | sandbox shell`). There is no terminal "
        "inside (no line editing or job control). The sandbox is removed when the shell ends.",
    )
    add_config_flags(p, timeout=False)
    p.add_argument("--shell", default="/bin/sh", help="the shell to run (default: /bin/sh)")
    p.set_defaults(run=cmd_shell, parser=p)

    p = subparsers.add_parser(
        "config", parents=parents, help="print the sandbox configuration as JSON",
        description="Print the configuration the flags (and --config) describe; with no flags "
        "the default one. The output is accepted by --config.",
    )
    add_config_flags(p, timeout=True)
    p.add_argument("--json", action="store_true", help="print compact JSON on one line")
    p.set_defaults(run=cmd_config, parser=p)


# -- printing -------------------------------------------------------------------------------------


def _write(stream: str, data: bytes) -> None:
    out = sys.stderr if stream == "stderr" else sys.stdout
    out.buffer.write(data)
    out.buffer.flush()


def _exit_status(args: argparse.Namespace, result: CommandResult) -> int:
    if result.timed_out:
        print(f"sandbox {args.command}: {result.error}", file=sys.stderr)
        return EXIT_TIMEOUT
    if result.exit_code < 0:
        print(f"sandbox {args.command}: error: {result.error or 'no exit status'}",
              file=sys.stderr)
        return 1
    return result.exit_code


# -- stdin --------------------------------------------------------------------------------------


async def _forward_stdin(proc: ExecProcess) -> None:
    """Copy our stdin to the command's until EOF, then close it."""
    await forward_stdin(proc)
    with contextlib.suppress(SandboxError, OSError, RuntimeError):
        await proc.close_stdin()


# -- handlers -------------------------------------------------------------------------------------


async def _attached(config: SandboxConfig, argv: Sequence[str], *, stdin: bool,
                    quiet: bool = False) -> CommandResult:
    """Run argv in a fresh sandbox with output printed live; stdin forwarded if asked."""
    progress = PullProgress(quiet=quiet)
    async with cleanup_on_signals(), sandbox_for(config, progress) as sb:
        progress.done()
        async with sb.stream_command(Command.argv(list(argv))) as proc:
            feeder: asyncio.Task[None] | None = None
            if stdin:
                feeder = asyncio.ensure_future(_forward_stdin(proc))
            else:
                await proc.close_stdin()
            try:
                async for chunk in proc:
                    _write(chunk.stream, chunk.data)
                return await proc.wait()
            finally:
                if feeder is not None:
                    feeder.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await feeder


async def _on_terminal(config: SandboxConfig, argv: Sequence[str], *,
                       quiet: bool = False) -> CommandResult:
    progress = PullProgress(quiet=quiet)
    async with cleanup_on_signals(), sandbox_for(config, progress) as sb:
        progress.done()
        return await run_on_terminal(sb, list(argv))


def cmd_run(args: argparse.Namespace) -> int:
    """``sandbox run [flags] -- CMD...``: run one command and exit with its status."""
    config = config_from_args(args)
    try:
        result = asyncio.run(_attached(config, args.argv, stdin=args.interactive,
                                       quiet=args.quiet))
    except SystemExit as exc:
        return terminated(args, exc)
    return _exit_status(args, result)


def cmd_shell(args: argparse.Namespace) -> int:
    """``sandbox shell [flags]``: a shell with our stdin, stdout and stderr attached."""
    config = config_from_args(args)
    argv = [args.shell, "-i"] if sys.stdin is not None and sys.stdin.isatty() else [args.shell]
    try:
        if is_terminal():  # a terminal of its own: keys, Ctrl-C and job control work
            result = asyncio.run(_on_terminal(config, argv, quiet=args.quiet))
        else:
            result = asyncio.run(_attached(config, argv, stdin=True, quiet=args.quiet))
    except SystemExit as exc:
        return terminated(args, exc)
    return _exit_status(args, result)


def cmd_config(args: argparse.Namespace) -> int:
    """``sandbox config [--json] [flags]``: print the configuration the flags describe."""
    text = to_json(config_from_args(args))
    if not args.json:
        text = json.dumps(json.loads(text), indent=2)
    print(text)
    return 0


# -- durations and the parser class ------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(text: str) -> timedelta:
    """Parse ``30s``, ``10m``, ``2h``, ``1d``, ``1w`` or a sum like ``1h30m``."""
    value = text.strip().lower()
    parts = _DURATION_PART.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise argparse.ArgumentTypeError(
            f"invalid duration {text!r}: use a number and a unit, like 30s, 10m, 2h or 1d")
    return timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in parts))


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


# -- gc ------------------------------------------------------------------------------------------


def _add_gc(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "gc", parents=[common], help="remove sandbox resources whose owner process is gone",
        description="Remove containers, networks and volumes labelled by the SDK whose owner "
        "process is gone, process sandboxes' leftovers, and the Pods and NetworkPolicies of "
        "Kubernetes sandboxes in every namespace this host's sandboxes recorded. Resources of "
        "a live owner, and anything without the SDK's labels, are never touched.",
    )
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.add_argument(
        "--older-than", type=parse_duration, metavar="DURATION",
        help="remove only what is at least DURATION old (30s, 10m, 2h, 1d); resources whose "
        "owner cannot be checked from here (another host, no owner labels) are never removed",
    )
    p.add_argument(
        "--checkpoints-older-than", type=parse_duration, metavar="DURATION",
        help="also remove checkpoints (see `sandbox checkpoints`) at least DURATION old; "
        "without it no checkpoint is touched",
    )
    p.set_defaults(run=_run_gc)


def _run_gc(args: argparse.Namespace) -> int:
    from ._gc import gc

    report = asyncio.run(gc(dry_run=args.dry_run, older_than=args.older_than,
                            checkpoints_older_than=args.checkpoints_older_than))
    verb = "would remove" if report.dry_run else "removed"
    for item in report.removed:
        print(f"{verb} {item.kind} {item.name or item.id[:12]}: {item.reason}")
    for item in report.kept:
        print(f"kept {item.kind} {item.name or item.id[:12]}: {item.reason}")
    for item in report.failed:
        print(f"FAILED {item.kind} {item.name or item.id[:12]}: {item.reason}")
    print(f"gc: {verb} {len(report.removed_containers)} containers, "
          f"{len(report.removed_networks)} networks, {len(report.removed_volumes)} volumes, "
          f"{len(report.removed_checkpoints)} checkpoints, "
          f"{len(report.removed_process)} process sandboxes, "
          f"{len(report.removed_rootfs)} rootfs cache entries, "
          f"{len(report.removed_sessions)} session FIFO directories; "
          f"kept {len(report.kept)}; failed {len(report.failed)}")
    return 1 if report.failed else 0


# -- checkpoints ---------------------------------------------------------------------------------


def _add_checkpoints(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "checkpoints", parents=[common], help="list the sandbox checkpoints on the engine",
        description="List the checkpoints (sandbox filesystems kept as local images by "
        "Sandbox.checkpoint and fork), oldest first. `sandbox gc --checkpoints-older-than "
        "DURATION` removes old ones.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per line")
    p.set_defaults(run=_run_checkpoints)


def _run_checkpoints(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from ._checkpoint import checkpoints
    from ._owner import seconds_text

    found = asyncio.run(checkpoints())
    now = datetime.now(UTC)
    if not args.json:
        print(f"{'NAME':<40} {'CREATED':<20} {'AGE':>8} {'SIZE':>10}  SOURCE        IMAGE")
    for point in found:
        created = point.created.strftime("%Y-%m-%d %H:%M:%S") if point.created else "?"
        if args.json:
            print(json.dumps({"name": point.name, "image": point.image,
                              "image_id": point.image_id, "source_id": point.source_id,
                              "created": point.created.isoformat() if point.created else None,
                              "size": point.size, "memory": point.memory}))
            continue
        age = "?"
        if point.created is not None:
            age = seconds_text(max(int((now - point.created).total_seconds()), 0))
        print(f"{point.name:<40} {created:<20} {age:>8} {point.size / 2**20:>8.1f}Mi  "
              f"{point.source_id or '?':<12}  {point.image}")
    return 0


# -- parser and entry point ----------------------------------------------------------------------

#: Every subcommand's ``_add_<name>`` function, in the order ``--help`` lists them.
SUBCOMMANDS: list[Callable[[Any, argparse.ArgumentParser], None]] = [
    register, _add_gc, _add_checkpoints, cli_ps.add_ps, cli_ps.add_top, cli_mcp.add,
    cli_images.add,
]


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every subcommand; each sets ``run`` to its handler."""
    # Accepted before and after the subcommand; SUPPRESS keeps the subparser from resetting it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback on errors")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="show no progress (it is shown only on a terminal anyway)")
    parser = _Parser(prog="sandbox", description="Run AI-agent work in Docker sandboxes.")
    from . import __version__  # (the package's __init__ is loaded by now)

    parser.add_argument("--version", action="version", version=f"sandbox {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="show no progress (it is shown only on a terminal anyway)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for add in SUBCOMMANDS:
        add(sub, common)
    return parser


def _one_line(exc: BaseException) -> str:
    return " ".join(line.strip() for line in str(exc).splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else 2
    run: Callable[[argparse.Namespace], int] = args.run
    try:
        return run(args)
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130
    except SandboxError as exc:
        if args.debug:
            raise
        print(f"{parser.prog} {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except Exception as exc:
        if args.debug:
            raise
        print(f"{parser.prog} {args.command}: internal error: {type(exc).__name__}: "
              f"{_one_line(exc)} "
              "(rerun with --debug for the traceback)", file=sys.stderr)
        return 1
