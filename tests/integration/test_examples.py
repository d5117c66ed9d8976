"""Run every example as a user would, so they never rot: exit status 0 and a key line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

pytestmark = pytest.mark.usefixtures("engine")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

#: example -> patterns its output must contain (each a regex over stdout).
EXPECTED = {
    "quickstart.py": [r"python3 said: hello from", r"timed_out=True signal=SIGKILL",
                      r"cleaned up: destroyed"],
    "agent_loop.py": [r"stderr\| NameError: name 'value' is not defined",
                      r"replacing it with 'values'", r"stdout\| step 5: mean of 1..5 = 3.0",
                      r"agent: success after 2 attempt\(s\)"],
    "repo_task.py": [r"FAILED \(failures=1\)", r"tests after the fix: exit 0, OK",
                     r"\n-    return a - b\n\+    return a \+ b\n",
                     r"calc.py on the host now reads:     return a \+ b"],
    "parallel.py": [r"too slow\s+-?\d+ timeout", r"fails\s+3 failed\s",
                    r"count\s+0 ok\s+[\d.]+\s+100000",
                    r"10 tasks in 10 sandboxes, 8 succeeded"],
    "mcp_client.py": [r"tools: run_command, read_file, write_file, list_files, resource_usage, "
                      r"session_run, session_poll, session_write, session_kill",
                      r"session_run: running as job 1, so far: /tmp",
                      r"session_poll: exit 0, stdout: /tmp built",
                      r"run_command: exit 0, stdout: hello from Linux as uid 1000",
                      r"read_file out.txt: written inside the sandbox",
                      r"list_files: hello.py, out.txt", r"timed_out = True",
                      r"resource_usage: \d+ KiB of memory, \d+ processes"],
    "mcp_in_sandbox.py": [r"python3 in the sandbox: /usr/bin/python3",
                          r"the server offers: add, run_python, whoami, crash",
                          r"agent called whoami: uid=1000 cwd=/workspace",
                          r"agent called add: 42", r"sees the host files: False",
                          r"the server crashed: exited with status 3; its stderr ends: tiny "
                          r"server: crashing as asked"],
    "monitor.py": [r"\[\s*\d+\.\d s\] cpu\s+\d+\.\d %\s+memory", r"cpu hog done",
                   r"memory hog held 192 MiB", r"peak cpu \d+ %, peak memory \d+ MiB"],
    "eval_pool.py": [r"pool warm: 4 sandboxes ready",
                     r"50 tasks through a pool of 4 in \d+\.\d+ s \(\d+\.\d tasks/s",
                     r"all 50 answers correct; secrets seen by a later task: 0",
                     r"acquire p50 \d+\.\d ms, p95 \d+\.\d ms", r"\d+ tasks served by a reset"],
    "inspect_task.py": [r"eval: success, sandbox: sandbox-docker",
                        r"bash in the sandbox said: 'sandbox\\n42'", r"includes: accuracy 1\.0"],
    "deep_agent.py": [r"tool execute in the sandbox said: 'sandbox\\n42\\n",
                      r"agent: The sandbox says 6 \* 7 = 42\.",
                      r"/tmp/answer.txt in the sandbox held: b'42\\n'",
                      r"sandbox [0-9a-f]+: destroyed"],
}
#: Examples that import a whole framework (seconds of imports on a loaded host) get longer.
TIME_LIMITS = {"inspect_task.py": 180, "deep_agent.py": 180}


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(EXPECTED))
async def test_example_runs(name: str) -> None:
    with anyio.fail_after(TIME_LIMITS.get(name, 60)):
        proc = await anyio.run_process(
            [sys.executable, "-W", "error::ResourceWarning", str(EXAMPLES / name)],
            cwd=ROOT, check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            # The checkout first, so the examples use this tree even if not installed.
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)},
        )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{out}\n{err}"
    for pattern in EXPECTED[name]:
        assert re.search(pattern, out), f"{name}: no match for {pattern!r} in:\n{out}"
    for bad in ("Traceback", "ResourceWarning", "Unclosed", "Task was destroyed"):
        assert bad not in err, f"{name} wrote {bad!r} to stderr:\n{err}"


@pytest.mark.asyncio
async def test_the_readme_fifteen_lines_run(tmp_path: Path) -> None:
    """The README's first code block, as a reader would paste it, runs with the defaults."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Fifteen lines", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "fifteen.py"
    script.write_text(code)
    with anyio.fail_after(60):
        proc = await anyio.run_process(
            [sys.executable, "-W", "error::ResourceWarning", str(script)], cwd=tmp_path,
            check=False, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)},
        )
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert proc.returncode == 0, f"exited {proc.returncode}\n{out}\n{err}"
    assert out.startswith("[1, 1, 2, 3, 5]\n0 0:00:00.") and out.endswith("hi\n\n"), out
