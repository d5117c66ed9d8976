"""The engine gateway: the one module that knows aiodocker, and the errors it maps."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import aiodocker
import aiohttp
import pytest

from sandbox._errors import EngineUnavailable, SandboxError, TimeoutExceeded
from sandbox.docker._gateway import (
    EngineConflict,
    EngineError,
    EngineNotFound,
    EngineTimeout,
    mapped_errors,
)

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox"
GATEWAY = PACKAGE / "docker" / "_gateway.py"
KUBE_GATEWAY = PACKAGE / "kubernetes" / "_gateway.py"
#: aiodocker's and aiohttp's private names the SDK needs; only the gateway may touch them.
PRIVATE = re.compile(r"\._query_json\b|\._query\b|\._resp\b|\._init\(|_connection_info|"
                     r"\._queue\b|\._do_query\b")


def _imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_gateways_import_aiodocker_aiohttp_or_kubernetes_asyncio() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert GATEWAY in modules and len(modules) > 20
    offenders = [
        f"{path.relative_to(PACKAGE.parent)} imports {sorted(found)}"
        for path in modules if path not in (GATEWAY, KUBE_GATEWAY)
        if (found := _imported(ast.parse(path.read_text()))
            & {"aiodocker", "aiohttp", "kubernetes_asyncio"})
    ]
    assert offenders == []
    assert {"aiodocker", "aiohttp"} <= _imported(ast.parse(GATEWAY.read_text()))
    # The Kubernetes backend's own gateway is the one module that knows kubernetes_asyncio.
    assert {"kubernetes_asyncio", "aiohttp"} <= _imported(ast.parse(KUBE_GATEWAY.read_text()))
    assert "aiodocker" not in _imported(ast.parse(KUBE_GATEWAY.read_text()))


def test_only_the_gateway_touches_private_client_names() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py")) if path != GATEWAY
        for n, line in enumerate(path.read_text().splitlines(), 1) if PRIVATE.search(line)
    ]
    assert offenders == []
    assert PRIVATE.search(GATEWAY.read_text())  # the pattern still finds what it looks for


def test_the_checks_see_a_violation() -> None:
    bad = "import aiodocker\nasync def f(d):\n    return await d._query_json('info')\n"
    assert _imported(ast.parse(bad)) == {"aiodocker"}
    assert PRIVATE.search(bad)


def _raised(exc: Exception) -> BaseException:
    with pytest.raises(BaseException) as info, mapped_errors("inspect the thing"):
        raise exc
    return info.value


@pytest.mark.parametrize(("status", "kind"), [
    (404, EngineNotFound), (409, EngineConflict), (400, EngineError), (500, EngineError),
])
def test_error_answers_become_typed_errors_carrying_the_status(
        status: int, kind: type[EngineError]) -> None:
    err = _raised(aiodocker.DockerError(status, "no such container: x"))
    assert type(err) is kind and isinstance(err, SandboxError)
    assert isinstance(err, EngineError) and err.status == status
    assert str(err) == f"inspect the thing: the engine answered {status}: no such container: x"
    assert err.retryable is (status >= 500)
    assert isinstance(err.cause, aiodocker.DockerError) and err.__cause__ is err.cause


def test_no_engine_and_lost_connections_are_engine_unavailable() -> None:
    err = _raised(aiodocker.DockerError(900, "Cannot connect"))
    assert type(err) is EngineUnavailable and "no Docker engine answers" in str(err)
    for exc in (aiohttp.ServerDisconnectedError(), ConnectionResetError("reset")):
        err = _raised(exc)
        assert type(err) is EngineUnavailable and "lost the connection" in str(err)
        assert err.retryable


def test_a_closed_client_and_other_errors() -> None:
    err = _raised(RuntimeError("Session is closed"))
    assert type(err) is SandboxError and "client was closed" in str(err)
    plain = RuntimeError("something else")
    assert _raised(plain) is plain
    value = ValueError("not ours")
    assert _raised(value) is value


def test_a_missed_deadline_is_both_engine_unavailable_and_a_timeout() -> None:
    err = EngineTimeout("read engine info: the engine did not answer within 1 s")
    assert isinstance(err, EngineUnavailable) and isinstance(err, TimeoutExceeded)
    assert isinstance(err, TimeoutError) and isinstance(err, ConnectionError)
    assert err.retryable and err.code == "ENGINE_TIMEOUT"


class _Client:
    """Stands in for a client: records whether it was closed."""

    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.mark.asyncio
async def test_engine_over_closes_only_the_client_it_opened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import anyio

    from sandbox.docker import _gateway

    theirs, opened = _Client(), []

    def new_client() -> _Client:
        opened.append(_Client())
        return opened[-1]

    monkeypatch.setattr(_gateway, "new_client", new_client)
    async with _gateway.engine_over(theirs) as engine:  # type: ignore[arg-type]
        assert engine.docker is theirs
    assert not theirs.closed and not opened
    async with _gateway.engine_over() as engine:
        assert engine.docker is opened[0]
    assert opened[0].closed
    # Cancelled inside: its own client is still closed (the close is shielded).
    with anyio.move_on_after(0.01):
        async with _gateway.engine_over():
            await anyio.sleep(10)
    assert opened[1].closed
    with pytest.raises(ValueError, match="boom"):
        async with _gateway.engine_over():
            raise ValueError("boom")
    assert opened[2].closed


def test_one_place_opens_a_client_for_a_caller_without_one() -> None:
    """"The caller's client or one opened and closed here" is `engine_over`, not retyped."""
    pattern = re.compile(r"docker\s+if\s+docker\s+is\s+not\s+None\s+else\s+new_client\(")
    found = [path.relative_to(PACKAGE).as_posix() for path in (PACKAGE / "docker").glob("*.py")
             if pattern.search(path.read_text())]
    assert found == ["docker/_gateway.py"], found
