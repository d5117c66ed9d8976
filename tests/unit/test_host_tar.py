"""The archive copy in builds from host files: nothing followed, no host owner, docker cp's
whole-second mtimes, and the same members tarfile.add would give otherwise."""

from __future__ import annotations

import io
import os
import socket
import tarfile
from pathlib import Path

import pytest

from sandbox._host_tar import write_host_tar


def members(src: Path, arcname: str = "top") -> dict[str, tarfile.TarInfo]:
    buf = io.BytesIO()
    write_host_tar(str(src), arcname, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r:") as tf:
        return {m.name: m for m in tf.getmembers()}


def content(src: Path, name: str, arcname: str = "top") -> bytes:
    buf = io.BytesIO()
    write_host_tar(str(src), arcname, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r:") as tf:
        f = tf.extractfile(name)
        assert f is not None
        return f.read()


def test_links_are_stored_as_links_and_never_read_through(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "deep").write_text("outside the source")
    src = tmp_path / "src"
    src.mkdir()
    (src / "to-file").symlink_to(secret)
    (src / "to-dir").symlink_to(tmp_path / "outside")
    (src / "dangling").symlink_to("/nonexistent/x")
    found = members(src)
    assert found["top/to-file"].issym() and found["top/to-file"].linkname == str(secret)
    assert found["top/to-dir"].issym() and found["top/to-dir"].linkname == \
        str(tmp_path / "outside")
    assert found["top/dangling"].issym()
    assert not any(name.startswith("top/to-dir/") for name in found)
    buf = io.BytesIO()
    write_host_tar(str(src), "top", buf)
    assert b"host secret" not in buf.getvalue()
    assert b"outside the source" not in buf.getvalue()
    # The source itself a link: the link, not what it points at.
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "outside")
    assert {name: m.issym() for name, m in members(link).items()} == {"top": True}


def test_no_host_owner_whole_second_mtimes_and_no_pax_record_per_member(
        tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    f = src / "d" / "f.txt"
    f.write_bytes(b"x" * 700)
    os.utime(f, (1_700_000_000.75, 1_700_000_000.75))
    f.chmod(0o750)
    found = members(src)
    assert set(found) == {"top", "top/d", "top/d/f.txt"}
    for m in found.values():
        assert (m.uid, m.gid, m.uname, m.gname) == (0, 0, "", "")
        assert m.pax_headers == {}
    assert found["top/d/f.txt"].mtime == 1_700_000_000
    assert found["top/d/f.txt"].mode == 0o750 and found["top/d/f.txt"].size == 700
    assert found["top/d"].isdir()
    assert content(src, "top/d/f.txt") == b"x" * 700
    # "." as the top: the tree's contents, as copy in of a directory sends them.
    assert set(members(src, ".")) == {".", "./d", "./d/f.txt"}


def test_long_and_odd_names_hard_links_fifos_and_sockets(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    long_name = "n" * 150
    (src / long_name).write_text("long")
    (src / "ünï cödé\nnewline").write_text("odd")
    (src / "a").write_text("same inode")
    os.link(src / "a", src / "b")
    os.mkfifo(src / "pipe")  # stored, and reading the tree does not wait on it
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(src / "sock"))
        found = members(src)
    assert content(src, f"top/{long_name}") == b"long"
    assert content(src, "top/ünï cödé\nnewline") == b"odd"
    assert found["top/a"].isfile() and found["top/b"].islnk()
    assert found["top/b"].linkname == "top/a"
    assert found["top/pipe"].isfifo()
    assert "top/sock" not in found


def test_the_same_members_as_tarfile_add_but_for_owner_and_mtime(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for n in range(30):
        d = src / f"d{n % 3}" / f"e{n % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{n}").write_bytes(bytes([n]) * n)
    (src / "d0" / "link").symlink_to("e0/f0")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(str(src), arcname="top")
    buf.seek(0)
    with tarfile.open(fileobj=buf, mode="r:") as tf:
        expected = [(m.name, m.type, m.mode, m.size, m.linkname) for m in tf.getmembers()]
    got = [(m.name, m.type, m.mode, m.size, m.linkname) for m in members(src).values()]
    assert got == expected


def test_an_unreadable_file_is_an_error_not_a_silent_gap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "locked").write_text("x")
    real_open = os.open

    def refusing(path: str, flags: int, *args: object, **kw: object) -> int:
        if path == "locked":
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(PermissionError):
        members(src)


def test_a_file_that_turned_into_a_directory_while_read_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk saw a file; by the time it opens it, it is something else: not followed."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("x")
    real_lstat = os.lstat

    def swapping(path: str, *args: object, **kw: object) -> os.stat_result:
        st = real_lstat(path, *args, **kw)  # type: ignore[arg-type]
        if path == "f":
            (src / "f").unlink()
            (src / "f").symlink_to("/etc/passwd")
        return st

    monkeypatch.setattr(os, "lstat", swapping)
    with pytest.raises(OSError):
        members(src)
