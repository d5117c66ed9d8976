"""LangChain's standard sandbox tests (``SandboxIntegrationTests``) on `DeepAgentsSandbox`.

One sandbox for the whole class, as the suite intends, on the real engine. A test fails here
only where the sandbox's documented policy is the reason: such a test is overridden with a
strict xfail naming the reason (LangChain's own convention) and listed in docs/guides/agents.md.
"""

from __future__ import annotations

import inspect
import subprocess
import sys
from collections.abc import Iterator

import pytest
from langchain_tests.integration_tests import SandboxIntegrationTests

from sandbox import SandboxConfig
from sandbox.integrations.langchain import DeepAgentsSandbox
from tests.conftest import sandbox_containers

pytestmark = [
    pytest.mark.usefixtures("engine"),
    # langchain-tests' own class-scoped sandbox_backend fixture is an instance method, which
    # pytest 9 deprecates; the warning is about their code, not ours.
    pytest.mark.filterwarnings("ignore:Class-scoped fixtures defined as instance methods"),
]


class TestDeepAgentsSandbox(SandboxIntegrationTests):
    @pytest.fixture(scope="class")
    @classmethod
    def sandbox(cls) -> Iterator[DeepAgentsSandbox]:
        with DeepAgentsSandbox() as backend:
            yield backend


# The suite's async tests are plain coroutines; this suite runs pytest-asyncio in strict mode.
for _name, _test in vars(SandboxIntegrationTests).items():
    if _name.startswith("test_") and inspect.iscoroutinefunction(_test):
        pytest.mark.asyncio(_test)


def test_defaults_and_close_leave_nothing_behind() -> None:
    backend = DeepAgentsSandbox(SandboxConfig())
    try:
        assert sandbox_containers(backend.id)
        result = backend.execute("python -c 'print(6 * 7)'; id -u")
        assert (result.exit_code, result.output) == (0, "42\n1000\n")
    finally:
        backend.close()
    backend.close()
    assert sandbox_containers(backend.id) == []


def test_a_timeout_is_exit_124() -> None:
    with DeepAgentsSandbox() as backend:
        result = backend.execute("sleep 30", timeout=1)
    assert result.exit_code == 124
    assert "timed out after 1 seconds" in result.output


def test_a_backend_never_closed_neither_hangs_exit_nor_leaks() -> None:
    # Before: the portal's loop thread was joined at interpreter exit, forever.
    script = ("from sandbox.integrations.langchain import DeepAgentsSandbox\n"
              "backend = DeepAgentsSandbox()\n"
              "print(backend.id, flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sandbox_containers(proc.stdout.strip()) == []
