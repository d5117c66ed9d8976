"""Pulling from a real registry on loopback (Debian's docker-registry), per pull policy."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig, SandboxInitFailed
from sandbox.docker import DockerBackend
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

REGISTRY = "/usr/bin/docker-registry"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A registry on 127.0.0.1 holding the busybox test image; yields its address."""
    if not Path(REGISTRY).exists():
        pytest.fail(f"{REGISTRY} is missing (Debian package docker-registry); run `make test`",
                    pytrace=False)
    root = tmp_path_factory.mktemp("registry")
    addr = f"127.0.0.1:{free_port()}"
    (root / "config.yml").write_text(
        f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
        f"http:\n  addr: {addr}\n")
    proc = subprocess.Popen([REGISTRY, "serve", str(root / "config.yml")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{addr}/v2/", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail(f"the registry at {addr} did not answer", pytrace=False)
                time.sleep(0.1)
        pushed = f"{addr}/sandbox/busybox:pulltest"
        docker_cli("tag", IMAGE_BUSYBOX, pushed)
        docker_cli("push", "-q", pushed)
        docker_cli("rmi", pushed)
        yield addr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def image_present(ref: str) -> bool:
    return bool(docker_cli("images", "-q", ref).strip())


async def test_missing_image_is_pulled_with_progress_then_always_pulls_again(
    registry: str,
) -> None:
    ref = f"{registry}/sandbox/busybox:pulltest"
    assert not image_present(ref)
    progress: list[Mapping[str, Any]] = []
    try:
        backend = DockerBackend(SandboxConfig(image=ref), on_pull_progress=progress.append)
        async with Sandbox(backend=backend) as sb:
            assert (await sb.execute_command("echo pulled")).stdout == "pulled\n"
        assert image_present(ref)
        assert any("status" in p for p in progress), progress
        assert any("Digest" in str(p.get("status")) for p in progress), progress
        # Present now: "missing" does not pull, "always" does.
        again: list[Mapping[str, Any]] = []
        backend = DockerBackend(SandboxConfig(image=ref), on_pull_progress=again.append)
        async with Sandbox(backend=backend):
            pass
        assert again == []

        async def async_callback(record: Mapping[str, Any]) -> None:
            again.append(record)

        cfg = SandboxConfig(image=ref, pull_policy="always")
        async with Sandbox(backend=DockerBackend(cfg, on_pull_progress=async_callback)):
            pass
        assert any("up to date" in str(p.get("status")) for p in again), again
    finally:
        docker_cli("rmi", "-f", ref, check=False)


async def test_tag_missing_in_the_registry_names_it(registry: str) -> None:
    ref = f"{registry}/sandbox/busybox:no-such-tag"
    with pytest.raises(SandboxInitFailed) as ei:
        await Sandbox(SandboxConfig(image=ref)).initialize()
    assert ref in str(ei.value) and "pull" in str(ei.value)
    assert not image_present(ref)
