"""The egress proxy: HTTP CONNECT and plain HTTP proxying under an `EgressPolicy`.

It runs in its own container next to the sandbox (see `sandbox.docker._egress`), started as
``python3 -c BOOT <policy source> <this source> <settings JSON>``: stdlib only. Every request
from the sandbox is hostile input: the head is bounded (16 KiB, 30 s), a name is resolved
once, every address it resolved to is checked, and the proxy connects to a checked address
(never to the name again). Each decision is one JSON line on stdout, which the SDK follows
for its counters and audit events. A refusal answers ``403`` whose reason phrase names the
rule, so ``curl``, ``pip`` and ``git`` show it to whoever reads their error.

Only clients from the sandbox's own network (``client_subnet``) are served; others are cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO, cast
from urllib.parse import urlsplit

from ._egress import Decision, EgressPolicy

__all__ = ["BOOT", "PORT", "EgressProxy", "main"]

PORT = 3128
HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT = 30.0
RESOLVE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 15.0
_CHUNK = 64 * 1024

#: Run by ``python3 -c``: makes a package of the two sources, then calls main(settings).
BOOT = """\
import sys, types
pkg = types.ModuleType("egress"); pkg.__path__ = []; sys.modules["egress"] = pkg
for name, src in (("egress._egress", sys.argv[1]), ("egress._egress_proxy", sys.argv[2])):
    mod = types.ModuleType(name); mod.__package__ = "egress"; sys.modules[name] = mod
    exec(compile(src, name, "exec"), mod.__dict__)
sys.modules["egress._egress_proxy"].main(sys.argv[3])
"""


def _emit(event: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _split_host_port(text: str, default: int) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or a bare host; raises ValueError."""
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    number = int(port) if port else default
    if not host or not 0 < number < 65536 or (port and not port.isdigit()):
        raise ValueError(text)
    return host, number


class EgressProxy:
    """Serves one sandbox's network under one policy."""

    def __init__(self, policy: EgressPolicy, *, client_subnet: str = "",
                 emit: Callable[[Mapping[str, Any]], None] = _emit) -> None:
        self.policy = policy
        self._subnet = ipaddress.ip_network(client_subnet) if client_subnet else None
        self._emit = emit

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one client connection: one request, then a tunnel or a forwarded exchange."""
        try:
            if self.client_allowed(writer.get_extra_info("peername")):
                await self._serve(reader, writer)
        except (TimeoutError, OSError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    def client_allowed(self, peer: Any) -> bool:
        """Whether ``peer`` (a socket address) is on the sandbox's network."""
        if self._subnet is None:
            return True
        try:
            return ipaddress.ip_address(peer[0]) in self._subnet
        except (TypeError, ValueError, IndexError):
            return False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            await self._answer(writer, 400, "Bad Request", "not an HTTP/1 proxy request")
            return
        method, target, version = parts
        tunnel = method.upper() == "CONNECT"
        try:
            if tunnel:
                host, port = _split_host_port(target, 443)
                path = ""
            else:
                url = urlsplit(target)
                if url.scheme != "http" or not url.netloc:
                    raise ValueError(target)
                host, port = _split_host_port(url.netloc.rpartition("@")[2], 80)
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        except ValueError:
            await self._answer(writer, 400, "Bad Request",
                               "give an absolute http:// URL, or CONNECT host:port")
            return
        host = host.strip("[]")
        event: dict[str, Any] = {"method": method[:16], "host": host[:255], "port": port}
        decision = self.policy.check_name(host, port)
        addresses: list[str] = []
        if decision.allowed:
            addresses, decision = await self._resolve(host, port)
        if not decision.allowed:
            self._emit({"decision": "refused", **event, "rule": decision.rule,
                        "reason": decision.reason})
            await self._refuse(writer, decision)
            return
        upstream = await self._connect(addresses, port)
        if upstream is None:
            self._emit({"decision": "failed", **event, "rule": "connect",
                        "reason": f"could not connect to {', '.join(addresses)} port {port}"})
            await self._answer(writer, 502, "Bad Gateway",
                               f"could not connect to {host} port {port}")
            return
        up_reader, up_writer, address = upstream
        self._emit({"decision": "allowed", **event, "address": address})
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            else:
                up_writer.write(_forward_head(method, path, version, lines[1:], host, port))
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    async def _resolve(self, host: str, port: int) -> tuple[list[str], Decision]:
        loop = asyncio.get_running_loop()
        try:
            infos = await asyncio.wait_for(
                loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT)
        except (TimeoutError, OSError, UnicodeError) as exc:
            return [], Decision(False, "dns", f"{host} did not resolve ({exc})")
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        return addresses, self.policy.check_addresses(host, addresses)

    async def _connect(self, addresses: list[str], port: int) -> \
            tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | None:
        # Only checked addresses: the name is not resolved again (no DNS rebinding).
        for address in addresses:
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(address, port), CONNECT_TIMEOUT)
                return up_reader, up_writer, address
        return None

    async def _refuse(self, writer: asyncio.StreamWriter, decision: Decision) -> None:
        await self._answer(writer, 403, f"Forbidden by sandbox egress policy ({decision.rule})"
                           f": {decision.reason}",
                           f"sandbox egress proxy: refused by rule {decision.rule}: "
                           f"{decision.reason}", rule=decision.rule)

    @staticmethod
    async def _answer(writer: asyncio.StreamWriter, status: int, phrase: str, body: str, *,
                      rule: str = "") -> None:
        data = (body + "\n").encode()
        phrase = phrase.replace("\r", " ").replace("\n", " ")
        extra = f"X-Sandbox-Egress-Rule: {rule}\r\n" if rule else ""
        writer.write(
            f"HTTP/1.1 {status} {phrase}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()


def _forward_head(method: str, path: str, version: str, headers: list[str], host: str,
                  port: int) -> bytes:
    """The request in origin form, without proxy headers, closing after one exchange; its
    ``Host`` is the checked one (a client's own could name another site on that server)."""
    kept = [line for line in headers if line and not line.lower().startswith(
        ("proxy-", "connection:", "keep-alive:", "host:"))]
    shown = f"[{host}]" if ":" in host else host
    kept.insert(0, f"Host: {shown}" + ("" if port == 80 else f":{port}"))
    lines = [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


def refuse_query(query: bytes) -> bytes | None:
    """A DNS answer REFUSED to `query` (its id and question kept), or None if it is not one.

    The sandbox's resolver is pointed here so outside names fail at once (no answer at all
    would make every lookup wait out its timeouts); nothing is ever resolved for it.
    """
    if len(query) < 12 or query[2] & 0x80 or query[4:6] != b"\0\x01":
        return None
    end = 12
    while end < len(query) and query[end] and end < 12 + 255:
        end += 1 + query[end]
    end += 5  # the root label, QTYPE and QCLASS
    if end > len(query):
        return None
    flags = bytes([0x80 | (query[2] & 0x79), 0x80 | 5])  # QR, opcode and RD kept; RA; REFUSED
    return query[:2] + flags + b"\0\x01" + b"\0" * 6 + query[12:end]


class _Refuser(asyncio.DatagramProtocol):
    def __init__(self, allowed: Callable[[Any], bool]) -> None:
        self._allowed = allowed
        self._transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        answer = refuse_query(data)
        if answer is not None and self._transport is not None and self._allowed(addr):
            self._transport.sendto(answer, addr)


async def serve(settings: Mapping[str, Any]) -> None:
    """Serve forever on `PORT` (and refuse DNS on ``dns_port`` if given)."""
    proxy = EgressProxy(EgressPolicy.from_json(settings["policy"]),
                        client_subnet=str(settings.get("client_subnet") or ""))
    server = await asyncio.start_server(proxy.handle, host="0.0.0.0", port=PORT,
                                        limit=HEAD_LIMIT)
    if settings.get("dns_port"):
        await asyncio.get_running_loop().create_datagram_endpoint(
            lambda: _Refuser(proxy.client_allowed), local_addr=("0.0.0.0",
                                                                int(settings["dns_port"])))
    _emit({"ready": True, "port": PORT})
    async with server:
        await server.serve_forever()


class _LogLines:
    """stderr as JSON lines too, so the SDK's reader of the log never sees a torn line."""

    def write(self, text: str) -> int:
        if text.strip():
            _emit({"log": text.rstrip()[:2000]})
        return len(text)

    def flush(self) -> None:
        return None


def main(settings_json: str) -> None:
    """Entry point in the proxy container."""
    sys.stderr = cast(TextIO, _LogLines())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(json.loads(settings_json)))
