"""``python -m sandbox mcp --http``: streamable HTTP that only the user who started it can drive.

The tools run code in the sandbox and move files into and out of any ``--mount``, so loopback
alone is not enough: every local user can reach it. By default every request must carry
``Authorization: Bearer <token>``, a random token written to a file only its owner can read
(mode 0600 in a 0700 directory: ``$XDG_RUNTIME_DIR/sandbox`` or ``~/.local/state/sandbox``),
printed once on stderr, and compared in constant time; any other request gets 401 and reaches
no tool. With ``--unix-socket PATH`` the server listens on a socket of mode 0600 instead (its
permissions are the credential). ``--no-auth`` serves whoever reaches the port, with a warning.

The port is bound before anything is printed or a token written: if another (local) user
already listens there, the server fails with a clear error instead of announcing a URL and a
token that the squatter would receive. DNS-rebinding protection (allowed ``Host`` and
``Origin``) is always on, built from the address actually bound.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import ipaddress
import os
import secrets
import socket
import stat
import sys
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.transport_security import TransportSecuritySettings

__all__ = ["BearerAuth", "http_guard", "private_dir", "tcp_listener", "transport_security",
           "unix_listener", "write_token"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_DENIED = (b'{"error": "unauthorized: send the header Authorization: Bearer <token>, the token '
           b'that sandbox mcp --http printed and wrote to its token file"}')


class BearerAuth:
    """ASGI middleware: a request reaches ``app`` only with ``Authorization: Bearer <token>``
    (compared in constant time); others get 401. Lifespan events pass through."""

    def __init__(self, app: App, token: str) -> None:
        self._app = app
        self._token = token.encode()

    def allowed(self, scope: Scope) -> bool:
        ok = False
        for name, value in scope.get("headers") or ():
            if name.lower() == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                # Every header is compared (no early exit that would time the match).
                ok |= scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(),
                                                                          self._token)
        return ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allowed(scope):
            await self._app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
        else:
            await send({"type": "http.response.start", "status": 401, "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="sandbox mcp"'),
                (b"content-length", str(len(_DENIED)).encode())]})
            await send({"type": "http.response.body", "body": _DENIED})


def private_dir() -> Path:
    """The directory for token files: ``$XDG_RUNTIME_DIR/sandbox`` (else
    ``~/.local/state/sandbox``), made 0700 and refused unless it is ours and private."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = Path(runtime) if runtime.startswith("/") else Path.home() / ".local" / "state"
    directory = base / "sandbox"
    try:
        base.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        st = os.lstat(directory)
    except OSError as exc:
        raise ConfigError(f"cannot make the token directory {str(directory)!r}: {exc.strerror}",
                          details="give a file with --token-file") from exc
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ConfigError(f"the token directory {str(directory)!r} is not private",
                          details="it must be a directory (not a link) owned by you with "
                                  "mode 0700; fix or remove it, or give --token-file")
    return directory


def write_token(path: Path | None = None) -> tuple[str, Path]:
    """A fresh random token, written to ``path`` (default: in `private_dir`) created new with
    mode 0600 (never following a link, never over an existing file); (token, path)."""
    token = secrets.token_urlsafe(32)
    if path is None:
        path = private_dir() / f"mcp-{os.getpid()}.token"
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # a dead server's, whose pid this process now has
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        raise ConfigError(f"cannot create the token file {str(path)!r}: {exc.strerror}",
                          details="it must not exist yet; its directory must exist") from exc
    try:
        os.fchmod(fd, 0o600)  # whatever the umask
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)
    return token, path


@contextlib.contextmanager
def unix_listener(path: str) -> Iterator[socket.socket]:
    """A listening unix socket at ``path`` that only this user can connect to (mode 0600, set
    before it listens); removed on leaving."""
    if os.path.lexists(path):
        raise ConfigError(f"--unix-socket {path!r} already exists",
                          details="remove it (a server killed outright leaves its socket), "
                                  "or choose another path")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket file is born 0600: no window with wider modes
    try:
        sock.bind(path)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"--unix-socket {path!r}: {exc.strerror}") from exc
    finally:
        os.umask(old)
    try:
        os.chmod(path, 0o600)
        sock.listen(128)
        sock.setblocking(False)
        yield sock
    finally:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def tcp_listener(host: str, port: int) -> Iterator[socket.socket]:
    """A socket listening on ``host:port`` (bound now, before any URL or token is told);
    ConfigError if the port is taken: someone else would get the requests and the token."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"--host {host!r}: cannot resolve it: {exc}") from exc
    try:
        sock = socket.create_server(address[:2], family=family)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"--port {port}: {host} port {port} is already in use",
                              details="another process (maybe another user's) listens there "
                                      "and would receive the requests and the token; choose "
                                      "another --port") from exc
        raise ConfigError(f"--host {host!r} --port {port}: cannot listen: "
                          f"{exc.strerror}") from exc
    try:
        sock.setblocking(False)
        yield sock
    finally:
        sock.close()


def transport_security(host: str, port: int | None = None,
                       bound: str = "") -> TransportSecuritySettings:
    """DNS-rebinding protection for the server at ``host:port``, bound to the address
    ``bound`` (port None: a unix socket, whose clients say ``Host: localhost``): only these
    ``Host`` and ``Origin`` values are served."""
    from mcp.server.transport_security import TransportSecuritySettings

    names = {"localhost", host} | ({bound} if bound else set())
    with contextlib.suppress(ValueError):
        names.add(str(ipaddress.ip_address(host)))
    if port is None:
        names.add("127.0.0.1")
    hosts: list[str] = []
    for name in sorted(names):
        where = f"[{name}]" if ":" in name else name
        hosts += [where, f"{where}:*" if port is None else f"{where}:{port}"]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts])


def _say(text: str) -> None:
    print(f"sandbox mcp: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def http_guard(*, host: str, port: int, auth: bool = True, token_file: str | None = None,
               unix_socket: str | None = None) -> Iterator[Callable[[MCPServer[Any]],
                                                                    Awaitable[None]]]:
    """Bind the port (or unix socket) and write the token file first, so a taken port or a bad
    path fails before any sandbox is made and before anything is announced; yields the
    coroutine function that serves an MCP server on streamable HTTP at /mcp until the process
    is told to stop. The file and socket go on leaving."""
    with contextlib.ExitStack() as stack:
        token = ""
        sock = stack.enter_context(unix_listener(unix_socket) if unix_socket
                                   else tcp_listener(host, port))
        if not unix_socket and auth:
            token, path = write_token(Path(token_file) if token_file else None)
            stack.callback(lambda: path.unlink(missing_ok=True))

        async def serve(server: MCPServer[Any]) -> None:
            import uvicorn

            security = (transport_security(host) if unix_socket else
                        transport_security(host, port, str(sock.getsockname()[0])))
            app: App = server.streamable_http_app(host=host, transport_security=security)
            where = f"[{host}]" if ":" in host else host
            if unix_socket:
                _say(f"serving http://localhost/mcp on the unix socket {unix_socket} (mode "
                     "0600: only this user can connect)")
            elif token:
                app = BearerAuth(app, token)
                _say(f"serving http://{where}:{port}/mcp; every request must send the header "
                     "'Authorization: Bearer <token>'")
                _say(f"token file: {path} (mode 0600)")
                _say(f"token: {token}")
            else:
                _say(f"serving http://{where}:{port}/mcp")
                _say("WARNING: --no-auth: ANY LOCAL USER can run commands in this sandbox "
                     "and read or change what it mounts. Do not use it on a shared machine.")
            config = uvicorn.Config(app, host=host, port=port,
                                    log_level=server.settings.log_level.lower())
            await uvicorn.Server(config).serve(sockets=[sock])

        yield serve
