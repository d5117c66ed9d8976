"""remove_tree on hostile shapes: deeper than recursion or PATH_MAX allow, wide, 000 modes,
symlinks out, and an entry that cannot go (the rest goes; the ``last`` entry stays)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox._rmtree import BATCH, remove_tree

REPO = str(Path(__file__).resolve().parents[2])


def chain(top: Path, depth: int, *, lock: bool = True) -> None:
    """``depth`` directories under ``top`` (by descriptors: the path outgrows PATH_MAX), a
    file every 100 levels, the bottom one mode 000."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
        if level % 100 == 0:
            os.close(os.open("f", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd))
    os.symlink("/", "root-link", dir_fd=fd)
    if lock:
        os.fchmod(fd, 0)
    os.close(fd)


def hostile(top: Path, outside: Path) -> None:
    (top / "owner.json").write_text("{}")
    (top / "deep").mkdir()
    chain(top / "deep", 5000)
    wide = top / "wide"
    wide.mkdir()
    for n in range(BATCH + 10):  # more than one batch
        (wide / f"s{n}").mkdir()
    (wide / "file").write_text("x")
    for name, mode in (("locked", 0), ("read-only", 0o500), ("no-search", 0o600)):
        (top / name / "in").mkdir(parents=True)
        (top / name / "in" / "f").write_text("x")
        os.chmod(top / name / "in", mode)
        os.chmod(top / name, mode)
    (top / "out").symlink_to(outside)
    os.mkfifo(top / "fifo")


def test_any_depth_width_and_mode_goes_and_nothing_outside_is_touched(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    top = tmp_path / "state"
    top.mkdir()
    hostile(top, outside)
    assert remove_tree(top, last="owner.json") == []
    assert not top.exists()
    assert (outside / "keep").read_text() == "k"


def test_a_missing_tree_or_a_symlink_in_its_place(tmp_path: Path) -> None:
    assert remove_tree(tmp_path / "absent") == []
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "keep").write_text("k")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert remove_tree(tmp_path / "link") == []
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "target" / "keep").exists()


def test_what_cannot_go_is_named_the_rest_goes_and_last_stays(tmp_path: Path) -> None:
    top = tmp_path / "state"
    (top / "a" / "b").mkdir(parents=True)
    (top / "owner.json").write_text("{}")
    (top / "a" / "b" / "stuck").write_text("x")
    (top / "a" / "gone").write_text("x")
    chain(top / "a", 1500, lock=False)
    subprocess.run(["chattr", "+i", str(top / "a" / "b" / "stuck")], check=True)
    try:
        left = remove_tree(top, last="owner.json")
        assert left == [f"{top}/a/b/stuck: operation not permitted (immutable or append-only?)"]
        assert sorted(os.listdir(top)) == ["a", "owner.json"]
        assert os.listdir(top / "a") == ["b"]
    finally:
        subprocess.run(["chattr", "-i", str(top / "a" / "b" / "stuck")], check=True)
    assert remove_tree(top, last="owner.json") == []
    assert not top.exists()


_AS_NOBODY = """
import sys
import tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.unit.test_rmtree import hostile
from sandbox._rmtree import remove_tree
top = Path(sys.argv[1]) / "state"
top.mkdir()
hostile(top, Path(sys.argv[1]) / "outside")
print(remove_tree(top, last="owner.json"), top.exists())
"""


def test_an_owner_without_root_opens_up_its_own_000_directories() -> None:
    if os.getuid() != 0:
        pytest.fail("this test switches to nobody, so it must run as root", pytrace=False)
    work = Path(tempfile.mkdtemp())  # pytest's tmp_path is not enterable by nobody
    try:
        os.chmod(work, 0o755)
        (work / "outside").mkdir()
        os.chown(work, 65534, 65534)
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-c", _AS_NOBODY, str(work), REPO], capture_output=True, text=True, check=False)
    finally:
        remove_tree(work)
    assert done.stdout == "[] False\n", done.stderr
