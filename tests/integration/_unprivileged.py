"""Run a Python script of the SDK as another host user (``setpriv``), for the tests that play
a non-root SDK: the process backend maps the sandbox user to that uid."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import anyio
import pytest

REPO = str(Path(__file__).resolve().parents[2])


def python_for(uid: int) -> tuple[str, str]:
    """A Python ``uid`` may run with this one's packages: (executable, PYTHONPATH tail). This
    interpreter, or the system's of the same version with our site-packages on the path."""
    paths = os.pathsep.join(dict.fromkeys(
        [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
    for exe in (sys.executable, f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"):
        ok = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                             exe, "-c", "import attrs, anyio"], env={
                                 "PATH": "/usr/bin:/bin", "PYTHONPATH": paths},
                            capture_output=True, timeout=60)
        if ok.returncode == 0:
            return exe, paths
    pytest.skip(f"no Python with the SDK's packages that uid {uid} may run")


async def run_as(uid: int, script: str, *args: str) -> Any:
    """Run ``script`` (Python source) as host ``uid`` with ``args``; its stdout's JSON. Must
    be called as root (it switches users); fails with the script's stderr if it fails."""
    if os.geteuid() != 0:
        pytest.fail(f"this test switches to uid {uid}, so it must run as root", pytrace=False)
    exe, paths = python_for(uid)
    home = Path(tempfile.mkdtemp())
    os.chmod(home, 0o755)
    path = home / "script.py"
    path.write_text(script)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home),
           "PYTHONPATH": os.pathsep.join([REPO, paths])}
    with anyio.fail_after(300):
        proc = await anyio.run_process(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", exe, str(path),
             *args], env=env, check=False, cwd=str(home))
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return json.loads(proc.stdout)
