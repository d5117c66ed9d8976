"""Shared test set-up: the real engine is part of the suite, so missing it fails, not skips."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from sandbox import checkpoints
from sandbox._constants import IMAGE_BUSYBOX, IMAGE_PYTHON, LABEL_MANAGED_BY, LABEL_OWNER_PID

LABEL = f"{LABEL_MANAGED_BY}=sandbox-sdk"


def docker_cli(*args: str, check: bool = True) -> str:
    """Run the docker CLI for checks made from outside the SDK."""
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout


def our_containers() -> list[str]:
    return docker_cli("ps", "-aq", "--filter", f"label={LABEL}").split()


def engine_ok() -> str | None:
    try:
        docker_cli("version")
        for image in (IMAGE_BUSYBOX, IMAGE_PYTHON):
            docker_cli("image", "inspect", image)
    except (AssertionError, OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None


_LIST: dict[str, tuple[str, ...]] = {
    "container": ("ps", "-aq"), "network": ("network", "ls", "-q"),
    "volume": ("volume", "ls", "-q"),
}
_REMOVE: dict[str, tuple[str, ...]] = {
    "container": ("rm", "-f"), "network": ("network", "rm"), "volume": ("volume", "rm", "-f"),
}


def ours(kind: str) -> list[str]:
    """Ids of the containers, networks or volumes the SDK made for this test process."""
    return docker_cli(*_LIST[kind], "--filter", f"label={LABEL}",
                      "--filter", f"label={LABEL_OWNER_PID}={os.getpid()}").split()


@pytest.fixture(scope="session", autouse=True)
def _places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite's Kubernetes sandboxes record their namespaces (for `sandbox.gc`) in a
    directory of its own, not the user's (`sandbox._places`); child processes inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SANDBOX_PLACES", str(tmp_path_factory.mktemp("places")))
        yield


@pytest.fixture(scope="session")
def engine() -> Iterator[None]:
    """Fail (never skip) when the engine or the test images are missing."""
    problem = engine_ok()
    if problem:
        pytest.fail(f"the Docker engine or test images are not ready ({problem}); run `make test`",
                    pytrace=False)
    yield
    # After the suite nothing the SDK made for this process may remain. Only this process's
    # own: another process's sandboxes are not ours to judge or touch.
    leaks = {kind: ours(kind) for kind in _REMOVE}
    for kind, ids in leaks.items():
        if ids:
            subprocess.run(["docker", *_REMOVE[kind], *ids], capture_output=True, timeout=120)
    if any(leaks.values()):
        pytest.fail(f"the suite left labelled resources behind (now removed): {leaks}",
                    pytrace=False)


def container_exists(name_or_id: str) -> bool:
    out = docker_cli("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{json .}}")
    ids = [json.loads(line) for line in out.splitlines() if line.strip()]
    return any(c["ID"].startswith(name_or_id[:12]) or c["Names"] == name_or_id for c in ids)


def sandbox_containers(sandbox_id: str) -> list[str]:
    """Containers carrying one sandbox's id label, whatever state they are in."""
    return docker_cli("ps", "-aq", "--filter", f"label=io.sandbox.id={sandbox_id}").split()


@pytest_asyncio.fixture
async def prefix() -> AsyncIterator[str]:
    """A unique checkpoint name prefix; every checkpoint named with it, or taken of a
    sandbox whose id starts with it, is removed afterwards."""
    tag = f"t{uuid.uuid4().hex[:8]}"
    yield tag
    for point in await checkpoints():
        if point.name.startswith(tag) or point.source_id.startswith(tag):
            docker_cli("rmi", "-f", point.image_id, check=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--kubeconfig``: run the Kubernetes backend's tests on that cluster, not the fake."""
    group = parser.getgroup("kubernetes")
    group.addoption("--kubeconfig", default="", help="run tests/kubernetes and the contract "
                    "tests' kubernetes case against this cluster instead of the fake API server")
    group.addoption("--kube-namespace", default="default", help="namespace for --kubeconfig")
    group.addoption("--kube-image", default="busybox:1.36",
                    help="image with sh, tar and stat for --kubeconfig")


def derived_image(tmp_path: Path, tag: str, steps: str, *,
                  base: str = IMAGE_PYTHON) -> Iterator[str]:
    """Build ``tag`` as ``base`` plus ``steps`` (Dockerfile lines); removed after (a fixture's
    body: ``yield from derived_image(...)``)."""
    (tmp_path / "Dockerfile").write_text(f"FROM {base}\n{steps}")
    docker_cli("build", "-q", "-t", tag, str(tmp_path))
    try:
        yield tag
    finally:
        docker_cli("rmi", "-f", tag, check=False)
