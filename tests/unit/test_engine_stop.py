"""`scripts/engine.sh stop` stops only the dockerd the script started, never another process.

The real engine is not touched: each test points the script's state dir at a temporary one
whose pidfile names a process the test started (a copy of `sleep` named `dockerd`, or a plain
`sleep`), as a leftover or reused pid would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _stop(state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "scripts" / "engine.sh"), "stop"],
                          env={**os.environ, "SANDBOX_ENGINE_DIR": str(state)},
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_stop_ends_the_dockerd_its_pidfile_names(tmp_path: Path,
                                                  started: list[subprocess.Popen[bytes]]) -> None:
    fake = tmp_path / "dockerd"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    proc = subprocess.Popen([str(fake), "600"])
    started.append(proc)
    (tmp_path / "dockerd.pid").write_text(f"{proc.pid}\n")
    out = _stop(tmp_path)
    assert out.returncode == 0, out.stderr
    assert proc.wait(timeout=60) is not None
    assert "which this script started" in out.stderr
    assert not (tmp_path / "dockerd.pid").exists()


def test_stop_leaves_a_process_that_is_not_dockerd(tmp_path: Path,
                                                   started: list[subprocess.Popen[bytes]]) -> None:
    """A pidfile whose pid was reused by another program: that program survives."""
    proc = subprocess.Popen(["sleep", "600"])
    started.append(proc)
    (tmp_path / "dockerd.pid").write_text(f"{proc.pid}\n")
    out = _stop(tmp_path)
    assert out.returncode == 0, out.stderr
    assert proc.poll() is None
    assert "not started by this script" in out.stderr or "nothing to stop" in out.stderr


def test_stop_without_a_pidfile_stops_nothing(tmp_path: Path) -> None:
    out = _stop(tmp_path)
    assert out.returncode == 0
    assert "stopping" not in out.stderr
