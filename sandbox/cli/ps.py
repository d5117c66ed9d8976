"""``sandbox ps`` and ``sandbox top``: which sandboxes run, what they use (``docker._ps``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .._owner import seconds_text
from .._progress import human_bytes
from .._tasks import fd_readable

if TYPE_CHECKING:
    from .._ps_rows import SandboxRow
    from ..docker._ps import TopRow

__all__ = ["add_ps", "add_top", "format_age", "ps_table", "top_table"]

#: Move home and clear the screen: each refresh of ``top`` on a terminal replaces the last.
CLEAR = "\x1b[H\x1b[2J"
#: The last line of each refresh of ``top`` on a terminal.
QUIT_HINT = "q to quit (or Ctrl-C)"
#: A column is never cut below this many characters to fit the terminal.
MIN_COLUMN = 8


def add_ps(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "ps", parents=[common], help="list the sandboxes the SDK started on the engine",
        description="List every container the SDK labelled on the engine (DOCKER_HOST), and "
        "the SDK's Pods in each Kubernetes namespace a sandbox of this host recorded (shown "
        "as NAMESPACE/POD): name, image, state, age, and whether the process that created it "
        "is still alive (alive / gone: `sandbox gc` removes it / unknown: cannot be checked "
        "from here).",
    )
    p.add_argument("--json", action="store_true", help="print a JSON array instead")
    _add_owner(p)
    p.set_defaults(run=run_ps, parser=p)


def add_top(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "top", parents=[common], help="show running sandboxes' CPU, memory and pids live",
        description="Show the running sandboxes with their CPU, memory and process count, "
        "refreshed every --interval seconds until q or Ctrl-C (or -n refreshes), from the "
        "stats sampler the SDK uses. On a terminal the table fits its width.",
    )
    p.add_argument("--json", action="store_true",
                   help="print one JSON object per refresh (JSON lines) instead")
    p.add_argument("-n", "--iterations", type=int, default=0, metavar="N",
                   help="stop after N refreshes (default: run until interrupted)")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between refreshes (default: 1; the engine samples each second)")
    _add_owner(p)
    p.set_defaults(run=run_top, parser=p)


def _add_owner(p: argparse.ArgumentParser) -> None:
    p.add_argument("--owner", type=int, metavar="PID",
                   help="only the sandboxes the process PID created")


def format_age(seconds: float | None) -> str:
    return "?" if seconds is None else seconds_text(int(seconds))


def _owner(row: SandboxRow) -> str:
    return f"{row.owner} (pid {row.owner_pid})" if row.owner_pid is not None else row.owner


def _cut(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[:width - 1] + "~"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], width: int = 0,
           cuttable: Sequence[str] = ()) -> str:
    """Columns two spaces apart; with ``width``, the ``cuttable`` columns are shortened
    (the widest first, the first two before the others, none below `MIN_COLUMN`; the cut
    marked ``~``) until a line fits."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    cut = [header.index(h) for h in cuttable if h in header]
    for group, floor in ((cut[:2], MIN_COLUMN + 4), (cut, MIN_COLUMN)):
        while width and sum(widths) + 2 * (len(widths) - 1) > width:
            widest = max(group, key=lambda i: widths[i], default=None)
            if widest is None or widths[widest] <= floor:
                break
            widths[widest] -= 1
    lines = ["  ".join(_cut(c, w).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *rows]]
    return "\n".join(lines)


def ps_table(rows: Sequence[SandboxRow]) -> str:
    return _table(["NAME", "IMAGE", "STATE", "AGE", "OWNER"],
                  [[r.name, r.image, r.state, format_age(r.age_seconds), _owner(r)]
                   for r in rows])


def top_table(rows: Sequence[TopRow], width: int = 0) -> str:
    """The ``top`` table; with ``width``, NAME, IMAGE and OWNER are cut to fit it."""
    def cells(t: TopRow) -> list[str]:
        u = t.usage
        return [t.sandbox.name, t.sandbox.image,
                f"{u.cpu_usage:.1f}" if u else "-",
                human_bytes(u.memory_usage) if u else "-",
                f"{u.memory_percent:.1f}" if u else "-",
                str(u.process_count) if u else "-", _owner(t.sandbox)]
    return _table(["NAME", "IMAGE", "CPU%", "MEM", "MEM%", "PIDS", "OWNER"],
                  [cells(t) for t in rows], width, cuttable=("NAME", "IMAGE", "OWNER"))


async def all_sandboxes(owner: int | None) -> list[SandboxRow]:
    """The engine's sandboxes, then those of the places off this host that sandboxes of this
    host recorded (`sandbox._registry.place_listers`: none loaded when none is recorded),
    oldest first."""
    from datetime import UTC, datetime

    from .._owner import Here
    from .._registry import place_listers
    from ..docker._ps import list_sandboxes

    rows = await list_sandboxes(owner=owner)
    here, now = Here.current(), datetime.now(UTC)
    for lister in place_listers():
        rows += await lister(owner=owner, here=here, now=now)
    return sorted(rows, key=lambda r: (r.created or now, r.name))


def run_ps(args: argparse.Namespace) -> int:
    rows = asyncio.run(all_sandboxes(args.owner))
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=2))
    elif rows:
        print(ps_table(rows))
    else:
        print("no sandboxes")
    return 0


def _columns() -> int:
    """The terminal's width as the terminal says it (not a COLUMNS inherited from elsewhere)."""
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or 80
    except OSError:
        return shutil.get_terminal_size().columns


@contextlib.contextmanager
def _keys() -> Iterator[asyncio.Event | None]:
    """On a terminal: keys without Enter (cbreak; Ctrl-C still interrupts), and an event set
    when ``q`` is pressed; the terminal's mode is restored on the way out. Else None."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    quit_pressed = asyncio.Event()

    def read() -> None:
        try:
            data = os.read(fd, 64)
        except OSError:
            data = b""
        if not data or b"q" in data.lower():
            quit_pressed.set()

    tty.setcbreak(fd)
    try:
        with fd_readable(fd, read):
            yield quit_pressed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def _frames(args: argparse.Namespace) -> None:
    from ..docker._ps import watch

    tty = sys.stdout.isatty()
    shown = 0
    async with contextlib.aclosing(watch(args.interval, owner=args.owner)) as frames:
        async for rows in frames:
            if args.json:
                print(json.dumps({"sandboxes": [t.to_dict() for t in rows]}), flush=True)
            elif tty:
                width = _columns()
                text = top_table(rows, width) if rows else "no running sandboxes"
                print(CLEAR + text + "\n\n" + QUIT_HINT, flush=True)
            else:
                text = top_table(rows) if rows else "no running sandboxes"
                print(("\n" if shown else "") + text, flush=True)
            shown += 1
            if args.iterations and shown >= args.iterations:
                return


async def _top(args: argparse.Namespace) -> None:
    with _keys() as quit_pressed:
        if quit_pressed is None:
            await _frames(args)
            return
        frames = asyncio.ensure_future(_frames(args))
        quit_wait = asyncio.ensure_future(quit_pressed.wait())
        try:
            await asyncio.wait({frames, quit_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (frames, quit_wait):
                task.cancel()
            await asyncio.gather(frames, quit_wait, return_exceptions=True)
        if frames.done() and not frames.cancelled():
            frames.result()  # its error, if it ended with one


def run_top(args: argparse.Namespace) -> int:
    from ._common import usage_error

    if not args.interval > 0 or args.iterations < 0:
        usage_error(args, "--interval must be positive and -n not negative")
    asyncio.run(_top(args))
    return 0
