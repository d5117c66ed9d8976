"""Pure pieces of the default-user set-up: the working-dir probe and a command's group."""

from __future__ import annotations

import io
import tarfile

from sandbox._policy import with_group
from sandbox.docker._workdir import PROBE_BYTES, DirEntry, dir_tar, read_dir_entry


def tar_of(*members: tuple[str, int, bytes | None], mode: int = 0o755) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, uid, data in members:
            info = tarfile.TarInfo(name)
            info.uid = uid
            info.mode = mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def needs(head: bytes, uid: int = 1000) -> bool:
    return read_dir_entry(head).needs_owner(uid)


def test_an_empty_directory_that_is_not_the_users_is_handed_over() -> None:
    assert needs(tar_of(("workspace", 0, None)))
    assert needs(tar_of(("workspace", 3000, None)))
    # The user's own but not writable by it: empty, so handed over (mode 0755) as well.
    assert needs(tar_of(("workspace", 1000, None), mode=0o555))
    assert DirEntry(exists=False).needs_owner(1000)  # missing: made with that owner


def test_the_users_own_directory_needs_no_hand_over() -> None:
    # The SDK's images: 1000:0 mode 0775, for the default user 1000.
    sdk_image = tar_of(("workspace", 1000, None), mode=0o775)
    assert read_dir_entry(sdk_image) == DirEntry(exists=True, is_dir=True, uid=1000, gid=0,
                                                 mode=0o775, empty=True)
    assert not needs(sdk_image)
    assert not needs(tar_of(("workspace", 1000, None), ("workspace/a", 1000, b"x")))
    # ...but another uid gets the empty directory.
    assert needs(sdk_image, uid=2000)


def test_contents_someone_else_owns_are_never_handed_over() -> None:
    assert not needs(tar_of(("workspace", 0, None), ("workspace/a", 0, b"x")))
    assert not needs(tar_of(("workspace", 3000, None), ("workspace/a", 3000, b"x")))
    assert not needs(tar_of(("workspace", 0, b"a file")))
    assert not needs(b"not a tar at all" * 64)
    assert not needs(b"")
    # Cut at the probe size: something followed, so it is not empty.
    big = tar_of(("workspace", 0, None), ("workspace/big", 0, b"x" * (2 * PROBE_BYTES)))
    assert not needs(big[:PROBE_BYTES])


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
