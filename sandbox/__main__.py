"""Command line: ``python -m sandbox <command>`` (also installed as ``sandbox``).

A thin layer over the public API: parse, call, print. Each subcommand is a pair of functions,
``_add_<name>(subparsers)`` declaring its arguments and ``_run_<name>(args)`` doing the work;
register a new one in ``SUBCOMMANDS``. Errors print one line and exit non-zero; ``--debug``
shows the traceback instead.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn

from ._cli import register as _add_run_shell_config
from ._errors import SandboxError

__all__ = ["build_parser", "main", "parse_duration"]

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
        "process is gone. Resources of a live owner, and anything without the SDK's labels, "
        "are never touched.",
    )
    p.add_argument("--dry-run", action="store_true", help="only print what would be removed")
    p.add_argument(
        "--older-than", type=parse_duration, metavar="DURATION",
        help="remove only what is at least DURATION old (30s, 10m, 2h, 1d); resources whose "
        "owner cannot be checked from here (another host, no owner labels) are never removed",
    )
    p.set_defaults(run=_run_gc)


def _run_gc(args: argparse.Namespace) -> int:
    from ._gc import gc

    report = asyncio.run(gc(dry_run=args.dry_run, older_than=args.older_than))
    verb = "would remove" if report.dry_run else "removed"
    for item in report.removed:
        print(f"{verb} {item.kind} {item.name or item.id[:12]}: {item.reason}")
    for item in report.kept:
        print(f"kept {item.kind} {item.name or item.id[:12]}: {item.reason}")
    for item in report.failed:
        print(f"FAILED {item.kind} {item.name or item.id[:12]}: {item.reason}")
    print(f"gc: {verb} {len(report.removed_containers)} containers, "
          f"{len(report.removed_networks)} networks, {len(report.removed_volumes)} volumes; "
          f"kept {len(report.kept)}; failed {len(report.failed)}")
    return 1 if report.failed else 0


# -- parser and entry point ----------------------------------------------------------------------

#: Every subcommand's ``_add_<name>`` function, in the order ``--help`` lists them.
SUBCOMMANDS: list[Callable[[Any, argparse.ArgumentParser], None]] = [
    _add_run_shell_config, _add_gc,
]


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with every subcommand; each sets ``run`` to its handler."""
    # Accepted before and after the subcommand; SUPPRESS keeps the subparser from resetting it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the full traceback on errors")
    parser = _Parser(prog="sandbox", description="Run AI-agent work in Docker sandboxes.")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
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


if __name__ == "__main__":
    sys.exit(main())
