"""copy_from_sandbox's wiring, with a scripted helper: naming, the stream cap, hostile archives.

The archive rules themselves are tested in test_archive.py.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path

import pytest

from sandbox import CommandResult, ConfigError, CopyLimitExceeded, UnsafeArchive
from sandbox._archive import stream_limit
from sandbox._helper_files import copy_from_sandbox
from sandbox.testing import FakeSandbox

pytestmark = pytest.mark.asyncio


class Helper:
    """Stands in for the exec'd tar: feeds ``chunks`` to on_stdout and records how far it got."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self.chunks = chunks
        self.sent = 0
        self.argv: Sequence[str] = ()

    async def __call__(
        self, argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
        on_stdout: Callable[[bytes], object] | None = None,
    ) -> CommandResult:
        self.argv = argv
        assert on_stdout is not None
        for chunk in self.chunks:
            on_stdout(chunk)  # raising here is how the real exec gets killed
            self.sent += len(chunk)
        return CommandResult(exit_code=0, success=True)


def tar_of(*files: tuple[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def test_docker_cp_naming_into_a_directory_or_as_the_path(tmp_path: Path) -> None:
    helper = Helper([tar_of(("report.txt", b"r"))])
    await copy_from_sandbox(helper, "/w/report.txt", tmp_path)
    assert (tmp_path / "report.txt").read_bytes() == b"r"
    assert list(helper.argv[-2:]) == ["/w", "report.txt"]
    await copy_from_sandbox(Helper([tar_of(("report.txt", b"s"))]), "/w/report.txt",
                            tmp_path / "renamed")
    assert (tmp_path / "renamed").read_bytes() == b"s"


async def test_a_never_ending_tar_is_cut_off_at_the_stream_limit(tmp_path: Path) -> None:
    def endless() -> Iterable[bytes]:
        while True:
            yield b"\0" * 65536

    helper = Helper(endless())
    with pytest.raises(CopyLimitExceeded, match="max_bytes=1000") as info:
        await copy_from_sandbox(helper, "/w/t", tmp_path / "out", max_bytes=1000,
                                max_entries=10)
    assert info.value.path == "/w/t"
    assert helper.sent <= stream_limit(1000, 10)
    assert os.listdir(tmp_path) == []


async def test_a_hostile_archive_names_the_sandbox_path_and_leaves_nothing(
        tmp_path: Path) -> None:
    with pytest.raises(UnsafeArchive) as info:
        await copy_from_sandbox(Helper([tar_of(("t", b"x"), ("../escaped", b"evil"))]), "/w/t",
                                tmp_path / "out")
    assert info.value.path == "/w/t" and info.value.member == "../escaped"
    assert os.listdir(tmp_path) == []


async def test_bad_limits_are_refused_before_anything_runs(tmp_path: Path) -> None:
    helper = Helper([])
    with pytest.raises(ConfigError, match="max_entries"):
        await copy_from_sandbox(helper, "/w/t", tmp_path, max_entries=0)
    assert helper.argv == ()


async def test_the_fake_takes_the_same_copy_limits() -> None:
    fake = FakeSandbox()
    await fake.initialize()
    await fake.copy_files("sandbox:/w/out", "/host/out", max_bytes=10, max_entries=1)
    with pytest.raises(ConfigError, match="max_bytes"):
        await fake.copy_files("sandbox:/w/out", "/host/out", max_bytes=0)
