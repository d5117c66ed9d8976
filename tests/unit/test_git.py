"""Host git helpers that need no repository: where mirrors live, how URLs are keyed."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox._git import cache_root, mirror_path, normalize_url


def test_cache_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "sandbox-sdk" / "repos"
    assert mirror_path("file:///a").parent == cache_root()
    assert mirror_path("file:///a") != mirror_path("file:///b")
    monkeypatch.chdir(tmp_path)
    assert normalize_url("repo.git") == str(tmp_path / "repo.git")
    assert normalize_url("https://example.invalid/r.git") == "https://example.invalid/r.git"
    assert normalize_url("git@example.invalid:r.git") == "git@example.invalid:r.git"
