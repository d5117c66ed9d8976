"""`sandbox shell` on a terminal: the sandbox's shell gets a terminal of its own."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import sys
import termios

import anyio
import anyio.to_thread
import pytest

from sandbox import IMAGE_BUSYBOX

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


class Terminal:
    """The host side of a pseudo-terminal the CLI runs on."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.data = bytearray()

    async def until(self, text: bytes) -> None:
        with anyio.fail_after(60):
            while text not in self.data:
                chunk = await anyio.to_thread.run_sync(os.read, self.master, 65536,
                                                       abandon_on_cancel=True)
                if not chunk:
                    raise AssertionError(f"terminal closed before {text!r}: {self.data!r}")
                self.data += chunk

    def type(self, text: bytes) -> None:
        os.write(self.master, text)


async def test_shell_on_a_terminal_has_keys_size_and_ctrl_c() -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 31, 93, 0, 0))
    proc = await anyio.open_process(
        [sys.executable, "-m", "sandbox", "shell", "--image", IMAGE_BUSYBOX],
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    term = Terminal(master)
    try:
        await term.until(b"$ ")  # busybox's line editor asks the terminal first: wait
        term.type(b"stty size; echo m-$((6 * 7))\n")
        await term.until(b"m-42")
        assert b"31 93" in term.data  # our size, given to the sandbox's terminal
        term.type(b"sleep 100; echo after-$((1 + 1))\n")
        await anyio.sleep(1)  # not timed: Ctrl-C interrupts the line either way
        term.type(b"\x03")
        term.type(b"echo alive-$((3 + 4))\n")
        await term.until(b"alive-7")
        term.type(b"exit 4\n")
        with anyio.fail_after(60):
            code = await proc.wait()
        assert code == 4
        assert b"after-2" not in term.data
        assert b"can't access tty" not in term.data and b"job control" not in term.data
    finally:
        if proc.returncode is None:
            proc.terminate()
            with anyio.fail_after(30):
                await proc.wait()
        await proc.aclose()
        os.close(master)
