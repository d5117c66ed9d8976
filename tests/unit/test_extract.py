"""Unpacking the sandbox's tar on the host: the archive is untrusted."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from sandbox.docker._files import _extract


def tar_of(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


def entry(name: str, *, mode: int = 0o644, kind: bytes = tarfile.REGTYPE,
          link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.linkname = mode, kind, link
    return info


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_modes_come_back_but_not_setuid_and_read_only_dirs_still_fill(tmp_path: Path) -> None:
    archive = tar_of(
        (entry("t", mode=0o555, kind=tarfile.DIRTYPE), None),
        (entry("t/shared.txt", mode=0o664), b"x"),
        (entry("t/tool", mode=0o4755), b"#!/bin/sh\n"),
        (entry("t/sub", mode=0o2775, kind=tarfile.DIRTYPE), None),
        (entry("t/sub/f", mode=0o600), b"y"),
    )
    _extract(archive, tmp_path / "out", "t")
    out = tmp_path / "out"
    assert (out / "sub" / "f").read_bytes() == b"y"
    assert (mode_of(out), mode_of(out / "shared.txt")) == (0o555, 0o664)
    assert (mode_of(out / "tool"), mode_of(out / "sub")) == (0o755, 0o775)
    out.chmod(0o755)  # so pytest can remove it


def test_an_absolute_name_cannot_chmod_a_host_file(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host")
    victim.chmod(0o600)
    dest = tmp_path / "dest"
    dest.mkdir()
    archive = tar_of((entry("t", kind=tarfile.DIRTYPE, mode=0o755), None),
                     (entry(str(victim), mode=0o777), b"evil"))
    _extract(archive, dest / "out", "t")
    assert mode_of(victim) == 0o600 and victim.read_text() == "host"


def test_a_symlink_member_cannot_redirect_a_chmod(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("host")
    victim.chmod(0o600)
    dest = tmp_path / "dest"
    dest.mkdir()
    archive = tar_of(
        (entry("t", kind=tarfile.DIRTYPE, mode=0o755), None),
        (entry("t/f", mode=0o777), b"first"),
        (entry("t/f", kind=tarfile.SYMTYPE, link=str(victim)), None),
    )
    _extract(archive, dest / "out", "t")  # a symlink is copied as a symlink, as docker cp does
    assert (dest / "out" / "f").is_symlink()
    assert mode_of(victim) == 0o600 and victim.read_text() == "host"
    # Nor can a later member write through it.
    archive = tar_of(
        (entry("t", kind=tarfile.DIRTYPE, mode=0o755), None),
        (entry("t/d", kind=tarfile.SYMTYPE, link=str(tmp_path)), None),
        (entry("t/d/victim", mode=0o777), b"evil"),
    )
    with pytest.raises(tarfile.FilterError):
        _extract(archive, dest / "out2", "t")
    assert mode_of(victim) == 0o600 and victim.read_text() == "host"


def test_a_name_climbing_out_is_refused(tmp_path: Path) -> None:
    dest = tmp_path / "dest"
    dest.mkdir()
    archive = tar_of((entry("t/../../escaped", mode=0o644), b"x"))
    with pytest.raises(tarfile.FilterError):
        _extract(archive, dest / "out", "t")
    assert not (tmp_path / "escaped").exists()
    assert os.listdir(dest) == []
