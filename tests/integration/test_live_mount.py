"""A live ``local_path`` mount, played by an attacker and by a user who wants their edits.

The attacker leaves a setuid copy of a shell tool and ``results.json -> /etc/shadow`` in the
user's checkout for a host user or tool to run or read later; cleanup strips the bits and
reports the links. The user mounts their checkout writable and expects the agent to edit it:
the sandbox runs as the directory's owner, and a root-owned checkout is refused up front.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    GitConfig,
    RepositoryConfig,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
)
from sandbox._live_mount import scan_live_mount

pytestmark = pytest.mark.usefixtures("engine")

OWNER = 1234

#: What a hostile agent leaves behind in the checkout it was given.
PLANT = (
    "cp /bin/busybox tool && chmod 6755 tool && "
    "mkdir shared && chmod 2775 shared && "
    "ln -s /etc/shadow results.json && ln -s ../../../../etc up && "
    "ln -s README.md readme-link && ln -s \"$PWD/README.md\" absolute-inside && "
    "stat -c '%a %n' tool shared"
)


def owned_repo(root: Path, uid: int = OWNER) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("hello\n")
    for path in (repo, repo / "README.md"):
        os.chown(path, uid, uid)
    return repo


def audit_of(caplog: pytest.LogCaptureFixture, event: str) -> list[dict[str, Any]]:
    return [r.audit for r in caplog.records  # type: ignore[attr-defined]
            if r.name == "sandbox.audit" and r.audit["event"] == event]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.asyncio
async def test_a_writable_live_mount_runs_as_its_owner(tmp_path: Path) -> None:
    repo = owned_repo(tmp_path)
    cfg = SandboxConfig(image=IMAGE_PYTHON, repository=RepositoryConfig(
        local_path=str(repo), git_config=GitConfig(user_name="Agent")))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command("id -u; id -g; echo edited >> README.md && echo new > new.py"
                                     " && echo $HOME")
        assert r.success, r
        assert r.stdout.split() == [str(OWNER), str(OWNER), "/tmp"]
    st = (repo / "new.py").stat()
    assert (st.st_uid, st.st_gid) == (OWNER, OWNER)  # the user's edits come back as the user's
    assert (repo / "README.md").read_text() == "hello\nedited\n"
    assert sorted(p.name for p in repo.iterdir()) == ["README.md", "new.py"]  # no dotfiles


@pytest.mark.asyncio
async def test_a_root_owned_writable_mount_is_refused_with_the_choices(tmp_path: Path) -> None:
    repo = owned_repo(tmp_path, uid=0)
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, repository=RepositoryConfig(local_path=str(repo)))
    with pytest.raises(SandboxInitFailed, match="owned by root") as info:
        async with Sandbox(cfg):
            pass
    assert "run_as_user='0'" in str(info.value) and "include_files=['**']" in str(info.value)
    # The copy it recommends works as the default user, and the checkout stays as it was.
    copy = RepositoryConfig(local_path=str(repo), include_files=["**"])
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, repository=copy)) as sb:
        r = await sb.execute_command("id -u && echo edited > README.md && cat README.md")
        assert r.stdout.split() == ["1000", "edited"], r
    assert (repo / "README.md").read_text() == "hello\n"
    # Root without capabilities, explicitly, and read-only mounts are not refused.
    for rc, security in ((RepositoryConfig(local_path=str(repo)),
                          SecurityPolicy(run_as_user="0")),
                         (RepositoryConfig(local_path=str(repo), read_only=True),
                          SecurityPolicy())):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, repository=rc,
                                         security=security)) as sb:
            assert (await sb.execute_command("cat README.md")).stdout == "hello\n"


@pytest.mark.asyncio
async def test_cleanup_strips_set_id_bits_and_reports_outward_links(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    repo = owned_repo(tmp_path)
    # The owner's uid, explicitly: the same sandbox user as before the owner became the default
    security = SecurityPolicy(log_security_events=True, run_as_user=str(OWNER))
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=security,
                        repository=RepositoryConfig(local_path=str(repo)))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command(PLANT)
        assert r.stdout.split() == ["6755", "tool", "2775", "shared"], r
        assert mode(repo / "tool") == 0o6755  # live: the host sees it at once
    assert mode(repo / "tool") == 0o755 and mode(repo / "shared") == 0o775
    assert (repo / "tool").stat().st_uid == OWNER  # nothing else changed
    found = {(e["found"], os.path.basename(e["path"])): e["detail"]
             for e in audit_of(caplog, "live_mount")}
    assert found == {
        ("setid_stripped", "tool"): "mode 6755",
        ("setid_stripped", "shared"): "mode 2775",
        ("symlink_outside", "results.json"): "/etc/shadow",
        ("symlink_outside", "up"): "../../../../etc",
        # /workspace/README.md inside is /workspace/README.md on the host: outside
        ("symlink_outside", "absolute-inside"): "/workspace/README.md",
    }


@pytest.fixture
def nobody_dir() -> Iterator[Path]:
    """A checkout host nobody (the process sandbox's user under root) can write."""
    top = Path(tempfile.mkdtemp())
    os.chmod(top, 0o755)
    repo = owned_repo(top, uid=65534)
    yield repo
    shutil.rmtree(top)


@pytest.mark.asyncio
async def test_process_backend_cleanup_strips_and_reports_too(
        nobody_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox.audit")
    cfg = SandboxConfig(type="process", image=IMAGE_BUSYBOX,
                        security=SecurityPolicy(log_security_events=True),
                        repository=RepositoryConfig(local_path=str(nobody_dir)))
    async with Sandbox(cfg) as sb:
        r = await sb.execute_command(PLANT)
        assert r.success, r
        assert mode(nobody_dir / "tool") == 0o6755
    assert mode(nobody_dir / "tool") == 0o755 and mode(nobody_dir / "shared") == 0o775
    kinds = sorted((e["found"], os.path.basename(e["path"]))
                   for e in audit_of(caplog, "live_mount"))
    assert kinds == [("setid_stripped", "shared"), ("setid_stripped", "tool"),
                     ("symlink_outside", "absolute-inside"),
                     ("symlink_outside", "results.json"), ("symlink_outside", "up")]


@pytest.mark.asyncio
async def test_process_backend_refuses_a_writable_mount_it_cannot_write(tmp_path: Path) -> None:
    repo = owned_repo(tmp_path, uid=0)  # 0755, root's: host nobody cannot write it
    cfg = SandboxConfig(type="process", image=IMAGE_BUSYBOX,
                        repository=RepositoryConfig(local_path=str(repo)))
    with pytest.raises(SandboxInitFailed, match="not writable by the host user") as info:
        async with Sandbox(cfg):
            pass
    assert "include_files=['**']" in str(info.value)


def test_the_scan_leaves_what_was_there_before_the_sandbox(tmp_path: Path) -> None:
    """Set-id bits and links older than the sandbox are the user's: kept and not reported."""
    old = tmp_path / "old-setuid"
    old.write_text("#!/bin/sh\n")
    old.chmod(0o4755)
    (tmp_path / "old-link").symlink_to("/etc/passwd")
    assert scan_live_mount(str(tmp_path), since=time.time() + 3600) == []
    assert mode(old) == 0o4755
    found = scan_live_mount(str(tmp_path), since=time.time() - 3600)  # as if made meanwhile
    assert sorted(f.kind for f in found) == ["setid_stripped", "symlink_outside"]
    assert mode(old) == 0o755
