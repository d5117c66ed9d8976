"""The Kubernetes session shell's death watch (`sandbox.kubernetes._watch`), by the host's sh."""

from __future__ import annotations

import os
import subprocess

from sandbox.kubernetes._watch import WATCH_SH


def test_the_watch_ends_rather_than_spins_when_sleep_cannot_run() -> None:
    # Its parent (this process) lives, so it loops; without `sleep` on PATH it must leave,
    # not spin on a core for the whole session (the old loop did: this run timed out).
    done = subprocess.run(["/bin/sh", "-c", WATCH_SH, "sandbox-watch", str(os.getpid()),
                           "SANDBOX_EXEC_MARK=x"], env={"PATH": "/nonexistent"},
                          capture_output=True, text=True, timeout=10, check=False)
    assert done.returncode == 0, done
