"""`sandbox gc` reports (and removes) rootfs cache entries whose image the engine lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox import IMAGE_BUSYBOX, gc
from tests.conftest import docker_cli

pytestmark = [pytest.mark.usefixtures("engine")]


def _entry(cache: Path, image_id: str, image: str) -> Path:
    path = cache / image_id.removeprefix("sha256:")
    (path / "rootfs").mkdir(parents=True)
    (path / "image.json").write_text(json.dumps({"image": image, "bytes": 4096}))
    return path


@pytest.mark.asyncio
async def test_gc_reports_entries_whose_image_is_gone(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_ROOTFS_CACHE", str(tmp_path))
    busybox = docker_cli("image", "inspect", "--format", "{{.Id}}", IMAGE_BUSYBOX).strip()
    here = _entry(tmp_path, busybox, IMAGE_BUSYBOX)
    lost = _entry(tmp_path, "sha256:" + "0" * 63 + "1", "deleted-image:1")
    # dry_run: this test shares the engine; nothing of anyone else's is removed.
    report = await gc(dry_run=True)
    assert [(i.kind, i.name) for i in report.removed_rootfs] == [("rootfs", str(lost))]
    assert "no longer on the engine" in report.removed_rootfs[0].reason
    assert ("rootfs", str(here)) in [(i.kind, i.name) for i in report.kept_rootfs]
    assert lost.exists()  # a dry run


@pytest.mark.asyncio
async def test_an_image_is_exported_through_the_image_store_and_nothing_is_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty cache: the process backend exports the image from the Docker engine's store
    (through the registry, not an import of the Docker backend) and removes its container."""
    from sandbox import Sandbox, SandboxConfig
    from sandbox.process import _rootfs

    monkeypatch.setenv("SANDBOX_ROOTFS_CACHE", str(tmp_path))
    monkeypatch.setattr(_rootfs, "_resolved", {})
    async with Sandbox(SandboxConfig(type="process", image=IMAGE_BUSYBOX)) as sb:
        result = await sb.execute_command("cat /etc/hostname >/dev/null; echo exported")
    assert result.stdout.strip() == "exported"
    busybox = docker_cli("image", "inspect", "--format", "{{.Id}}", IMAGE_BUSYBOX).strip()
    entry = tmp_path / busybox.removeprefix("sha256:")
    assert (entry / "rootfs" / "bin").is_dir()
    assert json.loads((entry / "image.json").read_text())["image"] == IMAGE_BUSYBOX
    left = docker_cli("ps", "-a", "--filter", "ancestor=" + IMAGE_BUSYBOX, "--filter",
                      "status=created", "--format", "{{.Command}}")
    assert "/nonexistent" not in left
