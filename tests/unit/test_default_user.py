"""Pure pieces of the default-user set-up: the working-dir probe and a command's group."""

from __future__ import annotations

import io
import tarfile

from sandbox._policy import with_group
from sandbox.docker._workdir import PROBE_BYTES, dir_tar, root_owned_empty_dir


def tar_of(*members: tuple[str, int, bytes | None]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, uid, data in members:
            info = tarfile.TarInfo(name)
            info.uid = uid
            if data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_only_an_empty_root_owned_directory_is_handed_over() -> None:
    assert root_owned_empty_dir(tar_of(("workspace", 0, None)))
    assert not root_owned_empty_dir(tar_of(("workspace", 1000, None)))
    assert not root_owned_empty_dir(tar_of(("workspace", 0, None), ("workspace/a", 0, b"x")))
    assert not root_owned_empty_dir(tar_of(("workspace", 0, b"a file")))
    assert not root_owned_empty_dir(b"not a tar at all" * 64)
    assert not root_owned_empty_dir(b"")
    # Cut at the probe size: something followed, so it is not empty.
    big = tar_of(("workspace", 0, None), ("workspace/big", 0, b"x" * (2 * PROBE_BYTES)))
    assert not root_owned_empty_dir(big[:PROBE_BYTES])


def test_dir_tar_carries_owner_and_mode() -> None:
    with tarfile.open(fileobj=io.BytesIO(dir_tar("a/b", 1000, 1001))) as tf:
        (member,) = tf.getmembers()
    assert (member.name, member.uid, member.gid, member.mode) == ("a/b", 1000, 1001, 0o755)
    assert member.isdir()


def test_a_numeric_command_user_gets_its_own_group() -> None:
    assert with_group("4321") == "4321:4321"
    assert with_group("4321:5") == "4321:5"
    assert with_group("sandbox") == "sandbox"
    assert with_group("") == ""
