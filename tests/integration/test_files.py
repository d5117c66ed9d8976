"""Files in a real container: write, read, list, copy both ways, errors."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    FileOperationFailed,
    Sandbox,
    SandboxConfig,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPermissionDenied,
    SecurityPolicy,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


async def test_write_read_list() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        await sb.write_file("deep/er/hello.txt", "hi\n", mode=0o600)
        assert await sb.read_file("/workspace/deep/er/hello.txt") == b"hi\n"
        assert (await sb.execute_command("cat deep/er/hello.txt")).stdout == "hi\n"
        infos = {i.name: i for i in await sb.list_files("deep/er")}
        info = infos["hello.txt"]
        assert info.path == "/workspace/deep/er/hello.txt"
        assert info.size == 3 and info.mode == 0o600 and not info.is_dir
        assert info.permissions == "-rw-------"
        # The SDK's default user: the image's "sandbox" (1000:1000).
        assert info.owner == "sandbox" and info.group == "sandbox"
        assert info.mod_time is not None
        top = {i.name: i for i in await sb.list_files(".")}
        assert top["deep"].is_dir and top["deep"].permissions.startswith("d")
        # `..` that escapes nothing is normalized
        assert await sb.read_file("deep/../deep/er/./hello.txt") == b"hi\n"


async def test_file_errors_name_path_and_reason() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        with pytest.raises(SandboxFileNotFound, match=r"missing\.txt") as ei:
            await sb.read_file("missing.txt")
        assert isinstance(ei.value, FileNotFoundError)
        assert ei.value.path == "/workspace/missing.txt"
        with pytest.raises(SandboxIsADirectory):
            await sb.read_file("/etc")
        with pytest.raises(SandboxFileNotFound):
            await sb.list_files("/nope")
        with pytest.raises(FileOperationFailed):
            await sb.write_file("/proc/version", "x")
        with pytest.raises(FileOperationFailed, match="does not exist"):
            await sb.set_working_directory("/nope")
        with pytest.raises(FileOperationFailed, match="not a directory"):
            await sb.set_working_directory("/etc/passwd")


async def test_write_to_read_only_location_as_user() -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=SecurityPolicy(run_as_user="1000"))
    async with Sandbox(cfg) as sb:
        with pytest.raises(SandboxPermissionDenied, match="/etc/x"):
            await sb.write_file("/etc/x", "no")
        await sb.write_file("mine.txt", "yes")  # the working dir belongs to the user
        infos = await sb.list_files("mine.txt")
        assert infos[0].owner in ("sandbox", "1000")


async def test_read_file_refuses_devices_and_fifos_at_once() -> None:
    """A device or FIFO has no end: read_file must refuse, not hang or fill memory."""
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        r = await sb.execute_command("mkfifo /tmp/pipe && ln -s /dev/zero /tmp/zero")
        assert r.success, r
        for path in ("/dev/zero", "/dev/urandom", "/tmp/pipe", "/tmp/zero"):
            with anyio.fail_after(5), pytest.raises(FileOperationFailed,
                                                     match="not a regular file") as ei:
                await sb.read_file(path)
            assert path in str(ei.value) and "head" in str(ei.value)
        # A symlink to a regular file is still read through; a dangling one is missing.
        await sb.execute_command("echo hi > /tmp/real && ln -s /tmp/real /tmp/link && "
                                 "ln -s /tmp/gone /tmp/dangling")
        assert await sb.read_file("/tmp/link") == b"hi\n"
        with pytest.raises(SandboxFileNotFound, match="/tmp/dangling"):
            await sb.read_file("/tmp/dangling")


@pytest.mark.slow
async def test_100_mib_round_trip_intact() -> None:
    data = os.urandom(100 * 1024 * 1024)
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        await sb.write_file("big.bin", data)
        r = await sb.execute_command("sha256sum big.bin")
        assert r.stdout.split()[0] == hashlib.sha256(data).hexdigest()
        back = await sb.read_file("big.bin")
        assert hashlib.sha256(back).hexdigest() == hashlib.sha256(data).hexdigest()


async def test_copy_tree_both_ways(tmp_path: Path) -> None:
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("print('x')\n")
    (src / "run.sh").write_text("#!/bin/sh\necho run\n")
    (src / "run.sh").chmod(0o755)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        await sb.copy_files(str(src), "sandbox:/workspace")
        r = await sb.execute_command("./proj/run.sh && cat proj/pkg/mod.py")
        assert r.stdout == "run\nprint('x')\n"
        await sb.copy_files(str(src / "run.sh"), "sandbox:renamed.sh")
        assert (await sb.execute_command("./renamed.sh")).stdout == "run\n"
        await sb.execute_command("echo new > proj/pkg/new.txt && chmod 664 proj/pkg/new.txt "
                                 "&& chmod 2775 proj/pkg && chmod u+s proj/run.sh")
        out = tmp_path / "out"
        out.mkdir()
        await sb.copy_files("sandbox:/workspace/proj", str(out))
        assert (out / "proj" / "pkg" / "new.txt").read_text() == "new\n"
        # Modes come back as they were, but never setuid/setgid onto the host.
        assert stat.S_IMODE((out / "proj" / "run.sh").stat().st_mode) == 0o755
        assert stat.S_IMODE((out / "proj" / "pkg" / "new.txt").stat().st_mode) == 0o664
        assert stat.S_IMODE((out / "proj" / "pkg").stat().st_mode) == 0o775
        await sb.copy_files("sandbox:proj/pkg/mod.py", str(tmp_path / "single.py"))
        assert (tmp_path / "single.py").read_text() == "print('x')\n"
        with pytest.raises(SandboxFileNotFound):
            await sb.copy_files("sandbox:/nope", str(out))
        with pytest.raises(FileOperationFailed):
            await sb.copy_files(str(src), str(out))
