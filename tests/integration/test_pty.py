"""Commands on a pseudo-terminal: a REPL driven by prompt, input and output; resize; Ctrl-C."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    ConfigError,
    OutputChunk,
    Process,
    Sandbox,
    SandboxConfig,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


class Screen:
    """What the terminal showed so far; `until` waits for a text to appear after a mark."""

    def __init__(self, proc: Process) -> None:
        self.proc = proc
        self.data = bytearray()
        self.seen = 0
        self._chunks: AsyncIterator[OutputChunk] = proc.__aiter__()

    async def until(self, text: bytes) -> bytes:
        with anyio.fail_after(30):
            while (at := self.data.find(text, self.seen)) < 0:
                chunk = await self._chunks.__anext__()
                assert chunk.stream == "stdout"  # a terminal has one stream
                self.data += chunk.data
        shown = bytes(self.data[self.seen : at + len(text)])
        self.seen = at + len(text)
        return shown


KINDS = pytest.mark.parametrize("kind", ["docker", "process"])


@KINDS
async def test_python_repl_over_a_pty(kind: str) -> None:
    async with Sandbox(SandboxConfig(type=kind, image=IMAGE_PYTHON)) as sb, \
            sb.stream_command(["python3", "-q", "-i"], tty=True) as proc:
        screen = Screen(proc)
        await proc.resize(40, 100)
        await screen.until(b">>> ")
        await proc.write_stdin("import os, shutil\n")
        # Past the line's echo first: the resize's SIGWINCH may have readline draw the first
        # prompt again, which would else be taken for the one after the import.
        await screen.until(b"import os, shutil\r\n")
        await screen.until(b">>> ")
        await proc.write_stdin("print(6 * 7, os.isatty(0), tuple(shutil.get_terminal_size()))\n")
        shown = await screen.until(b">>> ")
        assert b"42 True (100, 40)\r\n" in shown  # the pty's CRLF, the size we set
        await proc.write_stdin("for i in range(3):\n")
        await screen.until(b"... ")  # the continuation prompt
        await proc.write_stdin("    print('line', i)\n\n")
        shown = await screen.until(b">>> ")
        assert b"line 0\r\nline 1\r\nline 2\r\n" in shown
        await proc.write_stdin("import time; time.sleep(120)\n")
        await anyio.sleep(0.5)  # not a timed assertion: Ctrl-C works either way
        await proc.write_stdin(b"\x03")  # Ctrl-C: the statement, not the REPL
        shown = await screen.until(b">>> ")
        assert b"KeyboardInterrupt" in shown
        await proc.write_stdin("exit(5)\n")
        with anyio.fail_after(30):
            result = await proc.wait()
        assert result.exit_code == 5


@KINDS
async def test_shell_on_a_pty_has_job_control_and_ctrl_c(kind: str) -> None:
    async with Sandbox(SandboxConfig(type=kind, image=IMAGE_BUSYBOX)) as sb, \
            sb.stream_command(["/bin/sh", "-i"], tty=True) as proc:
        screen = Screen(proc)
        await proc.write_stdin("stty size; echo marker-$((40 + 2))\n")
        shown = await screen.until(b"marker-42")
        await proc.resize(33, 77)
        await proc.write_stdin("stty size; echo marker-$((50 + 2))\n")
        assert b"33 77" in await screen.until(b"marker-52")
        await proc.write_stdin("sleep 120; echo after-$((1 + 1))\n")
        await anyio.sleep(0.5)
        await proc.write_stdin(b"\x03")
        await proc.write_stdin("echo alive-$((3 + 4))\n")
        shown = await screen.until(b"alive-7")
        assert b"after-2" not in shown  # the whole line was interrupted, the shell lives
        await proc.write_stdin("exit 3\n")
        with anyio.fail_after(30):
            result = await proc.wait()
        assert result.exit_code == 3
        assert b"can't access tty" not in screen.data and b"job control" not in screen.data


@KINDS
async def test_resize_refuses_bad_sizes(kind: str) -> None:
    async with Sandbox(SandboxConfig(type=kind, image=IMAGE_BUSYBOX)) as sb, \
            sb.stream_command(["cat"], tty=True) as proc:
        for rows, cols in ((0, 80), (24, 70000), (True, 80)):
            with pytest.raises(ConfigError, match=r"(rows|cols) must be"):
                await proc.resize(rows, cols)
