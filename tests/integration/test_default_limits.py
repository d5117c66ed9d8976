"""Issue 25: a default sandbox of every backend holds the same limits (`sandbox._limits`),
proven by attacks inside it: a fork bomb, a memory hog, a descriptor hog. Each attack is
bounded (see `_limit_attacks`), so on a sandbox without limits it fails the test, not the
host. The unprivileged (rlimit) case is in test_process_backend."""

from __future__ import annotations

import logging

import pytest

from sandbox import IMAGE_PYTHON, Command, Sandbox, SandboxConfig, SecurityPolicy
from sandbox._constants import DEFAULT_FILE_LIMIT, DEFAULT_PROCESS_LIMIT
from sandbox.process import ProcessBackend
from tests.integration._limit_attacks import (
    EAGAIN,
    EMFILE,
    FORK_BOMB,
    OPEN_FILES,
    memory_hog,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]
BACKENDS = ["docker", "process"]


def default_sandbox(kind: str) -> Sandbox:
    return Sandbox(SandboxConfig(type=kind, image=IMAGE_PYTHON))  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_fork_bomb_stops_at_the_default_process_limit(kind: str) -> None:
    async with default_sandbox(kind) as sb:
        result = await sb.execute_command(Command(
            executable="python3", args=("-c", FORK_BOMB), timeout=300))
        assert result.success, result
        count, err = map(int, result.stdout.split())
        # Before: 2,000 of 2,000 on the process backend. The rest of the limit is the
        # sandbox's own processes (its init, keep-alive, this python).
        assert err == EAGAIN and DEFAULT_PROCESS_LIMIT - 16 < count < DEFAULT_PROCESS_LIMIT
        assert (await sb.execute_command("echo alive")).stdout == "alive\n"


@pytest.mark.parametrize("kind", BACKENDS)
async def test_a_memory_hog_is_stopped_at_the_default_memory_limit(kind: str) -> None:
    async with default_sandbox(kind) as sb:
        result = await sb.execute_command(Command(
            executable="python3", args=("-c", memory_hog()), timeout=300))
        # Before: "survived" on the process backend (2.5 GiB of the host's memory).
        assert "survived" not in result.stdout
        assert result.oom_killed and result.signal == "SIGKILL", result
        assert (await sb.execute_command("echo alive")).stdout == "alive\n"


@pytest.mark.parametrize("kind", BACKENDS)
async def test_open_files_stop_at_the_default_file_limit(kind: str) -> None:
    async with default_sandbox(kind) as sb:
        shell = await sb.execute_command("ulimit -n; ulimit -Hn")
        assert shell.stdout.split() == [str(DEFAULT_FILE_LIMIT)] * 2
        result = await sb.execute_command(["python3", "-c", OPEN_FILES])
        assert result.success, result
        raised, soft, hard, count, err = map(int, result.stdout.split())
        # Before: Docker's own 20,000 (1,048,576 on the process backend) and 2,000 opened.
        assert (raised, soft, hard) == (0, DEFAULT_FILE_LIMIT, DEFAULT_FILE_LIMIT)
        assert err == EMFILE and DEFAULT_FILE_LIMIT - 16 < count < DEFAULT_FILE_LIMIT


async def test_the_process_sandbox_says_what_holds_its_limits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    config = SandboxConfig(type="process", image=IMAGE_PYTHON,
                           security=SecurityPolicy(log_security_events=True))
    async with Sandbox(config) as sb:
        backend = sb.backend
        assert isinstance(backend, ProcessBackend)
        held = backend.limits
        assert held["memory_limit"].endswith("bytes for the sandbox (cgroup)")
        assert held["process_limit"] == f"{DEFAULT_PROCESS_LIMIT} processes (pids cgroup)"
        assert held["file_limit"].startswith(f"{DEFAULT_FILE_LIMIT} open files per process")
        assert backend.cgroup is not None
        # The zygote joins while bwrap starts; it has joined once a command has run.
        assert (await sb.execute_command("true")).success
        assert backend.cgroup.procs()  # the sandbox's processes are in it
    audit = [getattr(r, "audit", {}) for r in caplog.records if r.name == "sandbox.audit"]
    events = [record for record in audit if record.get("event") == "resources"]
    assert [e["limits"] for e in events] == [held]
