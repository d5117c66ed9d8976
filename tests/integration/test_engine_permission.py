"""A user who may not open the engine's socket is told so, and how to fix it (docker group).

The test runs the CLI as root without the capabilities that bypass file permissions
(setpriv drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH), against a socket that listens but
belongs to another user with mode 0600: connect() then fails with EACCES, as for a user
outside the docker group.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DROP = "-dac_override,-dac_read_search"


@pytest.fixture
def foreign_socket() -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("this test needs root and setpriv (util-linux), as `make test` has")
    with tempfile.TemporaryDirectory(prefix="sbx-perm-") as tmp:
        path = Path(tmp) / "engine.sock"
        listener = socket.socket(socket.AF_UNIX)
        try:
            listener.bind(str(path))
            listener.listen(1)
            os.chown(path, 12345, 12345)
            path.chmod(0o600)
            yield path
        finally:
            listener.close()


def test_permission_denied_on_the_socket_names_the_docker_group(foreign_socket: Path) -> None:
    proc = subprocess.run(
        ["setpriv", f"--inh-caps={DROP}", f"--bounding-set={DROP}",
         sys.executable, "-m", "sandbox", "run", "--", "echo", "hi"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, "DOCKER_HOST": f"unix://{foreign_socket}",
             "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 1, proc
    err = proc.stderr
    assert "permission denied on the Docker engine's socket" in err, err
    assert str(foreign_socket) in err and "docker group" in err, err
    assert "no Docker engine answers" not in err and "make " not in err, err
