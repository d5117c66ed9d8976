"""ps, top and the progress display as a person sees them: in a real terminal (tmux).

The screen is read with capture-pane; what was drawn and erased (a progress line) is read
from the terminal's raw output, logged with pipe-pane.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig
from tests.conftest import docker_cli
from tests.integration._tmux import ROOT, Tmux
from tests.integration.test_pull import registry  # noqa: F401  (the loopback registry)

pytestmark = [pytest.mark.usefixtures("engine")]

#: Erase-line, sent before each rewrite (the pty hands the carriage return on as a newline).
ERASE = "\x1b[K"


@pytest.fixture
def term(tmp_path: Path) -> Iterator[Tmux]:
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        t.close()


async def wait_for(term: Tmux, text: str) -> str:
    # In a thread: the sandboxes of this test run on this event loop meanwhile.
    return await anyio.to_thread.run_sync(term.wait_for, text)


@pytest.mark.asyncio
async def test_ps_and_top_show_the_running_sandboxes(term: Tmux) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        await sb.execute_command("for i in 1 2 3; do sleep 300 >/dev/null 2>&1 & done")
        name = (await sb.get_info()).name
        # Other processes' sandboxes may fill the screen: this process's only.
        term.python("ps", "--owner", str(os.getpid()))
        screen = await wait_for(term, "== exit 0")
        assert re.search(r"NAME\s+IMAGE\s+STATE\s+AGE\s+OWNER", screen), screen
        line = next(ln for ln in screen.splitlines() if ln.startswith(name))
        assert re.fullmatch(rf"{name}\s+{IMAGE_BUSYBOX}\s+running\s+\d+s\s+alive "
                            rf"\(pid {os.getpid()}\)", line), line

        term.type("clear")
        term.python("top", "--owner", str(os.getpid()))
        # A row with numbers: CPU%, memory, MEM%, and the pids (sh's sleeps and init).
        pattern = re.compile(rf"{name}\s+{IMAGE_BUSYBOX}\s+\d+\.\d\s+[\d.]+ (?:B|KiB|MiB)"
                             rf"\s+\d+\.\d\s+(\d+)\s+alive")

        def row() -> re.Match[str]:
            for _ in range(100):
                screen = term.wait_for(name)
                if match := pattern.search(screen):
                    return match
                term.wait_for("PIDS")
            raise AssertionError(f"no full row for {name}:\n{term.screen()}")

        match = await anyio.to_thread.run_sync(row)
        assert int(match[1]) >= 3, match[0]
        assert "CPU%" in term.screen() and "MEM" in term.screen()
        term.keys("C-c")
        await wait_for(term, "== exit 130")


@pytest.mark.asyncio
async def test_top_fits_80_columns_says_how_to_quit_and_quits_on_q(tmp_path: Path) -> None:
    """Before: OWNER wrapped onto the next line at 80 columns, `q` did nothing and nothing
    said that only Ctrl-C ends it."""
    term = Tmux(tmp_path, width=80, height=24)
    try:
        name = f"sbx-top-{uuid.uuid4().hex}-a-long-name-to-cut"
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, name=name)):
            term.python("top", "--owner", str(os.getpid()))
            screen = await wait_for(term, "q to quit")
            screen = await wait_for(term, f"alive (pid {os.getpid()})")
            row = next(ln for ln in screen.splitlines() if ln.startswith(name[:10]))
            # The row is one line: it starts with the (cut) name and ends with the owner.
            assert row.rstrip().endswith(f"alive (pid {os.getpid()})"), screen
            assert "~" in row and len(row.rstrip()) <= 80, row
            term.keys("q")
            await wait_for(term, "== exit 0")
            # The terminal is back in its normal mode: a typed line is echoed.
            term.type("echo typed-$((6 * 7))")
            await wait_for(term, "typed-42")
    finally:
        term.close()


def test_image_build_progress_on_a_terminal_only(term: Tmux) -> None:
    tags = [f"sbx-progress-test:{uuid.uuid4().hex[:8]}" for _ in range(3)]
    try:
        term.python("images", "--only", "busybox", "--tag", tags[0])
        screen = term.wait_for("== exit 0")
        raw = term.raw()
        # Drawn and rewritten in place while it worked...
        assert f"{ERASE}[" in raw and f"building {tags[0]}: making its root filesystem" in raw
        assert f"importing {tags[0]}:" in raw and " of " in raw
        # ...and erased at the end: the screen keeps only the result.
        assert f"images: built {tags[0]}" in screen and "building" not in screen

        term.type("clear")
        term.python("images", "--quiet", "--only", "busybox", "--tag", tags[1])
        term.wait_for("== exit 0")
        assert f"building {tags[1]}" not in term.raw()

        # Not a terminal: no progress, just the result line.
        proc = subprocess.run(
            [sys.executable, "-m", "sandbox", "images", "--only", "busybox", "--tag", tags[2]],
            capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc
        assert proc.stderr == f"images: built {tags[2]}\n"
        for tag in tags:
            assert docker_cli("images", "-q", tag).strip()
        # What was built is a working image: the sandbox user owns its home.
        assert docker_cli("run", "--rm", "--network", "none", tags[0], "sh", "-c",
                          "stat -c %U /home/sandbox; echo $PATH") == \
            "sandbox\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    finally:
        docker_cli("rmi", *tags, check=False)


def test_pull_progress_on_a_terminal(term: Tmux, registry: str) -> None:  # noqa: F811
    ref = f"{registry}/sandbox/busybox:pulltest"
    try:
        term.python("run", "--image", ref, "--", "echo", "pulled-and-ran")
        screen = term.wait_for("== exit 0")
        assert "pulled-and-ran" in screen
        raw = term.raw()
        assert f"{ERASE}[" in raw and "pulling sandbox/busybox" in raw and "layers" in raw
        assert "layers" not in screen  # erased before the command's output
    finally:
        docker_cli("rmi", ref, check=False)
