"""The SDK's default images hold /workspace as 1000:0 mode 0775 (what lets a create skip the
archive PUT for the default user while capability-less root still writes it)."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pytest

from sandbox.docker import _image_build
from sandbox.docker._image_build import WORKSPACE_MODE, WORKSPACE_OWNER, rootfs_busybox


def test_the_workspace_owner_is_the_default_user_and_root_group() -> None:
    assert WORKSPACE_OWNER == (1000, 0)
    assert WORKSPACE_MODE == 0o775


@pytest.mark.skipif(shutil.which("busybox") is None and not Path("/bin/busybox").exists(),
                    reason="needs Debian's busybox-static")
def test_busybox_rootfs_holds_workspace_as_1000_0_0775(tmp_path: Path) -> None:
    tarball = rootfs_busybox(tmp_path)
    with tarfile.open(tarball) as tar:
        workspace = tar.getmember("./workspace")
        home = tar.getmember("./home/sandbox")
        tmp = tar.getmember("./tmp")
    assert (workspace.uid, workspace.gid, workspace.mode) == (1000, 0, 0o775)
    assert (home.uid, home.gid) == (1000, 1000)
    assert (tmp.uid, tmp.gid) == (0, 0)


def test_python_rootfs_hook_sets_the_same_owner(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(_image_build, "_need", lambda program, package: None)
    monkeypatch.setattr(_image_build.os, "geteuid", lambda: 0)
    monkeypatch.setattr(_image_build, "_run", lambda argv, what, **kw: seen.append(argv))
    sources = tmp_path / "sources"
    sources.write_text("deb http://deb.debian.org/debian bookworm main\n")
    monkeypatch.setattr(_image_build, "Path", lambda p: sources if "apt" in str(p) else Path(p))
    _image_build.rootfs_python(tmp_path)
    [hook] = [a for a in seen[0] if a.startswith("--customize-hook=")]
    assert "chown 1000:0 /workspace && chmod 775 /workspace" in hook
