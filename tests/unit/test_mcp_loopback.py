"""Pure logic of sandbox/_mcp_server.py and _mcp_http.py (the HTTP guard); the server itself
is tested end to end in tests/integration/test_mcp_server.py."""

from __future__ import annotations

import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from sandbox import ConfigError
from sandbox._mcp_http import (
    BearerAuth,
    http_guard,
    private_dir,
    tcp_listener,
    transport_security,
    unix_listener,
    write_token,
)
from sandbox._mcp_server import check_loopback


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_is_accepted(host: str) -> None:
    assert check_loopback(host) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "example.org", ""])
def test_other_addresses_are_refused(host: str) -> None:
    with pytest.raises(ConfigError, match="loopback only"):
        check_loopback(host)


# -- the HTTP guard (sandbox/_mcp_http.py) -------------------------------------------------------

async def _call(app: BearerAuth, scope_type: str = "http",
                headers: list[tuple[bytes, bytes]] | None = None) -> tuple[list[Any], bool]:
    """Run one ASGI call through ``app``: (messages sent, whether the inner app ran)."""
    ran: list[bool] = []
    sent: list[Any] = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        ran.append(True)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    app._app = inner
    await app({"type": scope_type, "headers": headers or []}, receive, send)
    return sent, bool(ran)


@pytest.mark.asyncio
@pytest.mark.parametrize(("headers", "allowed"), [
    ([], False),
    ([(b"authorization", b"Bearer s3cret")], True),
    ([(b"Authorization", b"bearer s3cret")], True),
    ([(b"authorization", b"Bearer s3cre")], False),
    ([(b"authorization", b"Bearer s3cret2")], False),
    ([(b"authorization", b"Basic s3cret")], False),
    ([(b"authorization", b"s3cret")], False),
    ([(b"x-token", b"s3cret")], False),
])
async def test_bearer_auth_lets_only_the_token_through(headers: list[tuple[bytes, bytes]],
                                                       allowed: bool) -> None:
    sent, ran = await _call(BearerAuth(None, "s3cret"), headers=headers)  # type: ignore[arg-type]
    assert ran is allowed
    if not allowed:
        assert sent[0]["status"] == 401 and b"Authorization: Bearer" in sent[1]["body"]


@pytest.mark.asyncio
async def test_bearer_auth_passes_lifespan_and_closes_websockets() -> None:
    _, ran = await _call(BearerAuth(None, "t"), "lifespan")  # type: ignore[arg-type]
    assert ran
    sent, ran = await _call(BearerAuth(None, "t"), "websocket")  # type: ignore[arg-type]
    assert not ran and sent == [{"type": "websocket.close", "code": 1008}]


def test_token_file_is_new_private_and_never_followed(tmp_path: Path) -> None:
    token, path = write_token(tmp_path / "t")
    assert path.read_text() == token + "\n" and len(token) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="must not exist yet"):
        write_token(path)
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError):
        write_token(tmp_path / "link")
    assert not (tmp_path / "elsewhere").exists()
    assert write_token(tmp_path / "u")[0] != token


def test_the_token_directory_must_be_private(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    made = private_dir()
    assert made == tmp_path / "sandbox" and stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o755)  # planted (or loosened) by someone: refused, not used
    with pytest.raises(ConfigError, match="not private"):
        private_dir()
    made.rmdir()
    (tmp_path / "sandbox").symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="not private"):
        private_dir()


def test_unix_socket_is_born_private_and_removed(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with unix_listener(str(path)):
        assert stat.S_ISSOCK(path.lstat().st_mode) and stat.S_IMODE(path.stat().st_mode) == 0o600
        with pytest.raises(ConfigError, match="already exists"), unix_listener(str(path)):
            pass
    assert not path.exists()


# -- the port is bound before anything is told; DNS-rebinding protection always ------------------

def test_a_taken_port_fails_before_a_token_is_written(tmp_path: Path) -> None:
    """Another local user listening on the port first would get the requests and the token:
    the guard binds first and fails clearly, with no token file made."""
    with socket.create_server(("127.0.0.1", 0)) as squatter:
        port = squatter.getsockname()[1]
        with pytest.raises(ConfigError, match=f"port {port} is already in use"), \
                http_guard(host="127.0.0.1", port=port, token_file=str(tmp_path / "t")):
            pass
    assert not (tmp_path / "t").exists()


def test_the_guard_holds_the_port_while_it_serves(tmp_path: Path) -> None:
    with tcp_listener("127.0.0.1", 0) as sock:
        port = sock.getsockname()[1]
        with pytest.raises(OSError), socket.create_server(("127.0.0.1", port)):
            pass


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_dns_rebinding_protection_for_every_loopback_host(host: str) -> None:
    from mcp.server.transport_security import TransportSecurityMiddleware

    where = f"[{host}]" if ":" in host else host
    check = TransportSecurityMiddleware(transport_security(host, 8000))
    assert check.settings.enable_dns_rebinding_protection
    assert check._validate_host(f"{where}:8000") and check._validate_host("localhost:8000")
    for evil in ("evil.test:8000", "evil.test", f"{where}.evil.test:8000", f"{where}:8001"):
        assert not check._validate_host(evil)
    assert check._validate_origin(f"http://{where}:8000")
    assert not check._validate_origin("http://evil.test:8000")
    assert not check._validate_origin("http://localhost:3000")  # another local site


def test_dns_rebinding_protection_on_a_unix_socket() -> None:
    from mcp.server.transport_security import TransportSecurityMiddleware

    check = TransportSecurityMiddleware(transport_security("127.0.0.1"))
    assert check._validate_host("localhost") and check._validate_host("localhost:80")
    assert not check._validate_host("evil.test")
