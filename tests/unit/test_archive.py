"""Unpacking a tar from a sandbox on the host: hand-built hostile archives against the rules."""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from sandbox import (
    ConfigError,
    CopyLimitExceeded,
    FileOperationFailed,
    ResourceLimitExceeded,
    UnsafeArchive,
)
from sandbox._archive import MAX_DEPTH, TarSpool, check_limits, extract_tar, stream_limit

Member = tuple[tarfile.TarInfo, bytes | None]


def entry(name: str, *, mode: int = 0o644, kind: bytes = tarfile.REGTYPE, link: str = "",
          pax: dict[str, str] | None = None, mtime: int = 1_600_000_000) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.linkname, info.mtime = mode, kind, link, mtime
    if pax:
        info.pax_headers = pax
    return info


def d(name: str, mode: int = 0o755) -> Member:
    return entry(name, mode=mode, kind=tarfile.DIRTYPE), None


def f(name: str, data: bytes = b"x", mode: int = 0o644) -> Member:
    return entry(name, mode=mode), data


def sym(name: str, target: str) -> Member:
    return entry(name, kind=tarfile.SYMTYPE, link=target), None


def hard(name: str, target: str) -> Member:
    return entry(name, kind=tarfile.LNKTYPE, link=target), None


def tar_of(*members: Member, fmt: int = tarfile.PAX_FORMAT) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    buf.seek(0)
    return buf


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host directory holding a file the archive must never reach."""
    (tmp_path / "victim").write_text("host")
    (tmp_path / "victim").chmod(0o600)
    (tmp_path / "dest").mkdir()
    return tmp_path


def extract(archive: io.BytesIO, host: Path, *, root: str = "t", max_bytes: int = 1 << 30,
            max_entries: int = 1000) -> Path:
    out = host / "dest" / "out"
    extract_tar(archive, out, root, source=f"/w/{root}", max_bytes=max_bytes,
                max_entries=max_entries)
    return out


def untouched(host: Path) -> None:
    """Nothing was written beside the destination, and the victim is as it was."""
    assert sorted(os.listdir(host)) == ["dest", "victim"]
    assert os.listdir(host / "dest") == []
    victim = host / "victim"
    assert victim.read_text() == "host" and stat.S_IMODE(victim.lstat().st_mode) == 0o600


def refused(archive: io.BytesIO, host: Path, member: str, words: str,
            error: type[Exception] = UnsafeArchive, *, max_bytes: int = 1 << 30,
            max_entries: int = 1000) -> Exception:
    with pytest.raises(error) as info:
        extract(archive, host, max_bytes=max_bytes, max_entries=max_entries)
    err = info.value
    assert isinstance(err, FileOperationFailed)
    if member:
        assert getattr(err, "member", None) == member
        assert repr(member) in str(err)
    assert words in str(err), str(err)
    untouched(host)
    return err


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


# -- what a genuine tar makes ---------------------------------------------------------------


def test_a_tree_comes_out_with_its_modes_and_mtimes_but_no_setuid(host: Path) -> None:
    out = extract(tar_of(
        d("t", 0o555), f("t/shared.txt", b"x", 0o664), f("t/tool", b"#!", 0o4755),
        d("t/sub", 0o3775), f("t/sub/f", b"y", 0o600), f("t/sticky", b"", 0o1777),
        d("t/ro", 0o500), f("t/ro/in", b"z", 0o444),
    ), host)
    assert (out / "sub" / "f").read_bytes() == b"y" and (out / "ro" / "in").read_bytes() == b"z"
    assert (mode_of(out), mode_of(out / "shared.txt"), mode_of(out / "tool")) == \
        (0o555, 0o664, 0o755)
    assert (mode_of(out / "sub"), mode_of(out / "sticky"), mode_of(out / "ro")) == \
        (0o775, 0o777, 0o500)
    assert (out / "sub" / "f").stat().st_mtime == 1_600_000_000
    assert out.stat().st_mtime == 1_600_000_000
    assert sorted(os.listdir(host / "dest")) == ["out"]  # no temporary directory left
    for p in (out, out / "ro"):
        p.chmod(0o755)  # so pytest can remove it


def test_a_single_file_and_missing_parents(host: Path) -> None:
    out = extract(tar_of(f("t", b"one")), host)
    assert out.read_bytes() == b"one"
    out.unlink()
    out = extract(tar_of(f("t/a/b/c", b"deep")), host)  # parents not in the archive
    assert (out / "a" / "b" / "c").read_bytes() == b"deep"
    assert mode_of(out / "a") == 0o755


def test_ownership_never_comes_from_the_archive(host: Path) -> None:
    info, data = f("t/owned", b"x")
    info.uid, info.gid, info.uname, info.gname = 12345, 54321, "daemon", "daemon"
    dinfo, _ = d("t")
    dinfo.uid = dinfo.gid = 4242
    out = extract(tar_of((dinfo, None), (info, data)), host)
    for p in (out, out / "owned"):
        st = p.lstat()
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


def test_links_inside_the_tree_are_kept(host: Path) -> None:
    out = extract(tar_of(
        d("t"), d("t/a"), f("t/a/f", b"data"), sym("t/a/up", ".."), sym("t/a/sib", "../b/g"),
        sym("t/l", "a/f"), sym("t/self", "."), d("t/b"), f("t/b/g", b"g"),
        hard("t/b/copy", "t/a/f"), sym("t/a/dot", "./../a/./f"),
    ), host)
    assert os.readlink(out / "a" / "up") == ".." and (out / "l").read_bytes() == b"data"
    assert (out / "a" / "sib").read_bytes() == b"g"
    assert (out / "b" / "copy").read_bytes() == b"data"
    assert (out / "b" / "copy").stat().st_ino == (out / "a" / "f").stat().st_ino
    assert (out / "a" / "dot").read_bytes() == b"data"


def test_odd_but_harmless_names_come_out(host: Path) -> None:
    odd = "t/new\nline é \\back 'q' " + "x" * 150
    out = extract(tar_of(d("t"), (entry("t/plain", pax={"path": odd}), b"o"),
                         f("./t//./dot", b"d")), host)
    assert (host / "dest" / "out" / odd[2:]).read_bytes() == b"o"
    assert (out / "dot").read_bytes() == b"d"


def test_a_sparse_member_is_written_at_its_full_size(host: Path) -> None:
    out = extract(sparse("t", 3 << 20), host, max_bytes=4 << 20)
    assert out.stat().st_size == 3 << 20
    with out.open("rb") as fh:
        assert fh.read(4) == b"DATA"


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, words", [
    ("t/../escaped", "'..'"),
    ("t/../../escaped", "'..'"),
    ("../escaped", "'..'"),
    ("/tmp/escaped", "absolute"),
    ("escaped", "outside the copied path 't'"),
    ("tt/x", "outside the copied path 't'"),
    (".", "outside the copied path"),
])
def test_a_name_outside_the_copied_path_is_refused(host: Path, name: str, words: str) -> None:
    refused(tar_of(d("t"), f("t/ok"), f(name, b"evil")), host, name, words)


def test_an_absolute_name_aimed_at_a_host_file_is_refused(host: Path) -> None:
    name = str(host / "victim")
    refused(tar_of(d("t"), (entry(name, mode=0o777), b"evil")), host, name, "absolute")


def test_a_pax_path_overriding_a_harmless_name_is_refused(host: Path) -> None:
    refused(tar_of(d("t"), (entry("t/ok", pax={"path": "t/../../victim"}), b"evil")), host,
            "t/../../victim", "'..'")


def test_a_name_through_a_symlinked_directory_is_refused(host: Path) -> None:
    refused(tar_of(d("t"), d("t/dir"), sym("t/dir/lnk", ".."), f("t/dir/lnk/x", b"evil")),
            host, "t/dir/lnk/x", "which the archive made a symlink")
    refused(tar_of(d("t"), sym("t/d", str(host)), f("t/d/victim", b"evil")), host,
            "t/d", "absolute path")


def test_a_name_below_a_file_is_refused(host: Path) -> None:
    refused(tar_of(d("t"), f("t/f"), f("t/f/x")), host, "t/f/x", "which the archive made a file")


def test_overlong_and_overdeep_names_are_refused(host: Path) -> None:
    long = "t/" + "a" * 5000
    refused(tar_of(d("t"), f(long)), host, long, "longer than 4096 bytes")
    deep = "t/" + "/".join(["d"] * (MAX_DEPTH + 1))
    refused(tar_of(d("t"), f(deep)), host, deep, f"more than {MAX_DEPTH} directories deep")


def test_a_member_named_twice_is_refused(host: Path) -> None:
    refused(tar_of(d("t"), f("t/a", b"1"), f("t/a", b"2")), host, "t/a", "appears twice")
    # Replacing a directory by a symlink, then writing below it.
    refused(tar_of(d("t"), d("t/a"), sym("t/a", str(host)), f("t/a/victim", b"evil")), host,
            "t/a", "appears twice")
    refused(tar_of(d("t"), f("t/f", b"first"), sym("t/f", str(host / "victim"))), host, "t/f",
            "appears twice")
    out = extract(tar_of(d("t"), d("t/a", 0o700), f("t/a/x"), d("t/a", 0o750)), host)
    assert mode_of(out / "a") == 0o750  # a directory may repeat


# -- links ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, target, words", [
    ("t/abs", "/etc/hostname", "absolute path '/etc/hostname'"),
    ("t/up", "..", "leads outside the copied tree"),
    ("t/a/up2", "../../victim", "leads outside the copied tree"),
    ("t/climb", "a/../..", "climbs after a name"),
    ("t/via", "a/up/..", "climbs after a name"),
    ("t/empty", "", "empty"),
])
def test_a_symlink_out_of_the_tree_is_refused(host: Path, name: str, target: str,
                                              words: str) -> None:
    err = refused(tar_of(d("t"), d("t/a"), sym("t/a/up", ".."), sym(name, target)), host, name,
                  words)
    assert "stays inside the copied tree" in str(err) or target == ""


def test_a_copied_path_that_is_a_symlink_is_refused(host: Path) -> None:
    refused(tar_of(sym("t", "victim")), host, "t", "the copied path itself")


@pytest.mark.parametrize("target, words", [
    ("t/later", "not an earlier regular file"),
    ("/etc/hostname", "absolute"),
    ("t/../victim", "'..'"),
    ("other/x", "outside the copied path"),
    ("t/dir", "not an earlier regular file"),
    ("t/link", "not an earlier regular file"),
    ("t", "not an earlier regular file"),
])
def test_a_hard_link_to_anything_but_an_earlier_file_is_refused(
        host: Path, target: str, words: str) -> None:
    refused(tar_of(d("t"), d("t/dir"), sym("t/link", "dir"), hard("t/h", target),
                   f("t/later")), host, "t/h", words)


# -- special files, caps --------------------------------------------------------------------


@pytest.mark.parametrize("kind, words", [
    (tarfile.CHRTYPE, "character device"), (tarfile.BLKTYPE, "block device"),
    (tarfile.FIFOTYPE, "FIFO"), (b"V", "special file"),
])
def test_no_device_fifo_or_unknown_type_is_created(host: Path, kind: bytes, words: str) -> None:
    info = entry("t/dev", kind=kind)
    info.devmajor, info.devminor = 1, 3  # /dev/null
    err = refused(tar_of(d("t"), (info, None)), host, "t/dev", words)
    assert "never created on the host" in str(err)


def test_too_many_entries_stop_the_copy(host: Path) -> None:
    err = refused(tar_of(d("t"), *[f(f"t/{i}") for i in range(10)]), host, "t/4",
                  "more entries than max_entries=5", CopyLimitExceeded, max_entries=5)
    assert isinstance(err, CopyLimitExceeded) and isinstance(err, ResourceLimitExceeded)
    assert (err.limit, err.value) == ("max_entries", 5)
    # Directories made for missing parents count too.
    refused(tar_of(f("t/a/b/c/d/e/f")), host, "t/a/b/c/d/e/f", "max_entries=5",
            CopyLimitExceeded, max_entries=5)


def test_too_many_bytes_stop_the_copy(host: Path) -> None:
    err = refused(tar_of(d("t"), *[f(f"t/{i}", b"x" * 400) for i in range(5)]), host, "t/2",
                  "over max_bytes=1000", CopyLimitExceeded, max_bytes=1000)
    assert isinstance(err, CopyLimitExceeded) and err.limit == "max_bytes"


def sparse(name: str, real_size: int) -> io.BytesIO:
    """A GNU sparse 1.0 member: 4 bytes of data at offset 0, the rest a hole of `real_size`."""
    sparse_map = b"1\n0\n4\n".ljust(512, b"\0")
    info = entry("GNUSparseFile.0/x", pax={
        "GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(real_size)})
    return tar_of((info, sparse_map + b"DATA"))


def test_a_huge_sparse_member_counts_its_expanded_size(host: Path) -> None:
    archive = sparse("t", 1 << 40)
    assert len(archive.getvalue()) <= 10_240  # one tar record
    refused(archive, host, "t", "1099511627776 bytes (after 0 written) would go over "
            "max_bytes=1048576", CopyLimitExceeded, max_bytes=1 << 20)


# -- corrupt archives -----------------------------------------------------------------------


def test_a_truncated_archive_is_refused_and_nothing_is_left(host: Path) -> None:
    whole = tar_of(d("t"), f("t/a", b"a" * 2000), f("t/b", b"b" * 2000)).getvalue()
    for cut in (700, 1536 + 1000, 1536 + 2048 + 512, len(whole) - 10240 + 100, 1):
        refused(io.BytesIO(whole[:cut]), host, "", "corrupt or truncated")
    garbage = whole[:1536 + 2048] + b"\x01" * 512 + bytes(1024)
    refused(io.BytesIO(garbage), host, "", "corrupt or truncated")
    refused(io.BytesIO(bytes(1024)), host, "", "the archive is empty")
    refused(io.BytesIO(b""), host, "", "corrupt or truncated")


def test_a_negative_size_is_refused(host: Path) -> None:
    bad = entry("t/x", kind=tarfile.DIRTYPE, pax={"size": "-2048"})
    refused(tar_of(d("t"), (bad, None)), host, "t/x", "negative size")


def test_huge_headers_are_refused_before_they_are_read(host: Path) -> None:
    refused(tar_of(d("t"), (entry("t/x", pax={"comment": "c" * (1 << 20)}), b"x")), host,
            "t", "headers over 64 KiB")


def test_a_late_refusal_leaves_nothing_behind(host: Path) -> None:
    refused(tar_of(d("t", 0o555), d("t/ro", 0o500), f("t/ro/big", b"x" * 100_000),
                   f("t/ok"), sym("t/bad", "/etc/passwd")), host, "t/bad", "absolute path")


# -- the destination ------------------------------------------------------------------------


def test_an_existing_directory_is_merged_into(host: Path) -> None:
    out = host / "dest" / "out"
    (out / "sub").mkdir(parents=True)
    (out / "keep").write_text("host's")
    (out / "sub" / "old").write_text("old")
    (out / "f").symlink_to(host / "victim")  # replaced as a link, never written through
    extract(tar_of(d("t"), d("t/sub"), f("t/sub/old", b"new"), f("t/f", b"evil"),
                   d("t/new", 0o700), f("t/new/x")), host)
    assert (out / "keep").read_text() == "host's" and (out / "sub" / "old").read_text() == "new"
    assert not (out / "f").is_symlink() and (out / "f").read_bytes() == b"evil"
    assert mode_of(out / "new") == 0o700
    assert (host / "victim").read_text() == "host" and sorted(os.listdir(host / "dest")) == ["out"]


def test_a_conflict_with_the_destination_changes_nothing(host: Path) -> None:
    out = host / "dest" / "out"
    (out / "sub").mkdir(parents=True)
    (out / "file").write_text("host's")
    for members in ([d("t"), f("t/a", b"1"), f("t/sub", b"file over dir")],
                    [d("t"), f("t/a", b"1"), d("t/file"), f("t/file/x")]):
        with pytest.raises(FileOperationFailed, match="nothing was changed"):
            extract(tar_of(*members), host)
        assert sorted(os.listdir(out)) == ["file", "sub"]  # not even t/a, checked first
        assert sorted(os.listdir(host / "dest")) == ["out"]


def test_an_existing_file_or_link_at_the_destination_is_replaced(host: Path) -> None:
    out = host / "dest" / "out"
    out.symlink_to(host / "victim")
    extract(tar_of(f("t", b"new")), host)
    assert not out.is_symlink() and out.read_bytes() == b"new"
    assert (host / "victim").read_text() == "host"


@contextmanager
def as_nobody(*owned: Path) -> Iterator[None]:
    """Run the block without root's power to ignore modes (as uid 65534) when we are root."""
    if os.geteuid() != 0:
        yield
        return
    for path in owned:
        os.chown(path, 65534, 65534)
    os.setegid(65534)
    os.seteuid(65534)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)


@pytest.fixture
def open_host() -> Iterator[Path]:
    """Like `host`, but where uid 65534 can reach it (pytest's tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="test-archive-"))
    base.chmod(0o755)
    (base / "victim").write_text("host")
    (base / "dest").mkdir()
    yield base
    shutil.rmtree(base)


def test_read_only_directories_move_into_place_without_root(open_host: Path) -> None:
    host = open_host
    dest = host / "dest"
    with as_nobody(dest):
        out = extract(tar_of(d("t", 0o555), d("t/ro", 0o500), f("t/ro/in", b"z", 0o400),
                             d("t/ro/deeper", 0o555), f("t/ro/deeper/f")), host)
        assert (mode_of(out), mode_of(out / "ro"), mode_of(out / "ro" / "deeper")) == \
            (0o555, 0o500, 0o555)
        assert (out / "ro" / "in").read_bytes() == b"z"
        # A refusal after read-only directories still leaves nothing, temporary dir included.
        with pytest.raises(UnsafeArchive):
            extract_tar(tar_of(d("t", 0o555), d("t/ro", 0o500), f("t/ro/x"), sym("t/l", "/")),
                        dest / "other", "t", source="/w/t", max_bytes=1 << 20, max_entries=100)
        assert os.listdir(dest) == ["out"]
    for p in (out, out / "ro"):
        p.chmod(0o755)


# -- limits ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    {"max_bytes": 0}, {"max_entries": -1}, {"max_bytes": 1.5}, {"max_entries": True},
    {"max_bytes": "1"},
])
def test_bad_limits_are_config_errors_naming_the_keyword(kw: dict[str, object]) -> None:
    args: dict[str, object] = {"max_bytes": 1, "max_entries": 1, **kw}
    with pytest.raises(ConfigError, match=next(iter(kw))):
        check_limits(**args)  # type: ignore[arg-type]


def test_the_spool_stops_at_the_stream_limit() -> None:
    out = io.BytesIO()
    spool = TarSpool(out, source="/w/t", max_bytes=1000, max_entries=2)
    chunks: Sequence[bytes] = [b"x" * 4096] * (stream_limit(1000, 2) // 4096)
    for chunk in chunks:
        spool.write(chunk)
    with pytest.raises(CopyLimitExceeded, match="max_bytes=1000") as info:
        spool.write(b"x" * 4096)
    assert info.value.limit == "max_bytes" and len(out.getvalue()) == 4096 * len(chunks)


def test_a_host_side_failure_is_a_file_error_naming_the_destination(host: Path) -> None:
    dest = host / "dest"
    dest.chmod(0o500)  # not writable (root, who would ignore that, runs it as uid 65534)
    with as_nobody(), pytest.raises(FileOperationFailed, match="failed on the host") as info:
        extract_tar(tar_of(f("t")), dest / "out", "t", source="/w/t", max_bytes=10,
                    max_entries=10)
    dest.chmod(0o755)
    assert isinstance(info.value.__cause__, PermissionError) and os.listdir(dest) == []
