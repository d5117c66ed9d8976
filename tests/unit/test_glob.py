"""Repository globs and file selection on a host tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox._glob import PathFilter, compile_glob, select_entries
from tests.unit._trees import sample_tree


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/deep/a.py", True),  # no slash: any depth, like .gitignore
        ("*.py", "a.pyc", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/sub/a.py", False),  # * never crosses a /
        ("src/*.py", "lib/src/a.py", False),  # a slash anchors at the root
        ("/README.md", "README.md", True),
        ("/README.md", "docs/README.md", False),
        ("src/**/*.py", "src/a.py", True),  # ** may be zero segments
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**", "src/x/y/a.py", True),
        ("src/**", "src", False),
        ("**/test_*.py", "test_a.py", True),
        ("**/test_*.py", "pkg/tests/test_a.py", True),
        ("a?c", "abc", True),
        ("a?c", "a/c", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("docs/", "docs", True),  # trailing slash ignored
        ("./src/*.py", "src/a.py", True),
        ("a+b(c).txt", "a+b(c).txt", True),  # regex characters are literal
    ],
)
def test_compile_glob(pattern: str, path: str, hit: bool) -> None:
    assert bool(compile_glob(pattern).fullmatch(path)) is hit


@pytest.mark.parametrize("bad", ["", "  ", "/", "../x", "a/../../b"])
def test_compile_glob_refuses(bad: str) -> None:
    with pytest.raises(ValueError):
        compile_glob(bad)


def test_filter_directory_patterns_cover_subtrees_and_exclude_wins() -> None:
    f = PathFilter(include=["src", "*.md"], exclude=["src/secret", "*.key"])
    assert f.selects("src/a/b.py")  # "src" covers everything below it
    assert f.selects("README.md") and f.selects("docs/x.md")
    assert not f.selects("setup.py")
    assert not f.selects("src/secret/token.txt")
    assert not f.selects("src/a/id.key")
    assert PathFilter().selects("anything/at/all")
    assert not PathFilter(exclude=[".git"]).selects(".git/HEAD")


def test_select_entries_exclude_only(tmp_path: Path) -> None:
    sample_tree(tmp_path)
    got = select_entries(tmp_path, PathFilter(exclude=["node_modules", "*.pyc", ".env"]))
    assert "node_modules" not in got and not any(g.startswith("node_modules/") for g in got)
    assert ".env" not in got and "src/pkg/mod.pyc" not in got
    assert {"README.md", "src/pkg/mod.py", ".git/HEAD", "empty", "link-to-src",
            "dangling"} <= set(got)
    # parents come before children, so a tar of the list extracts in order
    assert got.index("src") < got.index("src/pkg") < got.index("src/pkg/mod.py")
    # links are entries, never followed into
    assert not any(g.startswith("link-to-src/") for g in got)


def test_select_entries_include_with_double_star(tmp_path: Path) -> None:
    sample_tree(tmp_path)
    got = select_entries(tmp_path, PathFilter(include=["src/**/*.py", "README.md"]))
    assert got == ["README.md", "src", "src/pkg", "src/pkg/__init__.py", "src/pkg/mod.py"]
