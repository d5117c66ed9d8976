"""The egress proxy: HTTP CONNECT and plain HTTP proxying under an `EgressPolicy`.

It runs in its own container next to the sandbox (see `sandbox.docker._egress`), started as
``python3 -c BOOT <policy source> <this source> <settings JSON>``: stdlib only. Every request
from the sandbox is hostile input: the head is bounded (16 KiB, 30 s) and parsed strictly, a
name is resolved once, every address it resolved to is checked, and the proxy connects to a
checked address (never to the name again). Each decision is one JSON line on stdout, which
the SDK follows for its counters and audit events; refusals past a burst are counted and
written as one line per rule a second. A refusal answers ``403`` whose reason phrase names
the rule, so ``curl``, ``pip`` and ``git`` show it to whoever reads their error.

The name checked is the name used (no other virtual host on the same address):

- plain HTTP: one request per connection (the origin is told ``Connection: close``, and
  anything the client sends after that request's body ends the connection unforwarded); its
  ``Host`` header, if any, must name the request's target;
- a ``CONNECT`` tunnel to port 80 carries one HTTP request, whose ``Host`` must be the
  tunnel's name, forwarded the same way;
- a tunnel to port 443 must start with a TLS ClientHello whose server name (SNI) is the
  tunnel's name (none for an address), plain ASCII as sent; no SNI, several, or an encrypted
  ClientHello (ECH, which Chromium 118+ sends by default; start it with
  --disable-features=EncryptedClientHello) is refused with a TLS ``access_denied`` alert.
  TLS is not terminated: the ClientHello is read (records reassembled, 64 KiB and 10 s at
  most) and then forwarded as it came. What the client sends next waits for the server's
  first answer: after a HelloRetryRequest (TLS 1.3) the second ClientHello is judged the
  same way. What travels inside TLS (an HTTP ``Host`` naming another
  tenant of the same server) cannot be seen without terminating it;
- on any other allowed port a ClientHello is judged the same way, and anything else passes
  (the server may speak first, as SSH does).

Only clients from the sandbox's own network (``client_subnet``) are served; others are cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import json
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO, cast
from urllib.parse import urlsplit

from ._egress import Decision, EgressPolicy
from ._egress_wire import (
    CTL,
    HELLO_LIMIT,
    TOKEN,
    HelloReader,
    Request,
    check_host_header,
    check_server_name,
    hello_server_name,
    parse_head,
    same_host,
    split_host_port,
)

__all__ = ["BOOT", "PORT", "EgressProxy", "main"]

PORT = 3128
HEAD_LIMIT = 16 * 1024
HEAD_TIMEOUT = 30.0
RESOLVE_TIMEOUT = 10.0
CONNECT_TIMEOUT = 15.0
#: A ClientHello is read within this long (at most `HELLO_LIMIT` bytes).
HELLO_TIMEOUT = 10.0
#: Refusals (and failures) get one log line each for a burst of this many, refilled at this
#: rate a second; past that they are counted and written as one line per rule a second.
LOG_BURST = 50
LOG_RATE = 5.0
_CHUNK = 64 * 1024
#: A fatal TLS ``access_denied`` alert: what a client of a refused tunnel to 443 reads.
TLS_ACCESS_DENIED = b"\x15\x03\x03\x00\x02\x02\x31"
#: The ServerHello random that makes it a HelloRetryRequest (RFC 8446, 4.1.3).
HELLO_RETRY_RANDOM = bytes.fromhex(
    "cf21ad74e59a6111be1d8c021e65b891c2a211167abb8c5e079e09e2c8a8339c")
#: TLS 1.3's compatibility ChangeCipherSpec record, which may come before a second hello.
_CCS = b"\x14\x03\x03\x00\x01\x01"
_CTL_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_HOP_BY_HOP = ("connection", "keep-alive", "host", "upgrade", "te", "trailer")

#: Run by ``python3 -c``: makes a package of the three sources, then calls main(settings).
BOOT = """\
import sys, types
pkg = types.ModuleType("egress"); pkg.__path__ = []; sys.modules["egress"] = pkg
names = ("egress._egress", "egress._egress_wire", "egress._egress_proxy")
for name, src in zip(names, sys.argv[1:4]):
    mod = types.ModuleType(name); mod.__package__ = "egress"; sys.modules[name] = mod
    exec(compile(src, name, "exec"), mod.__dict__)
sys.modules["egress._egress_proxy"].main(sys.argv[4])
"""


_lines = itertools.count(1)


def _emit(event: Mapping[str, Any]) -> None:
    """One JSON line on stdout, numbered (``seq``): the engine's follow of a rotating log
    repeats a line at each rotation (measured on 20.10), and the SDK drops repeats by it."""
    sys.stdout.write(json.dumps({**event, "seq": next(_lines)}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


class _Throttle:
    """Log lines for refusals and failures: one each for `LOG_BURST`, refilled at `LOG_RATE`
    a second; past that, counted per rule and written by `flush` as one line with a count."""

    def __init__(self, emit: Callable[[Mapping[str, Any]], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._emit, self._clock = emit, clock
        self._tokens, self._last = float(LOG_BURST), clock()
        self._held: dict[tuple[str, str], dict[str, Any]] = {}

    def __call__(self, event: Mapping[str, Any]) -> None:
        now = self._clock()
        self._tokens = min(float(LOG_BURST), self._tokens + (now - self._last) * LOG_RATE)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            self._emit(event)
            return
        key = (str(event.get("decision")), str(event.get("rule")))
        held = self._held.setdefault(key, {"decision": key[0], "rule": key[1], "count": 0})
        held.update({k: v for k, v in event.items() if k not in ("decision", "rule")})
        held["count"] += 1

    def flush(self) -> None:
        """Write what was held back: one line per (decision, rule), with its ``count``."""
        held, self._held = self._held, {}
        for event in held.values():
            self._emit(event)


class EgressProxy:
    """Serves one sandbox's network under one policy."""

    def __init__(self, policy: EgressPolicy, *, client_subnet: str = "",
                 emit: Callable[[Mapping[str, Any]], None] = _emit,
                 clock: Callable[[], float] = time.monotonic, http_port: int = 80,
                 tls_port: int = 443) -> None:
        self.policy = policy
        #: The ports whose tunnels must carry HTTP and TLS (others only in tests).
        self.http_port, self.tls_port = http_port, tls_port
        self._subnet = ipaddress.ip_network(client_subnet) if client_subnet else None
        self._emit = emit
        self._throttled = _Throttle(emit, clock)

    def flush(self) -> None:
        """Write the refusals held back by the log's rate limit."""
        self._throttled.flush()

    def _decided(self, event: Mapping[str, Any]) -> None:
        (self._emit if event.get("decision") == "allowed" else self._throttled)(event)

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
        try:
            request = parse_head(head)
            framing = request.framing()
        except ValueError as exc:
            await self._answer(writer, 400, "Bad Request", f"not an HTTP/1 proxy request: {exc}")
            return
        tunnel = request.method.upper() == "CONNECT"
        try:
            if tunnel:
                host, port = split_host_port(request.target, 443)
                path = ""
            else:
                url = urlsplit(request.target)
                if url.scheme != "http" or not url.netloc:
                    raise ValueError(request.target)
                host, port = split_host_port(url.netloc.rpartition("@")[2], 80)
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        except ValueError:
            await self._answer(writer, 400, "Bad Request",
                               "give an absolute http:// URL, or CONNECT host:port")
            return
        host = host.strip("[]")
        event: dict[str, Any] = {"method": request.method[:16], "host": host[:255], "port": port}
        decision = self.policy.check_name(host, port)
        if decision.allowed and not tunnel:
            decision = check_host_header(request, host, port)
        addresses: list[str] = []
        if decision.allowed:
            addresses, decision = await self._resolve(host, port)
        if not decision.allowed:
            self._refused(event, decision)
            await self._refuse(writer, decision)
            return
        upstream = await self._connect(addresses, port)
        if upstream is None:
            self._decided({"decision": "failed", **event, "rule": "connect",
                           "reason": f"could not connect to {', '.join(addresses)} port {port}"})
            await self._answer(writer, 502, "Bad Gateway",
                               f"could not connect to {host} port {port}")
            return
        up_reader, up_writer, address = upstream
        event["address"] = address
        try:
            if tunnel:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
                await self._tunnel(reader, writer, up_reader, up_writer, host, port, event)
            else:
                self._decided({"decision": "allowed", **event})
                await _exchange(reader, writer, up_reader, up_writer,
                                _forward_head(request, path, host, port), framing)
        finally:
            up_writer.close()

    def _refused(self, event: Mapping[str, Any], decision: Decision) -> None:
        self._decided({"decision": "refused", **event, "rule": decision.rule,
                       "reason": decision.reason})

    async def _tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                      host: str, port: int, event: dict[str, Any]) -> None:
        """Judge what the client sends first in a tunnel (see the module's docstring), then
        forward it, with the rest, as it came."""
        if port == self.http_port:
            await self._http_tunnel(reader, writer, up_reader, up_writer, host, port, event)
            return
        # Elsewhere the server may speak first (SSH): its bytes flow meanwhile.
        answers = None if port == self.tls_port else asyncio.ensure_future(
            _pipe(up_reader, writer))
        try:
            first = b""
            if answers is not None and (first := await reader.read(_CHUNK))[:1] != b"\x16":
                self._decided({"decision": "allowed", **event})
                up_writer.write(first)
                await asyncio.gather(_pipe(reader, up_writer), answers)
                return
            if answers is not None:  # TLS, where the server speaks second: stop piping it
                answers.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await answers
            await self._tls_tunnel(reader, writer, up_reader, up_writer, host, first, event)
        finally:
            if answers is not None:
                answers.cancel()

    async def _tls_tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                          host: str, first: bytes, event: dict[str, Any]) -> None:
        """The ClientHello must name ``host``; so must a second one, after a HelloRetryRequest
        (client bytes after the first wait for the server's answer, so a second hello cannot
        be slipped in ahead of it). Then both ways as they come."""
        hello, rest, decision = await _judge_hello(reader, first, host)
        if decision.allowed:
            self._decided({"decision": "allowed", **event})
            up_writer.write(hello)
            answer, retry = await _server_first(up_reader)
            writer.write(answer)
            await writer.drain()
            if retry:
                hello, rest, decision = await _judge_hello(reader, rest, host, again=True)
                if decision.allowed:
                    up_writer.write(hello)
        if not decision.allowed:
            self._refused(event, decision)
            writer.write(TLS_ACCESS_DENIED)
            await writer.drain()
            return
        up_writer.write(rest)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def _http_tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                           host: str, port: int, event: dict[str, Any]) -> None:
        """Port 80: one HTTP request whose ``Host`` is the tunnel's name, forwarded as on the
        plain path; anything else is refused with a 403 (nothing reached the server)."""
        try:
            request = parse_head(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                                        HEAD_TIMEOUT))
            framing = request.framing()
            url = urlsplit(request.target)
            if request.target.startswith("/"):
                path = request.target
            elif url.scheme == "http" and same_host(url.netloc, host, port):
                path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            else:
                raise ValueError(f"the request's target {request.target[:100]!r} is not {host}")
            decision = check_host_header(request, host, port) if request.values("host") else \
                Decision(False, "host_header", "no Host header")
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                TimeoutError) as exc:
            decision = Decision(False, "host_header", "a tunnel to port 80 carries one HTTP/1 "
                                f"request for {host} ({type(exc).__name__}: {exc})"[:300])
        if not decision.allowed:
            self._refused(event, decision)
            with contextlib.suppress(OSError):
                await self._refuse(writer, decision)
            return
        self._decided({"decision": "allowed", **event})
        await _exchange(reader, writer, up_reader, up_writer,
                        _forward_head(request, path, host, port), framing)

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
        phrase = CTL.sub(" ", phrase)
        extra = f"X-Sandbox-Egress-Rule: {rule}\r\n" if rule else ""
        writer.write(
            f"HTTP/1.1 {status} {phrase}\r\n{extra}Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
        await writer.drain()


async def _judge_hello(reader: asyncio.StreamReader, first: bytes, host: str, *,
                       again: bool = False) -> tuple[bytes, bytes, Decision]:
    """Read a ClientHello (that starts with `first`) within `HELLO_TIMEOUT`; return its
    records, the bytes read after them, and whether its server name is ``host``. ``again``:
    the second ClientHello after a HelloRetryRequest, which a ChangeCipherSpec may precede."""
    hello = HelloReader()
    data, before = first, b""
    deadline = time.monotonic() + HELLO_TIMEOUT
    try:
        while True:
            if again and not hello.raw:
                while len(data) < len(_CCS) and _CCS.startswith(data) and data:
                    more = await asyncio.wait_for(reader.read(_CHUNK),
                                                  deadline - time.monotonic())
                    if not more:
                        raise ValueError("the client closed before a whole ClientHello")
                    data += more
                if data.startswith(_CCS) and not before:
                    before, data = _CCS, data[len(_CCS):]
            if (body := hello.feed(data)) is not None:
                break
            data = await asyncio.wait_for(reader.read(_CHUNK), deadline - time.monotonic())
            if not data:
                raise ValueError("the client closed before a whole ClientHello")
        return (before + bytes(hello.raw[:hello.end]), bytes(hello.raw[hello.end:]),
                check_server_name(hello_server_name(body), host))
    except TimeoutError:
        reason = f"no whole TLS ClientHello within {HELLO_TIMEOUT:g} s"
    except ValueError as exc:
        reason = f"a tunnel to {host} must start with a TLS ClientHello naming it: {exc}"
    return b"", b"", Decision(False, "sni", reason)


async def _server_first(up_reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """Read the server's answer up to its first handshake message's random; return the bytes
    read (to forward) and whether it is a TLS 1.3 HelloRetryRequest."""
    raw, handshake, pos = bytearray(), bytearray(), 0
    while len(handshake) < 38:
        data = await up_reader.read(_CHUNK)
        if not data or len(raw) > HELLO_LIMIT:
            return bytes(raw + data), False
        raw += data
        while len(raw) - pos >= 5 and len(handshake) < 38:
            if raw[pos] != 0x16:
                return bytes(raw), False  # an alert, or not TLS at all
            length = int.from_bytes(raw[pos + 3:pos + 5], "big")
            if len(raw) - pos - 5 < length:
                break
            handshake += raw[pos + 5:pos + 5 + length]
            pos += 5 + length
    return bytes(raw), handshake[0] == 2 and handshake[6:38] == HELLO_RETRY_RANDOM


def _forward_head(request: Request, path: str, host: str, port: int) -> bytes:
    """The request in origin form, without hop-by-hop or proxy headers, closing after one
    exchange; its ``Host`` is the checked one."""
    dropped = set(_HOP_BY_HOP)
    for value in request.values("connection"):
        dropped.update(v.strip().lower() for v in value.split(","))
    dropped -= {"content-length", "transfer-encoding"}  # the body's framing stays as checked
    kept = [f"{name}: {value}" for name, value in request.headers
            if name.lower() not in dropped and not name.lower().startswith("proxy-")]
    shown = f"[{host}]" if ":" in host else host
    kept.insert(0, f"Host: {shown}" + ("" if port == 80 else f":{port}"))
    lines = [f"{request.method} {path} {request.version}", *kept, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
                    head: bytes, framing: tuple[str, int]) -> None:
    """Forward one request (`head`, then its body as `framing` says) and its answer. Bytes the
    client sends after that body are never forwarded: they end the connection, as a server
    closing a kept-alive connection would (the client retries on a new one, checked anew)."""
    up_writer.write(head)
    answers = asyncio.ensure_future(_pipe(up_reader, writer))
    more: asyncio.Future[None] | None = None
    try:
        await _copy_body(reader, up_writer, *framing)
        await up_writer.drain()
        more = asyncio.ensure_future(_more(reader))
        await asyncio.wait({answers, more}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (answers, more):
            if task is not None:
                task.cancel()


async def _more(reader: asyncio.StreamReader) -> None:
    """Return when the client sends anything more; never, if it only closes its side."""
    if not await reader.read(1):
        await asyncio.get_running_loop().create_future()


async def _copy_exact(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      size: int) -> None:
    while size > 0:
        data = await reader.read(min(size, _CHUNK))
        if not data:
            raise asyncio.IncompleteReadError(b"", size)
        writer.write(data)
        await writer.drain()
        size -= len(data)


async def _copy_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str,
                     length: int) -> None:
    """Forward exactly one body: ``length`` bytes, or chunks (validated) and trailers."""
    if kind == "length":
        await _copy_exact(reader, writer, length)
        return
    while True:
        line = await reader.readuntil(b"\r\n")  # bounded by the reader's limit
        size = line[:-2].split(b";", 1)[0]
        # At most 15 hex digits (< 2**60): no size that overflows a peer's 64-bit counter.
        if not re.fullmatch(rb"[0-9A-Fa-f]{1,15}", size) or _CTL_BYTES.search(line[:-2]):
            raise ValueError("a malformed chunk size line")
        writer.write(line)
        if not int(size, 16):
            break
        await _copy_exact(reader, writer, int(size, 16))
        if await reader.readexactly(2) != b"\r\n":
            raise ValueError("a chunk not followed by CRLF")
        writer.write(b"\r\n")
    total = 0
    while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
        total += len(line)
        name, colon, value = line[:-2].partition(b":")
        if total > HEAD_LIMIT or not colon or not TOKEN.fullmatch(name.decode("latin-1")) \
                or _CTL_BYTES.search(value):
            raise ValueError("a malformed or too long trailer")
        writer.write(line)
    writer.write(line)
    await writer.drain()


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

    async def flush() -> None:
        while True:
            await asyncio.sleep(1)
            proxy.flush()

    flusher = asyncio.ensure_future(flush())
    try:
        async with server:
            await server.serve_forever()
    finally:
        flusher.cancel()


class _LogLines:
    """stderr as JSON lines too, so the SDK's reader of the log never sees a torn line; at
    most `LOG_BURST` lines, then `LOG_RATE` a second (the rest are counted, not written)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tokens, self._last, self._dropped = float(LOG_BURST), clock(), 0

    def write(self, text: str) -> int:
        if text.strip():
            now = self._clock()
            self._tokens = min(float(LOG_BURST), self._tokens + (now - self._last) * LOG_RATE)
            self._last = now
            if self._tokens < 1:
                self._dropped += 1
                return len(text)
            self._tokens -= 1
            dropped, self._dropped = self._dropped, 0
            _emit({"log": text.rstrip()[:2000], **({"dropped": dropped} if dropped else {})})
        return len(text)

    def flush(self) -> None:
        return None


def main(settings_json: str) -> None:
    """Entry point in the proxy container."""
    sys.stderr = cast(TextIO, _LogLines())
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(json.loads(settings_json)))
