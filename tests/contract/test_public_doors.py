"""The public doors to a backend: `DockerBackend` given to `Sandbox(backend=...)`. (The rest of
the old tests/integration/test_contract.py is the behaviour suite now: CHECKS.)"""

from __future__ import annotations

import pytest

from sandbox import IMAGE_BUSYBOX, ConfigError, Sandbox, SandboxConfig

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


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
