"""Copying out of a sandbox whose root replaced tar, or whose files point at the host."""

from __future__ import annotations

import io
import os
import stat
import tarfile
import time
from pathlib import Path

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    ConfigError,
    CopyLimitExceeded,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
    UnsafeArchive,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: The attacker: root in the sandbox (an explicit opt-in since the defaults are non-root),
#: who can replace any tool the SDK execs.
HOSTILE_ROOT = SecurityPolicy(run_as_user="root")

# The SDK execs `tar` through PATH with /bin/sh. Debian's dash looks it up in PATH (busybox sh
# runs its own applet whatever is in PATH), so the root of a python sandbox can swap it.
FAKE_TAR = "#!/bin/sh\nexec cat /tmp/evil.tar\n"


def tar_bytes(*members: tuple[tarfile.TarInfo, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "",
           mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


def hostile_archives(host: Path) -> list[tuple[str, bytes]]:
    """(member the error must name, archive): each once wrote outside or made a device."""
    ok = (member("proj", tarfile.DIRTYPE, mode=0o755), None)
    dev = member("proj/null", tarfile.CHRTYPE)
    dev.devmajor, dev.devminor = 1, 3
    return [
        ("proj/../escaped", tar_bytes(ok, (member("proj/../escaped"), b"evil"))),
        ("proj/dir/lnk/escaped", tar_bytes(
            ok, (member("proj/dir", tarfile.DIRTYPE), None),
            (member("proj/dir/lnk", tarfile.SYMTYPE, ".."), None),
            (member("proj/dir/lnk/escaped"), b"evil"))),
        (str(host / "escaped"), tar_bytes(ok, (member(str(host / "escaped")), b"evil"))),
        ("proj/null", tar_bytes(ok, (dev, None))),
        ("proj/host", tar_bytes(ok, (member("proj/host", tarfile.SYMTYPE, "/etc/hostname"),
                                     None))),
    ]


def host_is_clean(host: Path, dest: Path) -> None:
    """Nothing beside or at the destination, no device node anywhere under the host dir."""
    assert sorted(os.listdir(host)) == ["dest", "victim"]
    assert os.listdir(dest) == []
    for root, dirs, files in os.walk(host):
        for name in dirs + files:
            mode = os.lstat(os.path.join(root, name)).st_mode
            assert not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode))
    assert (host / "victim").read_text() == "host"


async def test_a_replaced_tar_cannot_write_outside_make_devices_or_chown(tmp_path: Path) -> None:
    host, dest = tmp_path, tmp_path / "dest"
    dest.mkdir()
    (host / "victim").write_text("host")
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, security=HOSTILE_ROOT)) as sb:
        assert (await sb.execute_command("id -u")).stdout == "0\n"  # root in the sandbox
        r = await sb.execute_command("mkdir -p /workspace/proj && rm /usr/bin/tar")
        assert r.success, r
        await sb.write_file("/usr/bin/tar", FAKE_TAR, 0o755)
        for name, archive in hostile_archives(host):
            await sb.write_file("/tmp/evil.tar", archive)
            with pytest.raises(UnsafeArchive) as info:
                await sb.copy_files("sandbox:/workspace/proj", str(dest))
            assert info.value.member == name and repr(name) in str(info.value)
            host_is_clean(host, dest)
        # Ownership never comes from the archive (the host side runs as root here).
        owned = member("proj/owned")
        owned.uid = owned.gid = 4242
        await sb.write_file("/tmp/evil.tar", tar_bytes(
            (member("proj", tarfile.DIRTYPE, mode=0o755), None), (owned, b"mine")))
        await sb.copy_files("sandbox:/workspace/proj", str(dest))
        st = (dest / "proj" / "owned").lstat()
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


async def test_a_never_ending_tar_is_cut_off_and_killed(tmp_path: Path) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, security=HOSTILE_ROOT)) as sb:
        await sb.execute_command("mkdir -p /workspace/proj && rm /usr/bin/tar")
        await sb.write_file("/usr/bin/tar", "#!/bin/sh\nexec cat /dev/zero\n", 0o755)
        start = time.monotonic()
        with pytest.raises(CopyLimitExceeded) as info:
            await sb.copy_files("sandbox:/workspace/proj", str(tmp_path), max_bytes=1 << 20,
                                max_entries=10)
        assert time.monotonic() - start < 25  # cut off, not read on for the kill's 30 s
        assert info.value.limit == "max_bytes" and "max_bytes=1048576" in str(info.value)
        assert os.listdir(tmp_path) == []
        ps = await sb.execute_command("ps -eo comm")
        assert "cat" not in ps.stdout.split(), ps.stdout


async def test_an_output_callback_that_raises_kills_a_chatty_command_at_once() -> None:
    """The copy cap raises from on_stdout; the killed helper's unread output once held every
    exec in the container (the kill's own too) for 30 s."""

    class Enough(Exception):
        pass

    seen = 0

    def take(data: bytes) -> None:
        nonlocal seen
        seen += len(data)
        if seen > 1 << 20:
            raise Enough

    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        start = time.monotonic()
        with pytest.raises(Enough):
            await sb.execute_command("cat /dev/zero", on_stdout=take)
        ps = await sb.execute_command("ps -o comm")
        assert time.monotonic() - start < 25  # it took the kill's whole 30 s
        assert "cat" not in ps.stdout.split(), ps.stdout


async def test_a_genuine_symlink_to_a_host_path_is_refused(tmp_path: Path) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        r = await sb.execute_command(
            "mkdir proj && echo data > proj/data.txt && ln -s data.txt proj/inside && "
            "ln -s /etc/hostname report.txt")
        assert r.success, r
        with pytest.raises(UnsafeArchive, match="the copied path itself") as info:
            await sb.copy_files("sandbox:report.txt", str(tmp_path / "report.txt"))
        assert info.value.member == "report.txt"
        assert os.listdir(tmp_path) == []  # no link made: the host's file is never opened
        await sb.copy_files("sandbox:proj", str(tmp_path))  # a link inside the tree is kept
        assert os.readlink(tmp_path / "proj" / "inside") == "data.txt"
        assert (tmp_path / "proj" / "inside").read_text() == "data\n"
        await sb.execute_command("ln -s /etc/hostname proj/host")
        with pytest.raises(UnsafeArchive, match="absolute path '/etc/hostname'"):
            await sb.copy_files("sandbox:proj", str(tmp_path / "again"))
        assert os.listdir(tmp_path) == ["proj"]
        with pytest.raises(ConfigError, match="max_entries=0"):
            await sb.copy_files("sandbox:proj", str(tmp_path / "again"), max_entries=0)


async def test_a_big_sparse_file_stops_at_the_cap(tmp_path: Path) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        # 3 GiB that take no disk in the sandbox, and are streamed whole by tar.
        r = await sb.execute_command("truncate -s 3G big && mkdir d && truncate -s 5M d/mid")
        assert r.success, r
        start = time.monotonic()
        with pytest.raises(CopyLimitExceeded) as info:
            await sb.copy_files("sandbox:big", str(tmp_path), max_bytes=8 << 20,
                                max_entries=100)
        assert time.monotonic() - start < 25  # cut off after ~9 MiB, not 3 GiB read
        assert info.value.limit == "max_bytes"
        # Under the stream limit but over max_bytes: refused at the member, named.
        with pytest.raises(CopyLimitExceeded, match="max_bytes=4194304") as info:
            await sb.copy_files("sandbox:d", str(tmp_path), max_bytes=4 << 20)
        assert info.value.member == "d/mid"
        assert os.listdir(tmp_path) == []
        ps = await sb.execute_command("ps -o comm")
        assert "tar" not in ps.stdout.split(), ps.stdout


async def test_gnu_tar_output_passes_the_rules(tmp_path: Path) -> None:
    """Debian's GNU tar: long names, hard links, inside links, empty dirs all come out."""
    long = "n" * 150
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        r = await sb.execute_command(
            f"mkdir -p proj/empty proj/sub && echo a > 'proj/sub/{long}' && "
            f"ln 'proj/sub/{long}' proj/hard && ln -s sub/{long} proj/soft && "
            "ln -s ../hard proj/sub/up && chmod 640 proj/hard")
        assert r.success, r
        await sb.copy_files("sandbox:proj", str(tmp_path))
    out = tmp_path / "proj"
    assert (out / "sub" / long).read_text() == "a\n" and (out / "empty").is_dir()
    assert (out / "hard").stat().st_ino == (out / "sub" / long).stat().st_ino
    assert stat.S_IMODE((out / "hard").stat().st_mode) == 0o640
    assert (out / "soft").read_text() == "a\n" and (out / "sub" / "up").read_text() == "a\n"
