"""A private tmux server for terminal tests: type into a real terminal, read its screen.

Each `Tmux` runs its own server (``tmux -L``), so nothing touches anyone's sessions; its
shell's raw output is also logged (pipe-pane), to see what was drawn and then erased.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Tmux:
    def __init__(self, tmp: Path, *, width: int = 160, height: int = 40) -> None:
        if shutil.which("tmux") is None:
            pytest.fail("tmux is missing (make test-tools installs it)", pytrace=False)
        self.server = f"sbx-test-{uuid.uuid4().hex[:8]}"
        self.log = tmp / "terminal.log"
        self.log.touch()
        env = f"PYTHONPATH={ROOT} PS1='$ ' TERM=xterm"
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height),
                   f"env {env} sh")
        self._tmux("pipe-pane", "-t", "t", f"cat >> {self.log}")

    def _tmux(self, *args: str) -> str:
        proc = subprocess.run(["tmux", "-L", self.server, *args], capture_output=True,
                              text=True, timeout=30, cwd=ROOT)
        if proc.returncode != 0:
            raise AssertionError(f"tmux {args[0]} failed: {proc.stderr}")
        return proc.stdout

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", "t", "-l", line)
        self._tmux("send-keys", "-t", "t", "Enter")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t")

    def python(self, *args: str) -> None:
        """Run ``python -m sandbox ARGS`` in the terminal, then print a marker with its status."""
        self.type(f"{sys.executable} -m sandbox {' '.join(args)}; echo \"== exit $?\"")

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """The screen once ``text`` is on it (within ``timeout`` seconds, else fail)."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if text in screen:
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} did not appear; the screen:\n{screen}")
            time.sleep(0.2)

    def raw(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.server, "kill-server"], capture_output=True,
                       timeout=30)
        with_socket = Path(f"/tmp/tmux-{os.getuid()}/{self.server}")
        with_socket.unlink(missing_ok=True)
