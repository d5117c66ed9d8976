"""Installed as a user would: build the wheel, install it into a fresh virtualenv, and use it
with no clone of the project on the path (its own builder, then a command in a sandbox)."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.usefixtures("engine"), pytest.mark.slow]


def run(argv: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH and a directory outside the clone: only the installed package is seen.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_wheel_installs_and_runs_without_the_clone(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist),
         str(ROOT)], cwd=tmp_path)
    [wheel] = dist.glob("sandbox-*.whl")
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    py = str(env_dir / "bin" / "python")
    run([py, "-m", "pip", "install", "--quiet", str(wheel)], cwd=tmp_path)

    where = run([py, "-c", "import sandbox; print(sandbox.__file__)"], cwd=tmp_path).stdout
    assert where.startswith(str(env_dir)) and str(ROOT) not in where

    images = run([py, "-m", "sandbox", "images"], cwd=tmp_path)
    assert "sandbox-python:latest is present" in images.stderr
    hi = run([py, "-m", "sandbox", "run", "--", "echo", "hi"], cwd=tmp_path)
    assert hi.stdout == "hi\n"
    # The console script too.
    assert run([str(env_dir / "bin" / "sandbox"), "run", "--", "echo", "hi"],
               cwd=tmp_path).stdout == "hi\n"
