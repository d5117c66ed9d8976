"""Repositories in a real container: live mounts, clones, filtered copies, ownership, git config."""

from __future__ import annotations

import glob
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import anyio
import attrs
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    GitConfig,
    NetworkConfig,
    RepositoryConfig,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SandboxPermissionDenied,
    SecurityPolicy,
)
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine", "cache_home")]

ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
       "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=ENV, capture_output=True, text=True,
                          check=True, timeout=60)
    return proc.stdout.strip()


@attrs.frozen
class Bare:
    path: Path
    first: str  # first commit on main
    main: str  # tip of main
    feature: str  # tip of branch "feature"


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep mirrors in the test's own directory."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@pytest.fixture
def bare(tmp_path: Path) -> Bare:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "README.md").write_text("v1\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "one")
    first = git(work, "rev-parse", "HEAD")
    (work / "README.md").write_text("v2\n")
    (work / "src").mkdir()
    (work / "src" / "app.py").write_text("print('hi')\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "two")
    main = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "-b", "feature")
    (work / "FEATURE").write_text("f\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "feature")
    feature = git(work, "rev-parse", "HEAD")
    git(work, "checkout", "-q", "main")  # the bare clone's default branch
    path = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(path))
    return Bare(path=path, first=first, main=main, feature=feature)


def tree_digest(root: Path) -> str:
    """Hash names, modes, owners and contents of everything under root."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted([*dirnames, *filenames]):
            p = Path(dirpath, name)
            st = p.lstat()
            h.update(f"{p.relative_to(root)}|{st.st_mode:o}|{st.st_uid}|{st.st_gid}\n".encode())
            if p.is_file() and not p.is_symlink():
                h.update(p.read_bytes())
    return h.hexdigest()


def temp_copies() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "sandbox-repo-*")))


def make_tree(root: Path) -> None:
    for rel, text in {"README.md": "hi\n", "src/app.py": "x = 1\n", "src/app.pyc": "junk",
                      "docs/guide.md": "g\n", "secret.env": "TOKEN=1\n",
                      "build/out.o": "o"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


async def test_read_only_mount_refuses_every_write(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    make_tree(repo)
    before = tree_digest(repo)
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(
        local_path=str(repo), read_only=True))
    async with Sandbox(cfg) as sb:
        assert (await sb.execute_command("cat /workspace/src/app.py")).stdout == "x = 1\n"
        for script in ("echo x > /workspace/new", "rm /workspace/README.md",
                       "mkdir /workspace/d", "touch /workspace/src/app.py"):
            r = await sb.execute_command(script)
            assert r.exit_code != 0 and "Read-only file system" in r.stderr, (script, r.stderr)
        with pytest.raises(SandboxPermissionDenied, match="read-only file system"):
            await sb.write_file("/workspace/README.md", "changed")
    assert tree_digest(repo) == before


async def test_read_write_mount_edits_reach_host_and_cleanup_keeps_repo(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    make_tree(repo)
    # Root, explicitly: the host files are root's, and a live mount keeps their owners.
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(local_path=str(repo)),
                        security=SecurityPolicy(run_as_user="root"))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command("echo edited > README.md && echo new > src/new.py")
        assert r.success, r.stderr
        # visible on the host at once, while the sandbox still runs
        assert (repo / "README.md").read_text() == "edited\n"
        assert (repo / "src" / "new.py").read_text() == "new\n"
        after_edits = tree_digest(repo)
    # cleanup removed nothing and changed nothing else: same names, modes, owners, bytes
    assert tree_digest(repo) == after_edits
    expected = tmp_path / "expected"
    expected.mkdir()
    make_tree(expected)
    (expected / "README.md").write_text("edited\n")
    (expected / "src" / "new.py").write_text("new\n")
    assert tree_digest(repo) == tree_digest(expected)


async def test_missing_local_path_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(local_path=missing))
    with pytest.raises(SandboxInitFailed, match="nope"):
        async with Sandbox(cfg):
            pass


async def test_clone_branch_and_exact_commit(bare: Bare) -> None:
    before = temp_copies()
    base = SandboxConfig(image=IMAGE_PYTHON)
    cases = [
        (RepositoryConfig(url=str(bare.path)), bare.main, "main"),
        (RepositoryConfig(url=f"file://{bare.path}", branch="feature"), bare.feature, "feature"),
        (RepositoryConfig(url=str(bare.path), commit_hash=bare.first), bare.first, "HEAD"),
        (RepositoryConfig(url=str(bare.path), branch="main", commit_hash=bare.first[:10]),
         bare.first, "main"),
    ]
    for repo, sha, ref in cases:
        async with Sandbox(attrs.evolve(base, repository=repo)) as sb:
            r = await sb.execute_command(
                "git rev-parse HEAD && git rev-parse --abbrev-ref HEAD && "
                "git remote get-url origin && git status --porcelain && cat README.md")
            assert r.success, r.stderr
            lines = r.stdout.splitlines()
            assert lines[:3] == [sha, ref, repo.url], repo
            assert lines[3] == ("v1" if sha == bare.first else "v2")  # a clean checkout
            assert (await sb.execute_command("test -e FEATURE")).success is (ref == "feature")
    assert temp_copies() == before  # every checkout was removed


@pytest.mark.parametrize(
    ("repo", "named"),
    [
        (RepositoryConfig(url="{bare}", branch="no-such-branch"), "no-such-branch"),
        (RepositoryConfig(url="{bare}", commit_hash="0123456789abcdef"), "0123456789abcdef"),
        (RepositoryConfig(url="{bare}", branch="feature", commit_hash="{first}~5"),
         "does not exist"),
        (RepositoryConfig(url="{missing}"), "missing.git"),
        (RepositoryConfig(url="file:///nonexistent/repo.git"), "/nonexistent/repo.git"),
    ],
)
async def test_clone_errors_name_what_is_missing(
    bare: Bare, tmp_path: Path, repo: RepositoryConfig, named: str
) -> None:
    before = temp_copies()
    fill = {"bare": str(bare.path), "first": bare.first, "missing": str(tmp_path / "missing.git")}
    repo = attrs.evolve(repo, url=repo.url.format(**fill),
                        commit_hash=repo.commit_hash.format(**fill))
    with pytest.raises(SandboxInitFailed, match=named.replace(".", r"\.")):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, repository=repo)):
            pass
    assert temp_copies() == before


async def test_commit_not_on_branch_is_refused(bare: Bare) -> None:
    # `feature` is not an ancestor of main
    repo = RepositoryConfig(url=str(bare.path), branch="main", commit_hash=bare.feature)
    with pytest.raises(SandboxInitFailed, match="is not on branch 'main'"):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, repository=repo)):
            pass


LIST = "cd /workspace && find . -mindepth 1 | sort"


async def test_include_and_exclude_filters_give_a_copy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    make_tree(repo)
    before = tree_digest(repo)
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(
        local_path=str(repo), include_files=["src/**", "*.md"], exclude_files=["*.pyc"]))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command(LIST)
        assert r.stdout.split() == ["./README.md", "./docs", "./docs/guide.md", "./src",
                                    "./src/app.py"]
        # a copy: edits stay in the sandbox, and come back only when copied out
        assert (await sb.execute_command("echo changed > README.md")).success
        await sb.copy_files("sandbox:/workspace/README.md", str(tmp_path / "out.md"))
    assert (tmp_path / "out.md").read_text() == "changed\n"
    assert tree_digest(repo) == before

    cfg = attrs.evolve(cfg, repository=RepositoryConfig(
        local_path=str(repo), exclude_files=["secret.env", "build/"]))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command(LIST)
        assert "./secret.env" not in r.stdout.split() and "./build" not in r.stdout
        assert (await sb.execute_command("test -e /workspace/secret.env")).exit_code == 1
        assert "./src/app.pyc" in r.stdout.split()


async def test_read_only_filtered_copy_and_clone(tmp_path: Path, bare: Bare) -> None:
    before = temp_copies()
    repo = tmp_path / "repo"
    repo.mkdir()
    make_tree(repo)
    for rc in (RepositoryConfig(local_path=str(repo), exclude_files=["secret.env"],
                                read_only=True),
               RepositoryConfig(url=str(bare.path), read_only=True, mount_point="/src")):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, repository=rc)) as sb:
            r = await sb.execute_command(f"ls {rc.mount_point}; touch {rc.mount_point}/x")
            assert "secret.env" not in r.stdout and "README.md" in r.stdout
            assert "Read-only file system" in r.stderr
    assert temp_copies() == before


async def test_copy_is_owned_so_a_non_root_user_can_write(bare: Bare, tmp_path: Path) -> None:
    security = SecurityPolicy(run_as_user="1000")
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=security,
                        repository=RepositoryConfig(url=str(bare.path), permissions="0750"))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command(
            "id -u && stat -c '%u %a' /workspace /workspace/src/app.py && "
            "echo more >> src/app.py && touch src/new && echo ok")
        assert r.success, r.stderr
        assert r.stdout.split("\n")[:3] == ["1000", "1000 750", "1000 644"]

    repo = tmp_path / "repo"
    repo.mkdir()
    make_tree(repo)
    # Another owner than the sandbox user: root in the sandbox needs CHOWN for that.
    cfg = attrs.evolve(cfg, security=attrs.evolve(security, add_capabilities=("CHOWN",)),
                       repository=RepositoryConfig(
        local_path=str(repo), include_files=["**"], owner="1000", group="100",
        mount_point="/home/work"))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command("stat -c '%u:%g' /home/work /home/work/src/app.py && "
                                     "touch /home/work/src/new")
        assert r.success, r.stderr
        assert r.stdout.split() == ["1000:100", "1000:100"]
    assert not (repo / "src" / "new").exists()


async def test_live_mount_refuses_to_change_host_ownership(tmp_path: Path) -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(
        local_path=str(tmp_path), owner="1000"))
    with pytest.raises(SandboxInitFailed, match="would change your host directory"):
        async with Sandbox(cfg):
            pass


async def test_git_config_is_global_for_the_sandbox_user(bare: Bare) -> None:
    gc = GitConfig(user_name="Agent Smith", user_email="agent@example.invalid",
                   signing_key="ABCDEF12", config_values={"core.editor": "true",
                                                          "pull.rebase": "true"})
    cfg = SandboxConfig(image=IMAGE_PYTHON, security=SecurityPolicy(run_as_user="1000"),
                        repository=RepositoryConfig(url=str(bare.path), git_config=gc))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command("git config --global --list")
        assert r.success, r.stderr
        got = set(r.stdout.splitlines())
        assert {"user.name=Agent Smith", "user.email=agent@example.invalid",
                "user.signingkey=ABCDEF12", "core.editor=true", "pull.rebase=true",
                "safe.directory=/workspace"} <= got
        r = await sb.execute_command("echo x > f && git add f && git commit -qm c && "
                                     "git log -1 --format=%an/%ae")
        assert r.stdout.strip() == "Agent Smith/agent@example.invalid", r.stderr


async def test_git_config_on_a_read_only_root(bare: Bare) -> None:
    """$HOME cannot be written: git's global file goes to /tmp, and commands find it."""
    gc = GitConfig(user_name="Ro Agent", user_email="ro@example.invalid")
    for user in ("1000", "0"):
        cfg = SandboxConfig(
            image=IMAGE_PYTHON, security=SecurityPolicy(run_as_user=user, read_only_root=True),
            repository=RepositoryConfig(url=str(bare.path), git_config=gc))
        async with Sandbox(cfg) as sb:
            r = await sb.execute_command("touch /etc/x; git config --global --list")
            assert "Read-only file system" in r.stderr, r
            assert {"user.name=Ro Agent", "safe.directory=/workspace"} <= \
                set(r.stdout.splitlines()), r
            assert sb.get_environment()["GIT_CONFIG_GLOBAL"].startswith("/tmp/")
            r = await sb.execute_command("echo x > f && git add f && git commit -qm c && "
                                         "git log -1 --format=%an")
            assert r.stdout.strip() == "Ro Agent", r


async def test_git_works_on_a_mount_owned_by_another_uid(bare: Bare, tmp_path: Path) -> None:
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(bare.path), str(work))
    cfg = SandboxConfig(image=IMAGE_PYTHON, security=SecurityPolicy(run_as_user="1000"),
                        repository=RepositoryConfig(local_path=str(work), read_only=True))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command("stat -c %u .git && git rev-parse HEAD")
        assert r.success, r.stderr
        assert r.stdout.split() == ["0", bare.main]


async def test_git_config_needs_git_in_the_image(tmp_path: Path) -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(
        local_path=str(tmp_path), git_config=GitConfig(user_name="x")),
        security=SecurityPolicy(run_as_user="root"))  # the mount is pytest's 0700 tmp_path
    with pytest.raises(SandboxInitFailed, match="lacks git"):
        async with Sandbox(cfg):
            pass
    # without git settings, a git-less image is fine
    async with Sandbox(attrs.evolve(cfg, repository=RepositoryConfig(
            local_path=str(tmp_path)))) as sb:
        assert (await sb.execute_command("ls /workspace")).success


async def test_mirror_is_reused_and_refreshed(bare: Bare, tmp_path: Path,
                                              cache_home: Path) -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(url=str(bare.path)))
    async with Sandbox(cfg):
        pass
    mirrors = list((cache_home / "sandbox-sdk" / "repos").glob("*.git"))
    assert len(mirrors) == 1
    # a new commit upstream is seen by the next sandbox through the same mirror
    work = tmp_path / "w2"
    git(tmp_path, "clone", "-q", str(bare.path), str(work))
    (work / "NEW").write_text("n\n")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "new")
    git(work, "push", "-q", "origin", "main")
    async with Sandbox(cfg) as sb:
        assert (await sb.execute_command("cat NEW")).stdout == "n\n"
    assert list((cache_home / "sandbox-sdk" / "repos").glob("*.git")) == mirrors
    assert await anyio.Path(bare.path).is_dir()


async def test_repository_on_a_read_only_root(tmp_path: Path, bare: Bare) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    make_tree(repo)
    # Root, explicitly, so the live mount of root's files is writable and /etc is tried.
    security = SecurityPolicy(read_only_root=True, run_as_user="root")
    for rc in (RepositoryConfig(local_path=str(repo)), RepositoryConfig(url=str(bare.path))):
        cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=security, repository=rc)
        async with Sandbox(cfg) as sb:
            r = await sb.execute_command("ls && echo ok > written && touch /etc/x")
            assert "README.md" in r.stdout and "Read-only file system" in r.stderr
            assert (await sb.read_file("written")) == b"ok\n"
    assert (repo / "written").read_text() == "ok\n"


async def test_cancelled_initialize_leaves_nothing(bare: Bare) -> None:
    before = temp_copies()
    cfg = SandboxConfig(
        image=IMAGE_BUSYBOX, network=NetworkConfig(isolated=False),
        security=SecurityPolicy(allow_networking=True, isolate_network=False),
        repository=RepositoryConfig(url=str(bare.path), exclude_files=["src"]))
    for delay in (0.01, 0.05, 0.1, 0.2, 0.4, 0.8):
        sb = Sandbox(cfg)
        with anyio.move_on_after(delay):
            async with sb:
                await anyio.sleep(5)
        labels = ["--filter", "label=io.sandbox.id=" + sb.id]
        assert docker_cli("ps", "-aq", *labels) == "", delay
        assert docker_cli("network", "ls", "-q", *labels) == "", delay
        assert temp_copies() == before, delay
