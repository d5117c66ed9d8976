"""Peer SDKs a user might pick instead, on the same engine and image: llm-sandbox (Docker
backend) and the OpenAI Agents SDK's Docker sandbox client.

Each is used as its documentation shows, with a local image (never pulled) and no network;
their containers carry the bench label, so run.py sweeps whatever they leave. They live only
in the bench's virtualenv (``pip install llm-sandbox openai-agents``); a missing one is
skipped. llm-sandbox is synchronous (docker-py): its calls run in a worker thread.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from common import BENCH_LABEL


class LlmSandbox:
    name = "llm-sandbox 0.3 (docker)"

    @staticmethod
    def available() -> bool:
        try:
            import llm_sandbox  # noqa: F401
        except ImportError:
            return False
        return True

    async def create(self, image: str) -> Any:
        from llm_sandbox import SandboxSession

        def open_one() -> Any:
            # keep_template: never remove the (shared, local) image on close.
            session = SandboxSession(
                lang="python", image=image, keep_template=True, skip_environment_setup=True,
                runtime_configs={"network_mode": "none", "labels": {BENCH_LABEL: "llm-sandbox"}})
            session.open()
            return session
        return await anyio.to_thread.run_sync(open_one)

    async def exec_true(self, handle: Any) -> None:
        result = await anyio.to_thread.run_sync(handle.execute_command, "true")
        assert result.exit_code == 0, result

    async def remove(self, handle: Any) -> None:
        def close() -> None:
            try:
                handle.close()
            except Exception as exc:
                # Its stop() may already remove the container; its remove() then gets 409.
                if "already in progress" not in str(exc):
                    raise
        await anyio.to_thread.run_sync(close)


class OpenAIAgents:
    name = "openai-agents 0.24 (DockerSandboxClient)"

    @staticmethod
    def available() -> bool:
        try:
            import agents.sandbox.sandboxes.docker  # noqa: F401
        except ImportError:
            return False
        return True

    def __init__(self) -> None:
        self.client: Any = None

    async def create(self, image: str) -> Any:
        import docker
        from agents.sandbox.sandboxes.docker import (
            DockerSandboxClient,
            DockerSandboxClientOptions,
        )

        if self.client is None:
            self.client = DockerSandboxClient(docker.from_env())
        session = await self.client.create(options=DockerSandboxClientOptions(
            image=image, network_mode="none", labels={BENCH_LABEL: "openai-agents"}))
        await session.start()
        return session

    async def exec_true(self, handle: Any) -> None:
        result = await handle.exec("true")
        assert result.exit_code == 0, result

    async def remove(self, handle: Any) -> None:
        await self.client.delete(handle)


def peers() -> list[Any]:
    """The peers installed here."""
    found: list[Any] = []
    if LlmSandbox.available():
        found.append(LlmSandbox())
    if OpenAIAgents.available():
        found.append(OpenAIAgents())
    return found
