"""A process sandbox's cgroup removal kills by pidfd only what its cgroup still lists once the
pidfd is open: a pid read earlier may name a host process by then (ended, pid reused)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbox.process._cgroup import _kill_and_wait


def test_a_pid_no_longer_listed_is_spared_and_a_listed_one_killed(tmp_path: Path) -> None:
    bystander = subprocess.Popen(["sleep", "60"])
    member = subprocess.Popen(["sleep", "60"])
    try:
        procs = tmp_path / "cgroup.procs"
        procs.write_text(f"{member.pid}\n")  # the list as it is when the pidfds are open
        _kill_and_wait({bystander.pid, member.pid}, [str(procs)], 5.0)
        assert member.wait(5) == -9
        assert bystander.poll() is None  # read earlier, not listed now: never signalled
    finally:
        for proc in (bystander, member):
            proc.kill()
            proc.wait()
