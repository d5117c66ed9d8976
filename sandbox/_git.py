"""Host git for repositories: a bare mirror per URL in the user's cache, and a checkout from it.

Clones go through a bare mirror per URL under the user's cache directory (one process at a time
per mirror, under a file lock), then a fresh local clone per sandbox at its branch or commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import anyio

from ._errors import SandboxInitFailed
from ._models import RepositoryConfig
from ._rmtree import remove_tree

__all__ = [
    "GIT_ENV", "GitFailed", "cache_root", "checkout", "git", "mirror_path", "normalize_url",
    "update_mirror",
]

GIT_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}


class GitFailed(Exception):
    """A host git command failed; the message is git's own."""


async def git(*args: str, cwd: Path | None = None) -> str:
    """Run host git without a terminal prompt; return stdout or raise GitFailed with stderr."""
    env = {**os.environ, **GIT_ENV}
    try:
        proc = await anyio.run_process(
            ["git", *args], cwd=cwd, env=env, check=False, stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError as exc:
        raise GitFailed("git is not installed on the host") from exc
    if proc.returncode != 0:
        msg = proc.stderr.decode("utf-8", "replace").strip() or f"exit code {proc.returncode}"
        raise GitFailed(msg)
    return proc.stdout.decode("utf-8", "replace").strip()


def cache_root() -> Path:
    """Where mirrors are kept: ``$XDG_CACHE_HOME/sandbox-sdk/repos`` (``~/.cache`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sandbox-sdk" / "repos"


def normalize_url(url: str) -> str:
    """Make a local path absolute so the same repository maps to one mirror from any cwd."""
    if "://" not in url and not re.match(r"^[^/]+:", url):
        return str(Path(url).expanduser().resolve())
    return url


def mirror_path(url: str) -> Path:
    return cache_root() / (hashlib.sha256(url.encode()).hexdigest()[:32] + ".git")


@contextlib.asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """Hold an exclusive flock on ``path``, polling so waiting stays cancellable."""
    fd = await anyio.to_thread.run_sync(os.open, path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                await anyio.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing drops the lock


async def update_mirror(url: str) -> Path:
    """Create or refresh the bare mirror of ``url``; one process at a time per mirror."""
    mirror = mirror_path(url)
    await anyio.Path(mirror.parent).mkdir(parents=True, exist_ok=True)
    async with _file_lock(mirror.with_suffix(".lock")):
        if await anyio.Path(mirror).is_dir():
            await git("fetch", "--prune", "--quiet", "origin", cwd=mirror)
            return mirror
        tmp = Path(await anyio.to_thread.run_sync(
            lambda: tempfile.mkdtemp(prefix=".clone-", dir=mirror.parent)))
        try:
            await git("clone", "--mirror", "--quiet", "--", url, str(tmp))
            await anyio.Path(tmp).rename(mirror)
        finally:
            with anyio.CancelScope(shield=True):  # a cancelled clone leaves no half mirror
                await anyio.to_thread.run_sync(remove_tree, tmp)  # any depth or mode
    return mirror


async def checkout(repo: RepositoryConfig, dest: Path) -> None:
    """Clone ``repo.url`` into the empty directory ``dest`` at its branch or exact commit."""
    url = await anyio.to_thread.run_sync(normalize_url, repo.url)
    try:
        mirror = await update_mirror(url)
    except GitFailed as exc:
        raise SandboxInitFailed(f"could not fetch repository {repo.url!r}",
                                details=str(exc)) from exc
    args = ["clone", "--quiet", "--no-checkout"]
    if repo.branch:
        args += ["--branch", repo.branch]
    try:
        await git(*args, "--", str(mirror), str(dest))
    except GitFailed as exc:
        what = f"branch {repo.branch!r}" if repo.branch else "its default branch"
        raise SandboxInitFailed(f"could not check out {what} of repository {repo.url!r}",
                                details=str(exc)) from exc
    if repo.commit_hash:
        try:
            sha = await git("rev-parse", "--verify", "--quiet", "--end-of-options",
                            f"{repo.commit_hash}^{{commit}}", cwd=dest)
        except GitFailed as exc:
            raise SandboxInitFailed(
                f"commit {repo.commit_hash!r} does not exist in repository {repo.url!r}",
                details=str(exc) or "git rev-parse found no such commit") from exc
        if repo.branch:
            try:
                await git("merge-base", "--is-ancestor", sha, "HEAD", cwd=dest)
            except GitFailed as exc:
                raise SandboxInitFailed(
                    f"commit {repo.commit_hash!r} is not on branch {repo.branch!r} of "
                    f"repository {repo.url!r}", details=str(exc)) from exc
            await git("reset", "--quiet", "--hard", sha, cwd=dest)
        else:
            await git("checkout", "--quiet", "--detach", sha, cwd=dest)
    else:
        await git("checkout", "--quiet", cwd=dest)
    # Inside, `git remote -v` and `git fetch` should name the real remote, not the cache.
    await git("remote", "set-url", "origin", repo.url, cwd=dest)
