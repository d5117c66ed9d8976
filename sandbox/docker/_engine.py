"""The only door to the Docker Engine API: one client, timeouts on every call, errors mapped.

Everything aiodocker/aiohttp-specific lives here and in ``_exec``; the rest of the backend
speaks in plain dicts and the SDK's own exceptions.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, NoReturn

import aiodocker
import aiohttp
import anyio

from .._constants import DEFAULT_ENGINE_TIMEOUT
from .._errors import EngineTimeout, EngineUnavailable, SandboxError

DEFAULT_SOCKET = "/var/run/docker.sock"
START_HINT = (
    "start one with `make engine` (scripts/engine.sh), or point DOCKER_HOST at a running engine"
)


def engine_address() -> str:
    """Where the engine is looked for: DOCKER_HOST, else the default socket."""
    return os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"


def new_client(address: str | None = None) -> aiodocker.Docker:
    """Build a client with no connection-pool cap and no daemon-side gzip of archives.

    aiohttp's default pool of 100 would block every call once 100 exec streams are open (each
    holds a connection), including the call that kills a timed-out command. aiohttp asks for
    gzip by default, which makes the engine compress archives: 5x slower for 100 MiB.
    """
    address = address or engine_address()
    if address.startswith("unix://"):
        connector = aiohttp.UnixConnector(address.removeprefix("unix://"), limit=0)
        session = aiohttp.ClientSession(
            connector=connector, headers={"Accept-Encoding": "identity"}
        )
        client = _OwningDocker(
            url="unix://localhost",
            session=session,
            timeout=aiohttp.ClientTimeout(sock_connect=10),
        )
        client.address = address
        return client
    return aiodocker.Docker(url=address)


def client_like(docker: aiodocker.Docker) -> aiodocker.Docker:
    """Open a new client to the engine ``docker`` talks to, e.g. to clean up after it closed."""
    if isinstance(docker, _OwningDocker) and docker.address:
        return new_client(docker.address)
    connector = docker.connector
    if isinstance(connector, aiohttp.UnixConnector) and connector.path != "localhost":
        return new_client(f"unix://{connector.path}")
    url = str(getattr(docker, "_connection_info", "") or "")
    return new_client(url if url and "//localhost" not in url else None)


class _OwningDocker(aiodocker.Docker):
    """A client that closes the session it was built with."""

    #: Where it connects (its base URL is a placeholder for unix sockets).
    address: str = ""

    async def close(self) -> None:
        session = self.session
        await super().close()
        await session.close()


@contextlib.contextmanager
def mapped_errors(action: str) -> Iterator[None]:
    """Turn engine and transport failures into SDK errors; never swallow cancellation."""
    try:
        yield
    except SandboxError:
        raise  # already ours (EngineUnavailable is a ConnectionError: do not wrap it again)
    except aiodocker.DockerError as exc:
        raise_engine_error(exc, action)
    except RuntimeError as exc:
        if "closed" not in str(exc).lower():
            raise
        # aiohttp: "Session is closed" (someone closed the client) or a closed transport.
        raise SandboxError(
            f"{action}: the aiodocker client was closed",
            details=f"{exc}; a client passed as docker= must stay open until cleanup",
            cause=exc,
        ) from exc
    except (aiohttp.ClientConnectionError, ConnectionError) as exc:
        raise EngineUnavailable(
            f"{action}: lost the connection to the engine at {engine_address()}",
            details=str(exc),
            cause=exc,
        ) from exc
    except aiohttp.ClientError as exc:
        raise SandboxError(f"{action}: engine request failed", details=str(exc), cause=exc,
                           retryable=True) from exc


def raise_engine_error(exc: aiodocker.DockerError, action: str) -> NoReturn:
    """Raise the SDK error for an engine error response."""
    if exc.status == 900:
        raise EngineUnavailable(
            f"{action}: no Docker engine answers at {engine_address()}; {START_HINT}",
            details=str(exc.message),
            cause=exc,
        ) from exc
    retryable = exc.status >= 500
    raise SandboxError(
        f"{action}: the engine answered {exc.status}", details=str(exc.message),
        retryable=retryable, cause=exc,
    ) from exc


class Engine:
    """Thin async wrapper over one aiodocker client with a deadline on every call."""

    def __init__(self, docker: aiodocker.Docker, *, timeout: float = DEFAULT_ENGINE_TIMEOUT):
        self.docker = docker
        self.timeout = timeout

    @contextlib.asynccontextmanager
    async def _call(self, action: str, deadline: float | None = None) -> AsyncIterator[None]:
        limit = self.timeout if deadline is None else deadline
        with mapped_errors(action):
            try:
                with anyio.fail_after(limit):
                    yield
            except TimeoutError as exc:
                raise EngineTimeout(
                    f"{action}: the engine at {engine_address()} did not answer within {limit:g} s",
                    cause=exc,
                ) from exc

    async def query_json(
        self, action: str, path: str, method: str = "GET", *,
        params: Mapping[str, Any] | None = None, data: Any = None, deadline: float | None = None,
    ) -> Any:
        async with self._call(action, deadline):
            body = json.dumps(data) if data is not None and not isinstance(data, bytes) else data
            return await self.docker._query_json(
                path, method, params=dict(params) if params else None, data=body
            )

    async def request(
        self, action: str, path: str, method: str = "GET", *,
        params: Mapping[str, Any] | None = None, data: Any = None,
        headers: Mapping[str, str] | None = None, deadline: float | None = None,
        max_bytes: int | None = None,
    ) -> bytes:
        """Make a call and return the raw body (for endpoints that do not answer JSON); with
        `max_bytes`, only up to that many of its first bytes, the rest unread."""
        async with self._call(action, deadline), self.docker._query(
            path, method, params=dict(params) if params else None, data=data,
            headers=dict(headers) if headers else None,
        ) as resp:
            if max_bytes is None:
                return await resp.read()
            chunks: list[bytes] = []
            size = 0
            while size < max_bytes and (chunk := await resp.content.read(max_bytes - size)):
                chunks.append(chunk)
                size += len(chunk)
            return b"".join(chunks)

    async def ping(self) -> None:
        await self.request("ping the engine", "_ping", deadline=min(self.timeout, 10.0))

    async def info(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.query_json("read engine info", "info")
        return result

    async def version(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.query_json("read engine version", "version")
        return result
