"""Repository globs, file selection and staging, without an engine."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import anyio
import pytest

from sandbox import GitConfig, RepositoryConfig, SandboxInitFailed
from sandbox.docker._workspace import (
    Mode,
    PathFilter,
    Workspace,
    cache_root,
    compile_glob,
    is_within,
    mirror_path,
    normalize_url,
    select_entries,
    stage_copy,
    write_tar,
)


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


def _tree(root: Path) -> None:
    for rel, text in {
        "README.md": "hi", "setup.py": "", "src/pkg/__init__.py": "", "src/pkg/mod.py": "x",
        "src/pkg/mod.pyc": "", "src/data/blob.bin": "b", ".env": "SECRET=1",
        "node_modules/a/index.js": "", ".git/HEAD": "ref: refs/heads/main\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "empty").mkdir()
    (root / "link-to-src").symlink_to("src")
    (root / "dangling").symlink_to("/nonexistent/target")
    os.chmod(root / "setup.py", 0o755)


def test_select_entries_exclude_only(tmp_path: Path) -> None:
    _tree(tmp_path)
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
    _tree(tmp_path)
    got = select_entries(tmp_path, PathFilter(include=["src/**/*.py", "README.md"]))
    assert got == ["README.md", "src", "src/pkg", "src/pkg/__init__.py", "src/pkg/mod.py"]


def test_stage_copy_and_tar_keep_modes_and_links(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    _tree(src)
    entries = select_entries(src, PathFilter(exclude=[".env"]))
    stage_copy(src, entries, dst)
    assert (dst / "src/pkg/mod.py").read_text() == "x"
    assert not (dst / ".env").exists()
    assert os.stat(dst / "setup.py").st_mode & 0o777 == 0o755
    assert os.readlink(dst / "link-to-src") == "src"
    assert os.readlink(dst / "dangling") == "/nonexistent/target"
    buf = io.BytesIO()
    write_tar(src, entries, buf)
    buf.seek(0)
    with tarfile.open(fileobj=buf) as tf:
        members = {m.name: m for m in tf.getmembers()}
    assert list(members) == entries
    assert all(m.uid == 0 and m.gid == 0 for m in members.values())
    assert members["link-to-src"].issym() and members["setup.py"].mode & 0o777 == 0o755


def test_is_within() -> None:
    assert is_within("/workspace", "/workspace")
    assert is_within("/workspace/a/../b", "/workspace/")
    assert not is_within("/workspace2", "/workspace")
    assert not is_within("/", "/workspace")


def test_modes() -> None:
    assert Workspace(RepositoryConfig(local_path="/x")).mode is Mode.LIVE
    assert Workspace(RepositoryConfig(local_path="/x", exclude_files=["a"])).mode \
        is Mode.CONTAINER_COPY
    assert Workspace(RepositoryConfig(url="/r.git")).mode is Mode.CONTAINER_COPY
    assert Workspace(RepositoryConfig(url="/r.git", read_only=True)).mode is Mode.MOUNTED_COPY
    assert Workspace(None).mode is None
    ws = Workspace(RepositoryConfig(local_path="/x", mount_point="/repo"))
    assert ws.covers("/repo/sub") and not ws.covers("/workspace")


def test_cache_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_root() == tmp_path / "sandbox-sdk" / "repos"
    assert mirror_path("file:///a").parent == cache_root()
    assert mirror_path("file:///a") != mirror_path("file:///b")
    monkeypatch.chdir(tmp_path)
    assert normalize_url("repo.git") == str(tmp_path / "repo.git")
    assert normalize_url("https://example.invalid/r.git") == "https://example.invalid/r.git"
    assert normalize_url("git@example.invalid:r.git") == "git@example.invalid:r.git"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("repo", "message"),
    [
        (RepositoryConfig(), "exactly one of url and local_path"),
        (RepositoryConfig(url="/a", local_path="/b"), "exactly one of url and local_path"),
        (RepositoryConfig(local_path="/x", mount_point="relative"), "absolute path"),
        (RepositoryConfig(local_path="/x", mount_point="/"), "absolute path"),
        (RepositoryConfig(local_path="/x", branch="main"), "need a url"),
        (RepositoryConfig(url="/a", branch="--upload-pack=x"), "must not start with '-'"),
        (RepositoryConfig(local_path="/x", include_files=["../up"]), "invalid repository glob"),
        (RepositoryConfig(local_path="/x", owner="1000"), "would change your host directory"),
        (RepositoryConfig(local_path="/x", permissions="0777"), "would change your host"),
        (RepositoryConfig(url="/a", read_only=True, owner="sandbox"), "must be numeric"),
        (RepositoryConfig(local_path="/definitely/not/here"), "/definitely/not/here"),
        (RepositoryConfig(local_path="/x", git_config=GitConfig(user_name="a"),
                          mount_point="/a:b"), "absolute path"),
    ],
)
async def test_prepare_refuses(repo: RepositoryConfig, message: str) -> None:
    with pytest.raises(SandboxInitFailed, match=message.replace("(", r"\(")):
        await Workspace(repo).prepare({})


@pytest.mark.asyncio
async def test_prepare_live_mount_adds_bind(tmp_path: Path) -> None:
    body: dict[str, object] = {"HostConfig": {"Mounts": [{"Type": "tmpfs", "Target": "/tmp"}]}}
    ws = Workspace(RepositoryConfig(local_path=str(tmp_path), read_only=True, mount_point="/r"))
    await ws.prepare(body)
    mounts = body["HostConfig"]["Mounts"]  # type: ignore[index]
    assert mounts[0]["Type"] == "tmpfs"
    source = str(await anyio.Path(tmp_path).resolve())
    assert mounts[1] == {"Type": "bind", "Source": source, "Target": "/r",
                         "ReadOnly": True, "BindOptions": {"Propagation": "rprivate"}}
    assert await ws.remove() == []
    assert await anyio.Path(tmp_path).is_dir()  # the user's directory is never removed
