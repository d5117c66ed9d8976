"""The ExecutionSandbox contract, run against the real Docker sandbox, the process (bubblewrap)
sandbox, the in-memory fake, and the Kubernetes backend on the fake API server
(tests/kubernetes)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from sandbox import (
    IMAGE_BUSYBOX,
    ConfigError,
    ExecutionSandbox,
    FileOperationFailed,
    Process,
    Sandbox,
    SandboxAlreadyInitialized,
    SandboxConfig,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxNotRunning,
    SandboxStatus,
)
from sandbox.testing import FakeSandbox
from tests.kubernetes._cluster import Target, cluster

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


KINDS = ["docker", "process", "fake", "kubernetes"]


def make(kind: str, kube: Target | None = None) -> Sandbox | FakeSandbox:
    if kind == "kubernetes":
        assert kube is not None
        return Sandbox(backend=kube.backend(kube.config(environment={"BASE": "1"})))
    if kind == "fake":
        return FakeSandbox(SandboxConfig(image=IMAGE_BUSYBOX, environment={"BASE": "1"}))
    return Sandbox(SandboxConfig(type=kind, image=IMAGE_BUSYBOX, environment={"BASE": "1"}))


@contextlib.asynccontextmanager
async def target(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[Target | None]:
    """The Kubernetes case runs on the fake API server (or ``--kubeconfig``'s cluster)."""
    if kind != "kubernetes":
        yield None
        return
    async with cluster(request.getfixturevalue("tmp_path"), request.config) as kube:
        yield kube


@pytest_asyncio.fixture(params=KINDS)
async def sb(request: pytest.FixtureRequest) -> AsyncIterator[Sandbox | FakeSandbox]:
    async with target(request.param, request) as kube:
        box = make(request.param, kube)
        async with box:
            yield box


async def test_is_an_execution_sandbox(sb: Sandbox | FakeSandbox) -> None:
    assert isinstance(sb, ExecutionSandbox)
    assert (await sb.get_info()).status is SandboxStatus.RUNNING


async def test_files_round_trip_and_list(sb: Sandbox | FakeSandbox) -> None:
    await sb.write_file("a/b.txt", "hi", mode=0o600)
    assert await sb.read_file("/workspace/a/b.txt") == b"hi"
    infos = await sb.list_files("a")
    assert [(i.name, i.size, i.mode, i.is_dir) for i in infos] == [("b.txt", 2, 0o600, False)]
    assert (await sb.list_files("."))[0].is_dir


async def test_file_errors(sb: Sandbox | FakeSandbox) -> None:
    with pytest.raises(SandboxFileNotFound):
        await sb.read_file("missing")
    await sb.write_file("d/f", "x")
    with pytest.raises(SandboxIsADirectory):
        await sb.read_file("d")
    with pytest.raises(FileOperationFailed):
        await sb.set_working_directory("/nope")
    with pytest.raises(FileOperationFailed):
        await sb.copy_files("/a", "/b")


async def test_working_directory_and_environment(sb: Sandbox | FakeSandbox) -> None:
    await sb.write_file("sub/x", "")
    await sb.set_working_directory("sub")
    assert sb.get_working_directory() == "/workspace/sub"
    env = sb.get_environment()
    env["CHANGED"] = "1"
    assert "CHANGED" not in sb.get_environment()
    sb.set_environment({"NEW": "2"})
    assert sb.get_environment() == {"BASE": "1", "NEW": "2"}
    with pytest.raises(ConfigError):
        sb.set_environment({"A=B": "x"})
    sb.set_environment({"BASE": None, "ABSENT": None})
    assert sb.get_environment() == {"NEW": "2"}
    if not isinstance(sb, FakeSandbox):  # the fake runs nothing
        assert (await sb.execute_command("echo ${BASE-unset}")).stdout == "unset\n"


async def test_missing_working_directory_is_file_not_found(sb: Sandbox | FakeSandbox) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        await sb.set_working_directory("/no/such/dir")
    await sb.write_file("plain", "x")
    with pytest.raises(FileOperationFailed, match="not a directory") as info:
        await sb.set_working_directory("plain")
    assert not isinstance(info.value, FileNotFoundError)
    assert sb.get_working_directory() == "/workspace"


async def test_commands_and_empty_input(sb: Sandbox | FakeSandbox) -> None:
    result = await sb.execute_command("true")
    assert result.success and result.exit_code == 0 and result.start_time is not None
    with pytest.raises(ConfigError):
        await sb.execute_command("")


@pytest.mark.parametrize("kind", KINDS)
async def test_lifecycle_rules(kind: str, request: pytest.FixtureRequest) -> None:
    async with target(kind, request) as kube:
        await _lifecycle_rules(make(kind, kube))


async def _lifecycle_rules(box: Sandbox | FakeSandbox) -> None:
    await box.cleanup()  # before initialize: nothing to remove, a no-op
    assert box.status is SandboxStatus.CREATING
    await box.initialize()
    with pytest.raises(SandboxAlreadyInitialized, match="already initialized"):
        await box.initialize()
    assert box.status is SandboxStatus.RUNNING
    await box.cleanup()
    await box.cleanup()
    with pytest.raises(SandboxNotRunning):
        await box.execute_command("true")
    with pytest.raises(SandboxNotRunning):
        await box.read_file("x")


@pytest.mark.parametrize("kind", ["docker", "process", "kubernetes"])
async def test_process_handle_is_public_and_aclose_kills(
        kind: str, request: pytest.FixtureRequest) -> None:
    async with target(kind, request) as kube, make(kind, kube) as box:
        async with box.stream_command("echo up; sleep 60") as proc:
            assert isinstance(proc, Process)
            async for chunk in proc:
                assert chunk.data == b"up\n"
                break
            await proc.aclose()
            await proc.aclose()  # idempotent
            assert not proc.running
            result = await proc.wait()
        assert result.signal == "SIGKILL" and not result.success


async def test_the_docker_backend_is_the_public_door_to_docker() -> None:
    import aiodocker

    import sandbox.docker
    from sandbox.docker import DockerBackend

    assert sandbox.docker.__all__ == ["DockerBackend"]
    cfg = SandboxConfig(image=IMAGE_BUSYBOX)
    async with aiodocker.Docker() as client:
        backend = DockerBackend(cfg, docker=client)
        async with Sandbox(backend=backend) as box:
            assert box.backend is backend and box.config is cfg
            assert (await box.execute_command("echo hi")).stdout == "hi\n"
        assert not client.session.closed  # the caller's client stays the caller's
    with pytest.raises(ConfigError, match="option of the backend"):
        Sandbox(backend=DockerBackend(cfg), on_sample=print)
    with pytest.raises(ConfigError, match="differs"):
        Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, name="other"), backend=DockerBackend(cfg))
