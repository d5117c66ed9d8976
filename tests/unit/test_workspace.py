"""Repository staging, modes and refusals, without an engine."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import anyio
import pytest

from sandbox import GitConfig, RepositoryConfig, SandboxInitFailed
from sandbox._glob import PathFilter, select_entries
from sandbox._workspace import Mode, Workspace, is_within, stage_copy, write_tar
from tests.unit._trees import sample_tree


def test_stage_copy_and_tar_keep_modes_and_links(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    dst.mkdir()
    sample_tree(src)
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
