"""The command line as a user runs it: `python -m sandbox run|shell|config` in a subprocess."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, ResourceLimits, SandboxConfig, from_json

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


async def cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    with anyio.fail_after(60):
        return await anyio.run_process(
            [sys.executable, "-m", "sandbox", *args], input=stdin, check=False,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )


def one_line_error(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode()
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "error:" in err, err
    return err


async def test_run_propagates_exit_code_and_separates_streams() -> None:
    proc = await cli("run", "--image", IMAGE_BUSYBOX, "--",
                     "sh", "-c", "echo out; echo err >&2; exit 7")
    assert proc.returncode == 7, proc
    assert proc.stdout == b"out\n"
    assert proc.stderr == b"err\n"


async def test_run_streams_output_as_it_comes() -> None:
    async with await anyio.open_process(
        [sys.executable, "-m", "sandbox", "run", "--image", IMAGE_BUSYBOX, "--",
         "sh", "-c", "echo one; sleep 1.5; echo two"],
    ) as proc:
        assert proc.stdout is not None
        seen: list[tuple[float, bytes]] = []
        buf = b""
        with anyio.fail_after(60):
            async for data in proc.stdout:
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    seen.append((time.monotonic(), line))
            assert await proc.wait() == 0
    assert [line for _, line in seen] == [b"one", b"two"]
    assert seen[1][0] - seen[0][0] > 1.0, "'one' was held back until the command ended"


async def test_run_timeout_exits_124() -> None:
    started = time.monotonic()
    proc = await cli("run", "--image", IMAGE_BUSYBOX, "--timeout", "1", "--", "sleep", "30")
    assert proc.returncode == 124, proc
    assert b"timed out after 1 s" in proc.stderr
    assert time.monotonic() - started < 28  # sleep 30 was cut short, sandbox set-up included


async def test_run_read_only_mount_refuses_writes(tmp_path: Path) -> None:
    (tmp_path / "hello.txt").write_text("from the host\n")
    await anyio.Path(tmp_path).chmod(0o755)  # pytest makes it 0700: closed to the sandbox user
    proc = await cli("run", "--image", IMAGE_BUSYBOX, "--mount", f"{tmp_path}:ro", "--",
                     "sh", "-c", "cat /workspace/hello.txt && touch /workspace/new")
    assert proc.stdout == b"from the host\n"
    assert proc.returncode == 1, proc
    assert b"Read-only file system" in proc.stderr
    assert [p.name async for p in anyio.Path(tmp_path).iterdir()] == ["hello.txt"]


async def test_run_missing_executable_is_one_line_error() -> None:
    proc = await cli("run", "--image", IMAGE_BUSYBOX, "--", "/no/such/program")
    assert proc.returncode == 1
    assert "/no/such/program" in one_line_error(proc)


async def test_config_json_round_trips() -> None:
    proc = await cli("config", "--json")
    assert proc.returncode == 0, proc
    assert from_json(proc.stdout, SandboxConfig) == SandboxConfig()


async def test_config_file_then_flags(tmp_path: Path) -> None:
    base = await cli("config", "--json", "--image", IMAGE_BUSYBOX, "--memory", "1g")
    path = tmp_path / "sandbox.json"
    path.write_bytes(base.stdout)
    proc = await cli("config", "--json", "--config", str(path), "--cpus", "1.5",
                     "--memory", "512m", "--network")
    cfg = from_json(proc.stdout, SandboxConfig)
    assert cfg.image == IMAGE_BUSYBOX
    assert cfg.resources == ResourceLimits(memory_limit=512 << 20, cpu_limit=1.5)
    assert not cfg.network.isolated and cfg.security.allow_networking


async def test_bad_input_is_a_one_line_usage_error(tmp_path: Path) -> None:
    proc = await cli("run", "--memory", "lots", "--", "true")
    assert proc.returncode == 2
    assert "--memory" in one_line_error(proc) and "'lots'" in proc.stderr.decode()
    bad = tmp_path / "bad.json"
    bad.write_text('{"resources": {"memory_limit": "5"}}')
    proc = await cli("config", "--config", str(bad))
    assert proc.returncode == 2
    assert "resources.memory_limit" in one_line_error(proc)


async def test_shell_reads_commands_from_a_pipe() -> None:
    proc = await cli("shell", "--image", IMAGE_BUSYBOX, stdin=b"echo hi; exit 3\n")
    assert proc.returncode == 3, proc
    assert proc.stdout == b"hi\n"
