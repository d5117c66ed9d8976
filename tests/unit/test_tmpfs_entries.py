"""``security.tmpfs_paths`` entries as every backend reads them (`tmpfs_entries`): one check of
the path, the options left to the backend, and a bad entry refused when it is reached."""

from __future__ import annotations

import pytest

from sandbox import ConfigError
from sandbox._paths import tmpfs_entries


def test_paths_are_normalized_and_options_kept() -> None:
    assert list(tmpfs_entries(["/a/../b/:size=1", "/c"])) == [
        ("/a/../b/:size=1", "/b", "size=1"), ("/c", "/c", "")]


@pytest.mark.parametrize(("entries", "problem"), [
    (["rel"], "'rel' must be an absolute path other than /"),
    (["/.."], "'/..' must be an absolute path other than /"),
    (["/a", "/a/."], "'/a' is listed twice"),
])
def test_bad_entries_are_refused_naming_the_field(entries: list[str], problem: str) -> None:
    with pytest.raises(ConfigError, match="security.tmpfs_paths: " + problem.replace(".", r"\.")):
        list(tmpfs_entries(entries))


def test_entries_are_checked_one_at_a_time() -> None:
    # A backend refuses an entry's options before a later entry's path is looked at.
    entries = tmpfs_entries(["/ok", "bad"])
    assert next(entries) == ("/ok", "/ok", "")
    with pytest.raises(ConfigError):
        next(entries)
