"""``sandbox shell`` on a terminal: the sandbox's shell on a pseudo-terminal of its own.

Our terminal goes into raw mode, so every key (arrows, Ctrl-C, Ctrl-Z) reaches the sandbox's
terminal, whose line discipline turns Ctrl-C into SIGINT for the foreground command (not the
shell) and gives the shell job control. Its size follows ours (SIGWINCH).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import termios
import threading
import tty
from collections.abc import Iterator

from ._backend import Process
from ._errors import SandboxError
from ._models import Command, CommandResult
from ._sandbox import Sandbox

_CHUNK = 64 << 10


def is_terminal() -> bool:
    """True when both our stdin and stdout are terminals."""
    return sys.stdin is not None and sys.stdin.isatty() and sys.stdout.isatty()


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _size() -> tuple[int, int]:
    """Our terminal's rows and columns (the terminal's own, not $LINES and $COLUMNS)."""
    try:
        cols, rows = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):
        cols, rows = shutil.get_terminal_size()
    return max(rows, 1), max(cols, 1)


async def forward_stdin(proc: Process, *, thread: str = "sandbox-stdin") -> None:
    """Copy our stdin's bytes to the command's until EOF (the caller closes its stdin or not).

    A daemon thread does the blocking reads (it works for terminals, pipes and files alike),
    so a read still pending when the command ends cannot delay the exit.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def reader() -> None:
        while True:
            try:
                data = os.read(sys.stdin.fileno(), _CHUNK) if sys.stdin else b""
            except (OSError, ValueError):
                data = b""
            try:
                loop.call_soon_threadsafe(queue.put_nowait, data)
            except RuntimeError:  # the loop is gone: the command already ended
                return
            if not data:
                return

    threading.Thread(target=reader, name=thread, daemon=True).start()
    with contextlib.suppress(SandboxError, OSError, RuntimeError):
        while data := await queue.get():
            await proc.write_stdin(data)


async def run_on_terminal(sb: Sandbox, argv: list[str]) -> CommandResult:
    """Run ``argv`` on a pseudo-terminal wired to ours until it exits."""
    loop = asyncio.get_running_loop()
    async with sb.stream_command(Command.argv(argv), tty=True) as proc:
        await proc.resize(*_size())

        def on_winch() -> None:
            task = asyncio.ensure_future(proc.resize(*_size()))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

        loop.add_signal_handler(signal.SIGWINCH, on_winch)
        feeder = asyncio.ensure_future(forward_stdin(proc, thread="sandbox-keys"))
        try:
            with _raw(sys.stdin.fileno()):
                async for chunk in proc:
                    sys.stdout.buffer.write(chunk.data)
                    sys.stdout.buffer.flush()
            return await proc.wait()
        finally:
            loop.remove_signal_handler(signal.SIGWINCH)
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder
