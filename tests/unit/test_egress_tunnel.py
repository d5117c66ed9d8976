"""The egress proxy checks the name that is used, not only the one asked for at CONNECT.

On loopback, with a recording origin: a ``Host`` header or TLS server name (SNI) naming
another site than the one checked never reaches the origin, nor does a second request on
the same connection, nor a request two parsers would read two ways. The ClientHello reader
gets hostile input: fragments, truncations, random mutations.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import ssl
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import pytest_asyncio

from sandbox._egress import Decision, EgressPolicy
from sandbox._egress_proxy import (
    HELLO_RETRY_RANDOM,
    LOG_BURST,
    TLS_ACCESS_DENIED,
    EgressProxy,
    _LogLines,
)
from sandbox._egress_wire import HELLO_LIMIT, HelloReader, hello_server_name, parse_head


@attrs.define
class Origin:
    """A server that records every byte each connection sent until it closed."""

    port: int
    seen: list[bytearray] = attrs.field(factory=list)
    answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello"
    closed: asyncio.Event = attrs.field(factory=asyncio.Event)
    #: Answer the first bytes, not only a request head (a TLS server's ServerHello).
    at_once: bool = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = bytearray()
        self.seen.append(got)
        answered = False
        try:
            while data := await reader.read(65536):
                got += data
                if not answered and (self.at_once or b"\r\n\r\n" in got) and self.answer:
                    writer.write(self.answer)  # answer, but read on: record what follows
                    answered = True
        except OSError:
            pass
        finally:
            writer.close()
            self.closed.set()


@pytest_asyncio.fixture
async def origin() -> AsyncIterator[Origin]:
    made = Origin(0)
    server = await asyncio.start_server(made.handle, "127.0.0.1", 0)
    made.port = server.sockets[0].getsockname()[1]
    async with server:
        yield made


@attrs.define
class Proxy:
    port: int
    events: list[Mapping[str, Any]]
    proxy: EgressProxy


@pytest_asyncio.fixture
async def proxy(origin: Origin) -> AsyncIterator[Proxy]:
    """A proxy allowing ``localhost``'s address on the origin's port, which it treats as the
    HTTP port for tunnels; `tls_proxy` treats it as the TLS port."""
    async for made in _proxy(origin, http_port=origin.port, tls_port=443):
        yield made


@pytest_asyncio.fixture
async def tls_proxy(origin: Origin) -> AsyncIterator[Proxy]:
    async for made in _proxy(origin, http_port=80, tls_port=origin.port):
        yield made


class _LoopbackProxy(EgressProxy):
    """Resolves every name to 127.0.0.1 (which the policy lists), as ``a.test`` would."""

    async def _resolve(self, host: str, port: int) -> tuple[list[str], Decision]:
        return ["127.0.0.1"], self.policy.check_addresses(host, ["127.0.0.1"])


async def _proxy(origin: Origin, http_port: int = 80,
                 tls_port: int = 443) -> AsyncIterator[Proxy]:
    events: list[Mapping[str, Any]] = []
    made = _LoopbackProxy(EgressPolicy.from_fields(allowed_hosts=["127.0.0.1", "a.test"],
                                                allowed_ports=[origin.port]),
                       emit=events.append, http_port=http_port, tls_port=tls_port)
    server = await asyncio.start_server(made.handle, "127.0.0.1", 0, limit=16 * 1024)
    async with server:
        yield Proxy(server.sockets[0].getsockname()[1], events, made)


async def _exchange(port: int, *parts: bytes) -> bytes:
    """Send each part (the peer may read them apart), half-close, read to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for part in parts:
        writer.write(part)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()
    answer = bytearray()
    try:
        while data := await asyncio.wait_for(reader.read(65536), 20):
            answer += data
    except ConnectionResetError:
        pass
    writer.close()
    return bytes(answer)


def _connect(port: int, host: str = "127.0.0.1") -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def server_hello(random_bytes: bytes = bytes(32)) -> bytes:
    """A TLS 1.3 ServerHello record (a HelloRetryRequest with `HELLO_RETRY_RANDOM`)."""
    body = b"\x03\x03" + random_bytes + b"\x00\x13\x01\x00" + b"\x00\x06\x00\x2b\x00\x02\x03\x04"
    message = b"\x02" + len(body).to_bytes(3, "big") + body
    return b"\x16\x03\x03" + len(message).to_bytes(2, "big") + message


def tls_origin(origin: Origin, answer: bytes) -> None:
    origin.answer, origin.at_once = answer, True


def client_hello(server_hostname: str | None) -> bytes:
    """What Python's ssl sends first for `server_hostname` (no SNI for None)."""
    context = ssl.create_default_context()
    if server_hostname is None:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def hello_body(extensions: list[tuple[int, bytes]]) -> bytes:
    """A minimal ClientHello body with these extensions."""
    ext = b"".join(k.to_bytes(2, "big") + len(v).to_bytes(2, "big") + v for k, v in extensions)
    return (b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
            + len(ext).to_bytes(2, "big") + ext)


def sni(*names: bytes, name_type: int = 0) -> tuple[int, bytes]:
    entries = b"".join(bytes([name_type]) + len(n).to_bytes(2, "big") + n for n in names)
    return 0, len(entries).to_bytes(2, "big") + entries


def records(body: bytes, sizes: list[int]) -> bytes:
    """The ClientHello `body` as a handshake message cut into records of these sizes."""
    message = b"\x01" + len(body).to_bytes(3, "big") + body
    out, pos = b"", 0
    for size in [*sizes, len(message)]:
        if pos >= len(message):
            break
        part = message[pos:pos + size]
        out += b"\x16\x03\x01" + len(part).to_bytes(2, "big") + part
        pos += len(part)
    return out


# --- plain HTTP -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_plain_http_host_naming_another_site_is_refused(origin: Origin,
                                                              proxy: Proxy) -> None:
    answer = await _exchange(proxy.port, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\n"
                             "Host: other.test\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden by sandbox egress policy (host_header): "
                             b"the Host header names 'other.test', not 127.0.0.1:")
    assert not any(origin.seen)  # at most a connection, no byte
    assert [e["rule"] for e in proxy.events] == ["host_header"]


@pytest.mark.asyncio
async def test_plain_http_second_request_on_the_connection_is_not_forwarded(
        origin: Origin, proxy: Proxy) -> None:
    """Kept alive or pipelined, the request after the first never reaches the origin: the
    proxy serves one request per connection (the client retries on a new, checked one)."""
    first = (f"POST http://127.0.0.1:{origin.port}/a HTTP/1.1\r\nHost: 127.0.0.1:{origin.port}"
             "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n").encode()
    second = b"GET /b HTTP/1.1\r\nHost: other.test\r\n\r\n"
    await _exchange(proxy.port, first + second)
    await origin.closed.wait()
    assert len(origin.seen) == 1
    assert origin.seen[0].endswith(b"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert b"other.test" not in origin.seen[0] and b"/b" not in origin.seen[0]


@pytest.mark.asyncio
async def test_plain_http_body_by_length_then_nothing_more(origin: Origin, proxy: Proxy) -> None:
    head = (f"PUT http://127.0.0.1:{origin.port}/a HTTP/1.1\r\nContent-Length: 4\r\n"
            "\r\n").encode()
    answer = await _exchange(proxy.port, head, b"abcd", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await origin.closed.wait()
    assert origin.seen[0].endswith(b"\r\n\r\nabcd")
    assert answer in (b"", origin.answer) or answer.endswith(b"hello")


@pytest.mark.parametrize("headers", [
    b"Host : other.test\r\n",  # space before the colon
    b"X-A: 1\r\n Host: other.test\r\n",  # a folded line
    b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
    b"Content-Length: 4\r\nContent-Length: 5\r\n",
    b"Content-Length: 4, 4\r\n",
    b"Content-Length: +4\r\n",
    b"Transfer-Encoding: gzip, chunked\r\n",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    b"X-A: a\rb\r\n",
    b"X-A: a\nHost: other.test\r\n",
    b"X-A: \x00\r\n",
    b"Host: a\r\nHost: b\r\n",
])
@pytest.mark.asyncio
async def test_ambiguous_requests_are_refused_unforwarded(origin: Origin, proxy: Proxy,
                                                          headers: bytes) -> None:
    answer = await _exchange(proxy.port, f"POST http://127.0.0.1:{origin.port}/ HTTP/1.1\r\n"
                             .encode() + headers + b"\r\nabcd")
    assert answer.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 403 ")), answer
    assert not any(origin.seen)  # at most a connection, no byte


@pytest.mark.parametrize("body", [
    b"5 \r\nhello\r\n0\r\n\r\n", b"-5\r\nhello\r\n0\r\n\r\n", b"5\r\nhelloXX0\r\n\r\n",
    b"5\r\nhello\r\n0\r\nX-T : 1\r\n\r\n", b"5;a\nb\r\nhello\r\n0\r\n\r\n",
    b"1000000000000000\r\n",  # 2**60: the rest would be forwarded as its body
])
@pytest.mark.asyncio
async def test_malformed_chunks_end_the_request(origin: Origin, proxy: Proxy,
                                                body: bytes) -> None:
    head = (f"POST http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nTransfer-Encoding: chunked"
            "\r\n\r\n").encode()
    await _exchange(proxy.port, head + body + b"GET /smuggled HTTP/1.1\r\n\r\n")
    await origin.closed.wait()
    assert b"smuggled" not in origin.seen[0]


def test_parse_head_keeps_what_it_checked() -> None:
    request = parse_head(b"GET http://a.test/ HTTP/1.1\r\nHost:a.test\r\nX-B:  two words \r\n"
                         b"\r\n")
    assert request.values("host") == ["a.test"] and request.values("x-b") == ["two words"]
    assert request.framing() == ("length", 0)
    for bad in [b"GET / HTTP/1.1\r\n", b"GET  / HTTP/1.1\r\n\r\n", b"GET / HTTP/2\r\n\r\n",
                b"G(T / HTTP/1.1\r\n\r\n", b"GET /\x7f HTTP/1.1\r\n\r\n",
                b"GET http://a.te\tst/ HTTP/1.1\r\n\r\n",  # urlsplit drops the tab
                b"CONNECT \ta.test:443 HTTP/1.1\r\n\r\n", b"GET /\xe9 HTTP/1.1\r\n\r\n"]:
        with pytest.raises(ValueError):
            parse_head(bad)


# --- a tunnel to the HTTP port ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_tunnel_http_host_naming_another_site_is_refused(origin: Origin,
                                                               proxy: Proxy) -> None:
    answer = await _exchange(proxy.port, _connect(origin.port),
                             b"GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
    assert answer.startswith(ESTABLISHED + b"HTTP/1.1 403 Forbidden by sandbox egress policy "
                             b"(host_header): the Host header names 'other.test'")
    assert not any(origin.seen)  # at most a connection, no byte
    assert [e["decision"] for e in proxy.events] == ["refused"]


@pytest.mark.asyncio
async def test_tunnel_http_with_its_own_host_is_forwarded_once(origin: Origin,
                                                               proxy: Proxy) -> None:
    own = f"Host: 127.0.0.1:{origin.port}\r\n".encode()
    answer = await _exchange(proxy.port, _connect(origin.port),
                             b"GET /one HTTP/1.1\r\n" + own + b"\r\n",
                             b"GET /two HTTP/1.1\r\nHost: other.test\r\n\r\n")
    await origin.closed.wait()
    assert answer.startswith(ESTABLISHED)
    assert origin.seen[0].startswith(b"GET /one HTTP/1.1\r\n" + own)
    assert b"Connection: close\r\n" in origin.seen[0]
    assert b"/two" not in origin.seen[0] and b"other.test" not in origin.seen[0]
    assert [e["decision"] for e in proxy.events] == ["allowed"]


@pytest.mark.parametrize("first", [
    b"GET / HTTP/1.1\r\n\r\n",  # no Host: the address's default site
    b"GET http://other.test/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    b"\x16\x03\x01\x00\x05hello",  # not HTTP at all
])
@pytest.mark.asyncio
async def test_tunnel_http_anything_else_is_refused(origin: Origin, proxy: Proxy,
                                                    first: bytes) -> None:
    answer = await _exchange(proxy.port, _connect(origin.port), first)
    assert answer.startswith(ESTABLISHED + b"HTTP/1.1 403 ")
    assert not any(origin.seen)  # at most a connection, no byte


# --- a tunnel to the TLS port -------------------------------------------------------------------


@pytest.mark.asyncio
async def test_tunnel_tls_naming_another_server_is_refused(origin: Origin,
                                                           tls_proxy: Proxy) -> None:
    answer = await _exchange(tls_proxy.port, _connect(origin.port, "a.test"),
                             client_hello("other.test"))
    assert answer == ESTABLISHED + TLS_ACCESS_DENIED
    assert not any(origin.seen)  # at most a connection, no byte
    event = tls_proxy.events[0]
    assert (event["decision"], event["rule"]) == ("refused", "sni")
    assert event["reason"] == "the ClientHello names 'other.test', not a.test"


@pytest.mark.parametrize("split", [None, 1, 7, 100])
@pytest.mark.asyncio
async def test_tunnel_tls_naming_its_server_is_forwarded_as_it_came(
        origin: Origin, tls_proxy: Proxy, split: int | None) -> None:
    tls_origin(origin, server_hello())
    hello = client_hello("A.test")
    parts = [hello] if split is None else [hello[i:i + split] for i in
                                          range(0, len(hello), split)]
    answer = await _exchange(tls_proxy.port, _connect(origin.port, "a.test"), *parts,
                             b"after")
    await origin.closed.wait()
    assert answer == ESTABLISHED + server_hello()
    assert origin.seen == [bytearray(hello + b"after")]
    assert [e["decision"] for e in tls_proxy.events] == ["allowed"]


@pytest.mark.asyncio
async def test_tunnel_tls_in_several_records_is_read_whole(origin: Origin,
                                                           tls_proxy: Proxy) -> None:
    tls_origin(origin, server_hello())
    hello = records(hello_body([sni(b"a.test")]), [3, 1, 50])
    await _exchange(tls_proxy.port, _connect(origin.port, "a.test"), hello)
    await origin.closed.wait()
    assert origin.seen == [bytearray(hello)]


@pytest.mark.parametrize(("first", "reason"), [
    (client_hello(None), "names no server (SNI)"),
    (b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", "not a TLS handshake"),
    (records(hello_body([sni(b"a.test"), (0xFE0D, b"x")]), []),
     "(ECH; Chromium sends one by default: start it with "
     "--disable-features=EncryptedClientHello) hides"),
    (records(hello_body([sni(b"a.test", b"other.test")]), []), "2 host names"),
    (records(hello_body([sni(b"a.test"), sni(b"other.test")]), []), "extension 0 twice"),
    (records(hello_body([sni(b"a.test")]), [])[:-1], "closed before a whole ClientHello"),
    (b"\x16\x03\x01\xff\xff", "not a TLS handshake record"),
    (b"\x16\x03\x01\x00\x04\x01\x01\x00\x00" + b"\x16\x03\x01\x40\x00" + bytes(0x4000) * 5,
     "too long"),
])
@pytest.mark.asyncio
async def test_tunnel_tls_refusals(origin: Origin, tls_proxy: Proxy, first: bytes,
                                   reason: str) -> None:
    answer = await _exchange(tls_proxy.port, _connect(origin.port, "a.test"), first)
    assert answer == ESTABLISHED + TLS_ACCESS_DENIED
    assert not any(origin.seen)  # at most a connection, no byte
    assert tls_proxy.events[0]["rule"] == "sni" and reason in tls_proxy.events[0]["reason"]


@pytest.mark.parametrize("name", [b" a.test", b"\ta.test", b"a.test\x1f", b"A.TEST\x0c",
                                  b"a.test\n", b"a\x00.test"])
@pytest.mark.asyncio
async def test_tunnel_tls_server_name_equal_only_once_stripped_is_refused(
        origin: Origin, tls_proxy: Proxy, name: bytes) -> None:
    """The SNI is forwarded as it came, so it must be the name itself, not one that Python's
    strip() or lower() turns into it (the server may read it otherwise)."""
    hello = records(hello_body([sni(name)]), [])
    answer = await _exchange(tls_proxy.port, _connect(origin.port, "a.test"), hello)
    assert answer == ESTABLISHED + TLS_ACCESS_DENIED
    assert not any(origin.seen)
    event = tls_proxy.events[0]
    assert event["rule"] == "sni" and "not a plain host name" in event["reason"]


@pytest.mark.parametrize("connect", [
    "CONNECT \ta.test:{port} HTTP/1.1\r\n\r\n",
    "CONNECT a.test\xa0:{port} HTTP/1.1\r\n\r\n",
    "CONNECT a.test:+{port} HTTP/1.1\r\n\r\n",
    "CONNECT [::1]x:{port} HTTP/1.1\r\n\r\n",
])
@pytest.mark.asyncio
async def test_connect_target_spelled_loosely_is_a_bad_request(origin: Origin,
                                                               tls_proxy: Proxy,
                                                               connect: str) -> None:
    answer = await _exchange(tls_proxy.port, connect.format(port=origin.port).encode("latin-1"),
                             client_hello("a.test"))
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert not any(origin.seen)


@pytest.mark.asyncio
async def test_host_header_equal_only_once_stripped_is_refused(origin: Origin,
                                                               proxy: Proxy) -> None:
    answer = await _exchange(proxy.port, _connect(origin.port),
                             f"GET / HTTP/1.1\r\nHost: \xa0127.0.0.1:{origin.port}\r\n\r\n"
                             .encode("latin-1"))
    assert answer.startswith(ESTABLISHED + b"HTTP/1.1 403 ")
    assert not any(origin.seen)


@pytest.mark.asyncio
async def test_tunnel_to_an_address_must_name_no_server(origin: Origin,
                                                        tls_proxy: Proxy) -> None:
    tls_origin(origin, server_hello())
    hello = client_hello(None)
    await _exchange(tls_proxy.port, _connect(origin.port), hello)
    assert await _exchange(tls_proxy.port, _connect(origin.port), client_hello("a.test")) == \
        ESTABLISHED + TLS_ACCESS_DENIED
    assert [seen for seen in origin.seen if seen] == [bytearray(hello)]


@pytest.mark.asyncio
async def test_other_ports_pass_other_protocols_but_judge_tls(origin: Origin) -> None:
    """On a port neither HTTP's nor TLS's, the server may speak first (SSH); a ClientHello
    is still judged."""
    tls_origin(origin, server_hello())
    async for made in _proxy(origin):
        await _exchange(made.port, _connect(origin.port), b"SSH-2.0-x\r\n")
        assert await _exchange(made.port, _connect(origin.port, "a.test"),
                               client_hello("other.test")) == ESTABLISHED + TLS_ACCESS_DENIED
    assert [seen for seen in origin.seen if seen] == [bytearray(b"SSH-2.0-x\r\n")]


async def _after_retry(port: int, origin_port: int, first: bytes,
                       second: bytes) -> bytes:
    """CONNECT, send `first`, read the HelloRetryRequest, send `second`, read to the end."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_connect(origin_port, "a.test") + first)
    retry = ESTABLISHED + server_hello(HELLO_RETRY_RANDOM)
    got = await asyncio.wait_for(reader.readexactly(len(retry)), 20)
    writer.write(second)
    writer.write_eof()
    got += await asyncio.wait_for(reader.read(), 20)
    writer.close()
    return got


@pytest.mark.parametrize("ccs", [b"", b"\x14\x03\x03\x00\x01\x01"])
@pytest.mark.asyncio
async def test_second_hello_after_a_retry_must_name_the_server_too(
        origin: Origin, tls_proxy: Proxy, ccs: bytes) -> None:
    """TLS 1.3 lets the server ask for a second ClientHello (HelloRetryRequest): naming
    another server there is refused like in the first."""
    tls_origin(origin, server_hello(HELLO_RETRY_RANDOM))
    first = records(hello_body([sni(b"a.test")]), [])
    got = await _after_retry(tls_proxy.port, origin.port, first,
                             ccs + records(hello_body([sni(b"other.test")]), [7]))
    assert got == ESTABLISHED + server_hello(HELLO_RETRY_RANDOM) + TLS_ACCESS_DENIED
    assert [seen for seen in origin.seen if seen] == [bytearray(first)]
    assert [e["decision"] for e in tls_proxy.events] == ["allowed", "refused"]
    assert "'other.test', not a.test" in tls_proxy.events[1]["reason"]


@pytest.mark.parametrize("ccs", [b"", b"\x14\x03\x03\x00\x01\x01"])
@pytest.mark.asyncio
async def test_second_hello_naming_the_server_is_forwarded(origin: Origin, tls_proxy: Proxy,
                                                           ccs: bytes) -> None:
    tls_origin(origin, server_hello(HELLO_RETRY_RANDOM))
    first = records(hello_body([sni(b"a.test")]), [])
    second = ccs + records(hello_body([sni(b"a.test"), (51, b"\x00\x00")]), []) + b"\x17rest"
    got = await _after_retry(tls_proxy.port, origin.port, first, second)
    await origin.closed.wait()
    assert got == ESTABLISHED + server_hello(HELLO_RETRY_RANDOM)
    assert origin.seen == [bytearray(first + second)]


@pytest.mark.asyncio
async def test_second_hello_sent_ahead_of_the_retry_is_held_and_judged(
        origin: Origin, tls_proxy: Proxy) -> None:
    """A client cannot slip its second hello in before the server asked for it: what follows
    the first waits for the server's answer."""
    tls_origin(origin, server_hello(HELLO_RETRY_RANDOM))
    first = records(hello_body([sni(b"a.test")]), [])
    answer = await _exchange(tls_proxy.port, _connect(origin.port, "a.test"),
                             first + records(hello_body([sni(b"other.test")]), []))
    assert answer == ESTABLISHED + server_hello(HELLO_RETRY_RANDOM) + TLS_ACCESS_DENIED
    assert [seen for seen in origin.seen if seen] == [bytearray(first)]


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``a.test`` and its key (with ``cryptography``, which is
    not a test dependency: skipped without it)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "a.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("a.test")]), False)
            .sign(key, hashes.SHA256()))
    paths = directory / "cert.pem", directory / "key.pem"
    paths[0].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.mark.parametrize("retry", [False, True])
@pytest.mark.asyncio
async def test_real_tls_through_the_tunnel(tmp_path: Path, retry: bool) -> None:
    """Python's TLS client and server, through the proxy, with and without a
    HelloRetryRequest (the server takes only secp384r1; the client's first key share is not)."""
    cert, key = _certificate(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    if retry:
        server_context.set_ecdh_curve("secp384r1")

    async def greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello " + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, "127.0.0.1", 0, ssl=server_context)
    origin = Origin(server.sockets[0].getsockname()[1])
    async with server:
        async for made in _proxy(origin, tls_port=origin.port):
            reader, writer = await asyncio.open_connection("127.0.0.1", made.port)
            writer.write(_connect(origin.port, "a.test"))
            assert await reader.readuntil(b"\r\n\r\n") == ESTABLISHED
            await writer.start_tls(ssl.create_default_context(cafile=cert),
                                   server_hostname="a.test")
            writer.write(b"through\n")
            assert await asyncio.wait_for(reader.read(), 20) == b"hello through\n"
            writer.close()
            assert [e["decision"] for e in made.events] == ["allowed"]


# --- the ClientHello reader, on hostile input -------------------------------------------------


def _read(data: bytes) -> str | None:
    body = HelloReader().feed(data)
    if body is None:
        raise ValueError("incomplete")
    return hello_server_name(body)


def test_hello_reader_takes_any_fragmentation() -> None:
    hello = client_hello("a.test")
    for size in (1, 2, 5, 6, 300):
        reader = HelloReader()
        bodies = [reader.feed(hello[i:i + size]) for i in range(0, len(hello), size)]
        assert all(b is None for b in bodies[:-1]) and bodies[-1] is not None
        assert hello_server_name(bodies[-1]) == "a.test"
        assert bytes(reader.raw) == hello


def test_every_truncation_and_mutation_is_a_value_error_or_a_name() -> None:
    """Random damage to a ClientHello never raises anything but ValueError."""
    hello = records(hello_body([sni(b"a.test"), (10, b"\x00\x02\x00\x1d")]), [])
    assert _read(hello) == "a.test"
    for end in range(len(hello)):
        with pytest.raises(ValueError):
            _read(hello[:end])
    rng = random.Random(26)
    for _ in range(3000):
        damaged = bytearray(hello)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        try:
            name = _read(bytes(damaged))
        except ValueError:
            continue
        assert name is None or isinstance(name, str)


def test_hello_reader_bounds() -> None:
    with pytest.raises(ValueError, match="not a ClientHello"):
        HelloReader().feed(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00")
    body = hello_body([])
    payload = b"\x01" + len(body).to_bytes(3, "big") + body + b"\x01"
    with pytest.raises(ValueError, match="more handshake"):
        HelloReader().feed(b"\x16\x03\x01" + len(payload).to_bytes(2, "big") + payload)
    big = b"\x16\x03\x01\x00\x04\x01" + (HELLO_LIMIT).to_bytes(3, "big")
    with pytest.raises(ValueError, match="too long"):
        HelloReader().feed(big)
    with pytest.raises(ValueError, match="not ASCII"):
        _read(records(hello_body([sni("é.test".encode())]), []))
    with pytest.raises(ValueError, match="type 1"):
        _read(records(hello_body([sni(b"a.test", name_type=1)]), []))
    assert _read(records(hello_body([]), [])) is None


# --- the log ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_refusals_past_a_burst_are_counted_not_logged_one_by_one(origin: Origin) -> None:
    now = [0.0]
    events: list[Mapping[str, Any]] = []
    made = EgressProxy(EgressPolicy.from_fields(allowed_hosts=["a.test"]), emit=events.append,
                       clock=lambda: now[0])
    server = await asyncio.start_server(made.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        for _ in range(LOG_BURST + 30):
            await _exchange(port, b"CONNECT b.test:443 HTTP/1.1\r\n\r\n")
        assert len(events) == LOG_BURST
        made.flush()
        assert events[-1] == {"decision": "refused", "rule": "allowed_hosts", "count": 30,
                              "method": "CONNECT", "host": "b.test", "port": 443,
                              "reason": "b.test matches no allowed_hosts entry"}
        made.flush()
        assert len(events) == LOG_BURST + 1
        now[0] += 1.0  # LOG_RATE more tokens
        await _exchange(port, b"CONNECT b.test:443 HTTP/1.1\r\n\r\n")
        assert len(events) == LOG_BURST + 2 and "count" not in events[-1]


def test_stderr_lines_are_rate_limited_too(capsys: pytest.CaptureFixture[str]) -> None:
    """Tracebacks a sandbox could provoke by the thousand go to the same log."""
    now = [0.0]
    lines = _LogLines(clock=lambda: now[0])
    for i in range(LOG_BURST + 10):
        lines.write(f"trace {i}\n")
    written = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["log"] for e in written] == [f"trace {i}" for i in range(LOG_BURST)]
    now[0] += 1.0
    lines.write("later\n")
    (last,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert (last["log"], last["dropped"]) == ("later", 10)
