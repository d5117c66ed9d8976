"""scripts/engine.sh as `make test` runs it: idempotent on a running engine, clear without root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import docker_cli

pytestmark = pytest.mark.usefixtures("engine")

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "engine.sh"
NOBODY = 65534  # nobody / nogroup on Debian
STATE_DIR = Path(os.environ.get("SANDBOX_ENGINE_DIR", "/var/lib/sandbox-engine"))


def as_user(uid: int) -> list[str]:
    return ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]


def run_script(env: dict[str, str] | None = None,
               user: int | None = None) -> subprocess.CompletedProcess[str]:
    if user is None:
        argv = ["bash", str(SCRIPT)]
        stdin = None
    else:
        # The script is fed on stdin: the account need not be able to read the checkout.
        argv = [*as_user(user), "bash", "-s"]
        stdin = SCRIPT.read_text()
    return subprocess.run(argv, cwd=REPO, env=env if env is not None else dict(os.environ),
                          input=stdin, capture_output=True, text=True, timeout=180)


def engine_id() -> str:
    return docker_cli("info", "--format", "{{.ID}}").strip()


def dockerd_pids() -> set[int]:
    return {int(p.name) for p in Path("/proc").iterdir()
            if p.name.isdigit() and _comm(p) == "dockerd"}


def _comm(proc_dir: Path) -> str:
    try:
        return (proc_dir / "comm").read_text().strip()
    except OSError:
        return ""


def pidfile() -> str | None:
    path = STATE_DIR / "dockerd.pid"
    return path.read_text().strip() if path.exists() else None


def test_second_and_third_runs_use_the_running_engine_and_change_nothing() -> None:
    before = (engine_id(), pidfile(), dockerd_pids())
    if before[1] is not None:
        assert int(before[1]) in before[2], f"pidfile names {before[1]}, not a running dockerd"
    for attempt in (1, 2):
        proc = run_script()
        assert proc.returncode == 0, (attempt, proc.stderr)
        assert "answers at" in proc.stderr and "using it" in proc.stderr, (attempt, proc.stderr)
        assert "starting dockerd" not in proc.stderr, (attempt, proc.stderr)
        assert "installing" not in proc.stderr, (attempt, proc.stderr)
        assert (engine_id(), pidfile(), dockerd_pids()) == before, attempt


def unprivileged_env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "HOME": "/nonexistent", "LANG": "C.UTF-8", **extra}


def nobody_reaches_engine() -> bool:
    probe = subprocess.run(
        [*as_user(NOBODY), "docker", "version", "--format", "{{.Server.Version}}"],
        env=unprivileged_env(), capture_output=True, text=True, timeout=30)
    return probe.returncode == 0


def test_without_root_and_without_an_engine_it_says_how_to_get_docker() -> None:
    # The engine's socket is root:docker 0660, so `nobody` sees no engine at the default socket
    # and takes the "cannot start one" path, which exits before installing anything.
    assert not nobody_reaches_engine(), "nobody can reach the engine; this path is not testable"
    proc = run_script(env=unprivileged_env(), user=NOBODY)
    assert proc.returncode == 1, proc
    assert "can only start one as root" in proc.stderr, proc.stderr
    assert "Install Docker (https://docs.docker.com/engine/install/" in proc.stderr, proc.stderr
    assert "installing" not in proc.stderr and "starting dockerd" not in proc.stderr


def test_docker_host_without_an_engine_fails_and_names_it(tmp_path: Path) -> None:
    missing = tmp_path / "no-engine-here.sock"
    proc = run_script(env=unprivileged_env(DOCKER_HOST=f"unix://{missing}"), user=NOBODY)
    assert proc.returncode == 1, proc
    assert f"DOCKER_HOST=unix://{missing} is set but no engine answers" in proc.stderr, proc.stderr
    assert "unset DOCKER_HOST" in proc.stderr, proc.stderr
    assert "installing" not in proc.stderr and "starting dockerd" not in proc.stderr
