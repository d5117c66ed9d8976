"""One shell of a `Session` and one command in flight on it: the state the session's reader and
watcher share (markers seen, output captured, how the command or the shell ended)."""

from __future__ import annotations

import functools
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import anyio
from anyio.abc import TaskGroup

from ._backend import Process
from ._errors import SandboxError
from ._flag import Flag
from ._models import CommandResult
from ._output import OutputCapture, StreamName, deliver
from ._session_fifo import FifoLink
from ._session_wire import NONCE_LEN, MarkerScanner, head_tail, parse_end, parse_status

__all__ = ["Callback", "Run", "Shell"]

Callback = Callable[[bytes], object] | Callable[[bytes], Awaitable[object]]


class Shell:
    """One shell process: its handle, the task reading it, and how it ended."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.proc: Process | None = None
        self.ended = anyio.Event()
        self.exit_code: int | None = None
        self.why = ""  # how it ended, when it ended
        self.error: SandboxError | None = None  # why it could not run, if it never did
        self.scope = anyio.CancelScope()
        self.nonce = secrets.token_hex(NONCE_LEN // 2)  # its exit trap's marker
        self.pid = ""  # as it says it (in its pid namespace), when it runs from a copy
        self.own_pid = 0  # as it says it, copy or not: where a command kill's chains end
        self.stopping = False
        self.exited = False  # its process is gone (its task may still be handing on output)
        self.link: FifoLink | None = None  # its stdio moved to FIFOs (`_session_fifo`)
        self.tap: Callable[[bytes], None] | None = None  # takes its attach stdout meanwhile
        self.pumps: TaskGroup | None = None  # where a FIFO link's reader runs

    @property
    def alive(self) -> bool:
        return self.proc is not None and not self.ended.is_set()

    async def write(self, data: bytes | str) -> None:
        """Write to the shell's stdin: its FIFO once it took one, else the process's."""
        if self.link is not None:
            await self.link.write(data.encode() if isinstance(data, str) else data)
            return
        assert self.proc is not None
        await self.proc.write_stdin(data)


class Run:
    """One command in flight: its markers, captured output and how it ended."""

    def __init__(self, shell: Shell, *, stale_nonce: str, cwd: str, max_output_bytes: int,
                 on_stdout: Callback | None, on_stderr: Callback | None,
                 keep_chars: int) -> None:
        self.shell = shell
        # The nonce, the token saying status 0 (see _session_wire) and the command's id: as
        # random as three ``secrets.token_hex``, from one read of the system's random source.
        secret = os.urandom(NONCE_LEN + 12).hex()
        self.nonce = secret[:NONCE_LEN]
        self.token = secret[NONCE_LEN : 2 * NONCE_LEN]
        self.command_id = secret[2 * NONCE_LEN :]
        stale = (stale_nonce,)  # the previous command's markers may still come, printed twice
        self.scanners: dict[StreamName, MarkerScanner] = {
            name: MarkerScanner(self.nonce, stale, shell.nonce) for name in ("stdout", "stderr")
        }
        self.quit_code: int | None = None  # the shell's exit trap spoke
        self.capture = OutputCapture(max_output_bytes)
        self.callbacks: dict[StreamName, Callback | None] = {
            "stdout": on_stdout, "stderr": on_stderr,
        }
        # Flags, not events: most are never waited on, and an event per moment was set-up
        # every command paid (each asks anyio which backend runs).
        self.ready = Flag()  # the stdin reader runs: input lines may be sent
        self.done = Flag()  # both end markers came, or the shell ended
        self.wake = Flag()  # done, or a callback raised: the watcher has work
        self.finalize: Callable[[CommandResult], Awaitable[CommandResult]] | None = None
        self.timed_out = False
        self.kill_started = False
        self.kill_finished = Flag()  # the kill (and its look after the end) is over
        self.kill_confirmed = False  # the kill saw none of its processes left
        self.status = -1
        self.got_end = False
        self.forged = False  # an end marker with the nonce but not as the wrapper prints it
        self.cwd = cwd
        self.subshell = False  # the command ran in a subshell (its cd does not persist)
        self.last_output = time.monotonic()
        self.callback_error: BaseException | None = None
        self.kill_reason = ""
        self.killed = False
        self.shell_lost = ""  # why the shell is gone, when it went during this command
        self.stdin_open = False  # input may be written (its reader runs, not closed yet)
        self.stdin_end_due = False  # its reader runs and was not sent the end line yet
        self.keep_chars = keep_chars
        self.recent: list[bytes] = []  # combined output since the last look (SessionJob)
        self.recent_size = 0
        self.recent_dropped = 0
        self.start_time = datetime.now(UTC)
        self.t0 = time.monotonic()
        self.sent = 0  # boot-clock tick it was sent in (`_below_shell.boot_tick`), 0: not yet

    @functools.cached_property
    def stdin_lock(self) -> anyio.Lock:
        """Taken by whoever writes the command's input or its end line (made on first use:
        a command without input never needs it)."""
        return anyio.Lock(fast_acquire=True)

    async def feed(self, stream: StreamName, data: bytes) -> None:
        out, marks = self.scanners[stream].feed(data)
        for piece in out:
            await self._output(stream, piece)
        for payload in marks:
            kind = payload[:1]
            if kind == b"r":
                self.ready.set()
            elif kind in (b"o", b"x") and not self.got_end:
                # The first: a command fed stdin has its markers printed twice, and the
                # second pair carries the status of the marker printing, not the command's.
                self.got_end = True
                status, self.cwd = parse_end(payload, self.token)
                self.forged = status is None
                self.status = -1 if status is None else status
            elif kind == b"q":
                quit_code = parse_status(payload[1:])
                self.quit_code = -1 if quit_code is None else quit_code
        if self.scanners["stdout"].ended and self.scanners["stderr"].ended:
            if self.quit_code is not None and not self.got_end:
                self.shell.exit_code = self.quit_code
                self.shell_ended(f"the session's shell exited with code {self.quit_code}")
            self.done.set()
            self.wake.set()

    async def _output(self, stream: StreamName, data: bytes) -> None:
        self.last_output = time.monotonic()
        self.capture.feed(stream, data)
        if self.keep_chars:
            # Keep the first chunk and the latest bytes for a model's view (a UTF-8
            # character is at most 4 bytes); chunks dropped from the middle are counted.
            budget = 4 * self.keep_chars + 16
            self.recent.append(data)
            self.recent_size += len(data)
            while len(self.recent) > 2 and self.recent_size - len(self.recent[1]) >= budget:
                self.recent_dropped += len(self.recent[1])
                self.recent_size -= len(self.recent[1])
                del self.recent[1]
        if self.callback_error is None:
            try:
                await deliver(self.callbacks[stream], data)
            except Exception as exc:  # the command is killed and run() raises it
                self.callback_error = exc
                self.wake.set()

    def take_recent(self) -> str:
        """Output since the last call, as text bounded to ``keep_chars`` (head and tail)."""
        data, dropped = b"".join(self.recent), self.recent_dropped
        self.recent, self.recent_size, self.recent_dropped = [], 0, 0
        text = data.decode("utf-8", errors="replace")
        if dropped:
            cut = min(len(text), self.keep_chars // 2)
            text = (text[:cut] + f"\n[... {dropped} bytes of output omitted ...]\n"
                    + text[cut:])
        return head_tail(text, self.keep_chars)

    def shell_ended(self, why: str) -> None:
        if not self.done.is_set():
            self.shell_lost = why
            for name, scanner in self.scanners.items():
                held = scanner.flush()
                if held:
                    self.capture.feed(name, held)
            self.done.set()
            self.wake.set()
