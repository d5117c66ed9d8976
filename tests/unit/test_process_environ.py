"""`_environ.read_environ`: a process's environment from its memory is the bytes its /proc
file gives (the kill sweep's fallback where the kernel closes that file to a non-root SDK)."""

from __future__ import annotations

import os
import subprocess
import sys

from sandbox.process import _environ


def test_memory_and_proc_agree_and_a_gone_process_reads_as_none() -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SANDBOX_EXEC_ID": "x" * 70_000,
           "LAST": "1"}
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    try:
        # Up and running: Popen returns at the exec's close-on-exec, before the kernel has
        # laid out the new environment (its /proc file then reads empty).
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        with open(f"/proc/{child.pid}/environ", "rb") as f:
            proc = f.read()
        memory = _environ._from_memory(child.pid)
        assert memory == proc == _environ.read_environ(child.pid)
        assert b"SANDBOX_EXEC_ID=" + b"x" * 70_000 in memory.split(b"\0")
    finally:
        child.communicate(b"")
    assert _environ._from_memory(child.pid) is None  # reaped: no such process
    assert _environ.read_environ(child.pid) is None
