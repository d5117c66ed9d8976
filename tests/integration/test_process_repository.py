"""Repositories in a process (bubblewrap) sandbox: live binds, clones, filtered copies, refusals.

The same fixtures as the Docker suite (a local bare repository; no network beyond loopback).
Host directories the sandbox binds live are made outside pytest's private tmp: the sandbox runs
as host nobody, which must be able to enter them.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    RepositoryConfig,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
)
from tests.integration.test_repository import (  # the Docker suite's fixtures and helpers
    Bare,
    bare,  # noqa: F401
    cache_home,  # noqa: F401
    make_tree,
    temp_copies,
    tree_digest,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine", "cache_home")]


def config(repo: RepositoryConfig, **kw: object) -> SandboxConfig:
    return SandboxConfig(type="process", image=IMAGE_BUSYBOX, repository=repo,
                         **kw)  # type: ignore[arg-type]


@pytest.fixture
def host_dir() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp())
    os.chmod(top, 0o755)
    repo = top / "repo"
    repo.mkdir()
    make_tree(repo)
    for dirpath, dirnames, _ in os.walk(top):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
    yield repo
    shutil.rmtree(top)


async def test_a_read_only_local_path_is_bound_and_refuses_writes(host_dir: Path) -> None:
    before = tree_digest(host_dir)
    repo = RepositoryConfig(local_path=str(host_dir), read_only=True, mount_point="/src")
    for ro_root in (True, False):
        cfg = config(repo, security=SecurityPolicy(read_only_root=ro_root))
        async with Sandbox(cfg) as sb:
            assert (await sb.execute_command("cat /src/src/app.py")).stdout == "x = 1\n"
            for script in ("echo x > /src/new", "rm /src/README.md", "mkdir /src/d"):
                result = await sb.execute_command(script)
                assert "Read-only file system" in result.stderr, (script, result.stderr)
    assert tree_digest(host_dir) == before


async def test_a_writable_local_path_takes_writes_to_the_host(host_dir: Path) -> None:
    os.chmod(host_dir, 0o777)  # the sandbox writes as host nobody
    async with Sandbox(config(RepositoryConfig(local_path=str(host_dir)))) as sb:
        assert (await sb.execute_command("cat README.md && echo made > new.txt")).success
        assert (host_dir / "new.txt").read_text() == "made\n"
    assert (host_dir / "new.txt").exists()  # cleanup never touches the user's directory


async def test_a_clone_checks_out_the_branch_or_commit(bare: Bare) -> None:  # noqa: F811
    before = temp_copies()
    repo = RepositoryConfig(url=str(bare.path), branch="feature", mount_point="/repo",
                            read_only=True)
    async with Sandbox(config(repo)) as sb:
        result = await sb.execute_command("cat /repo/FEATURE; touch /repo/x")
        assert result.stdout == "f\n" and "Read-only file system" in result.stderr
    async with Sandbox(config(RepositoryConfig(url=str(bare.path),
                                               commit_hash=bare.first))) as sb:
        result = await sb.execute_command("cat README.md; ls; echo new > mine && cat mine")
        assert result.stdout.split() == ["v1", "README.md", "new"], result
        owner = await sb.execute_command("stat -c %u README.md")
        assert owner.stdout.strip() == "1000"  # a writable copy is the sandbox user's
    assert temp_copies() == before  # the host checkouts went with cleanup


async def test_filters_give_a_copy(host_dir: Path) -> None:
    repo = RepositoryConfig(local_path=str(host_dir), include_files=("src/**", "*.md"),
                            exclude_files=("**/*.pyc",), read_only=True, mount_point="/r")
    async with Sandbox(config(repo)) as sb:
        listing = await sb.execute_command("cd /r && find . -type f | sort")
        assert listing.stdout.split() == ["./README.md", "./docs/guide.md", "./src/app.py"]


async def test_another_owner_is_refused_by_name(bare: Bare) -> None:  # noqa: F811
    for field in ("owner", "group"):
        repo = RepositoryConfig(url=str(bare.path), **{field: "1234"})
        with pytest.raises(SandboxInitFailed, match=f"^repository.{field}: "):
            async with Sandbox(config(repo)):
                pass


async def test_git_config_and_safe_directory_as_on_docker(bare: Bare) -> None:  # noqa: F811
    from sandbox import IMAGE_PYTHON, GitConfig

    repo = RepositoryConfig(url=str(bare.path), git_config=GitConfig(
        user_name="Ada", user_email="ada@example.invalid", config_values={"core.x": "1"}))
    cfg = SandboxConfig(type="process", image=IMAGE_PYTHON, repository=repo)
    async with Sandbox(cfg) as sb:
        result = await sb.execute_command(
            "git config --global user.name; git config --global core.x; "
            "git log -1 --format=%H; git remote get-url origin")
        assert result.stdout.split() == ["Ada", "1", bare.main, str(bare.path)], result
