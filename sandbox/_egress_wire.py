"""What a client of the egress proxy says, read strictly: HTTP request heads and the TLS
ClientHello's server name (SNI). Every byte comes from the sandbox, so each parser bounds what
it reads and raises ValueError on anything ambiguous; the proxy refuses then.

Stdlib only: it runs inside the proxy's container with `sandbox._egress_proxy`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from ._egress import Decision, normalize_host

__all__ = ["CTL", "HELLO_LIMIT", "HOST_NAME", "TOKEN", "HelloReader", "Request",
           "check_host_header", "check_server_name", "hello_server_name", "parse_head", "same_host",
           "split_host_port"]

#: A ClientHello is read whole before anything is forwarded: at most this much (one with
#: post-quantum key shares is about 2 KiB).
HELLO_LIMIT = 64 * 1024
TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
#: A request target: visible ASCII only (no tab, which urlsplit would silently drop).
_TARGET = re.compile(r"[\x21-\x7e]+")


#: A host as a client may spell it (SNI, CONNECT target, URL, Host): ASCII letters, digits,
#: dots, hyphens, underscores; no space, control or other character that Python's strip()
#: or lower() would quietly remove or fold before the policy compares it.
HOST_NAME = re.compile(r"[A-Za-z0-9._-]{1,253}")
#: An IPv6 address between brackets (no zone: a scope id names a local interface).
_V6 = re.compile(r"[0-9A-Fa-f:.]{2,45}")
_PORT = re.compile(r"[0-9]{1,5}")


def split_host_port(text: str, default: int) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or a bare host (ASCII, see `HOST_NAME`; the port 1 to 5
    ASCII digits, 1-65535); raises ValueError for anything else."""
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ValueError(text)
        port, has_port, ok = rest[1:], bool(rest), bool(_V6.fullmatch(host))
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
        has_port, ok = True, bool(HOST_NAME.fullmatch(host))
    else:
        host, port, has_port = text, "", False
        ok = bool(HOST_NAME.fullmatch(host) or _V6.fullmatch(host))
    if not ok or (has_port and not _PORT.fullmatch(port)):
        raise ValueError(text)
    number = int(port) if has_port else default
    if not 0 < number < 65536:
        raise ValueError(text)
    return host, number


@dataclass(frozen=True)
class Request:
    """One HTTP/1 request head, parsed strictly: what the proxy checks is what it forwards."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def values(self, name: str) -> list[str]:
        """The values of every header called `name` (case-insensitive)."""
        return [v for k, v in self.headers if k.lower() == name]

    def framing(self) -> tuple[str, int]:
        """``("chunked", 0)`` or ``("length", n)``; ValueError for what two parsers could
        read two ways (both headers, several lengths, another transfer coding)."""
        codings, lengths = self.values("transfer-encoding"), self.values("content-length")
        if codings:
            if len(codings) != 1 or codings[0].lower() != "chunked" or lengths or \
                    self.version != "HTTP/1.1":
                raise ValueError("Transfer-Encoding other than one 'chunked' (without "
                                 "Content-Length, on HTTP/1.1)")
            return "chunked", 0
        if len(lengths) > 1 or (lengths and not re.fullmatch(r"[0-9]{1,18}", lengths[0])):
            raise ValueError("Content-Length is not one decimal number")
        return "length", int(lengths[0]) if lengths else 0


def parse_head(head: bytes) -> Request:
    """Parse a request head ending in an empty line; ValueError for anything not plainly
    HTTP/1.0 or 1.1 (bare CR or LF, folded or spaced header names, control characters)."""
    text = head.decode("latin-1")
    if not text.endswith("\r\n\r\n"):
        raise ValueError("the head does not end with an empty line")
    lines = text[:-4].split("\r\n")
    if any("\r" in line or "\n" in line for line in lines):
        raise ValueError("a bare CR or LF in the head")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not TOKEN.fullmatch(parts[0]) or \
            not _TARGET.fullmatch(parts[1]) or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise ValueError("not an HTTP/1 request line")
    headers = []
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not TOKEN.fullmatch(name) or CTL.search(value):
            raise ValueError(f"a malformed header line {line[:60]!r}")
        headers.append((name, value.strip(" \t")))
    return Request(parts[0], parts[1], parts[2], tuple(headers))


def same_host(given: str, host: str, port: int) -> bool:
    """Whether a ``Host`` value names ``host:port`` (port 80 when it has none)."""
    try:
        name, number = split_host_port(given, 80)
        return (normalize_host(name), number) == (normalize_host(host), port)
    except ValueError:
        return False


def check_host_header(request: Request, host: str, port: int) -> Decision:
    """The request's ``Host`` must name ``host:port``, the destination checked (at most one;
    required in a tunnel, where nothing else names the virtual host)."""
    given = request.values("host")
    if len(given) > 1:
        return Decision(False, "host_header", "several Host headers")
    if given and not same_host(given[0], host, port):
        return Decision(False, "host_header", f"the Host header names {given[0][:100]!r}, "
                        f"not {host}" + ("" if port == 80 else f":{port}"))
    return Decision(True)


class _Cursor:
    """Bounded reads from a TLS structure; ValueError past its end."""

    def __init__(self, data: bytes) -> None:
        self._data, self._pos = data, 0

    @property
    def done(self) -> bool:
        return self._pos == len(self._data)

    def take(self, size: int) -> bytes:
        if size > len(self._data) - self._pos:
            raise ValueError("a truncated ClientHello")
        self._pos += size
        return self._data[self._pos - size:self._pos]

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, size: int) -> bytes:
        return self.take(self.number(size))


def hello_server_name(body: bytes) -> str | None:
    """The host name a ClientHello body (after the handshake header) asks for, or None.

    Raises ValueError for a malformed body, a repeated extension, a server_name list that is
    not exactly one host name, or an encrypted ClientHello (ECH, draft ESNI), whose real name
    cannot be seen.
    """
    hello = _Cursor(body)
    hello.take(2 + 32)  # legacy_version, random
    if len(hello.vector(1)) > 32:
        raise ValueError("a session id longer than 32 bytes")
    suites = hello.vector(2)
    if not suites or len(suites) % 2:
        raise ValueError("malformed cipher suites")
    if not hello.vector(1):
        raise ValueError("no compression methods")
    if hello.done:
        return None  # no extensions at all
    extensions = _Cursor(hello.vector(2))
    if not hello.done:
        raise ValueError("bytes after the extensions")
    seen: set[int] = set()
    name = None
    while not extensions.done:
        kind, data = extensions.number(2), extensions.vector(2)
        if kind in seen:
            raise ValueError(f"extension {kind} twice")
        seen.add(kind)
        if kind in (0xFE0D, 0xFFCE):
            raise ValueError("an encrypted ClientHello (ECH; Chromium sends one by default: "
                             "start it with --disable-features=EncryptedClientHello) hides "
                             "the server name")
        if kind == 0:
            outer = _Cursor(data)
            entries = _Cursor(outer.vector(2))
            if not outer.done:
                raise ValueError("bytes after the server_name list")
            names = []
            while not entries.done:
                name_type, value = entries.number(1), entries.vector(2)
                if name_type != 0:
                    raise ValueError(f"a server_name of type {name_type}")
                names.append(value)
            if len(names) != 1:
                raise ValueError(f"{len(names)} host names in server_name")
            try:
                name = names[0].decode("ascii")
            except UnicodeDecodeError:
                raise ValueError("a server_name that is not ASCII") from None
    return name


class HelloReader:
    """Reassembles TLS handshake records until one whole ClientHello (hostile input: only
    handshake records, of legal sizes, whose first message is a ClientHello, all of it within
    `HELLO_LIMIT` bytes)."""

    def __init__(self) -> None:
        #: Every byte fed, to forward as it came once the name is judged.
        self.raw = bytearray()
        self._pos = self.end = 0
        self._handshake = bytearray()

    def feed(self, data: bytes) -> bytes | None:
        """Add bytes; the ClientHello body once whole, else None. ValueError if not TLS."""
        self.raw += data
        if self.raw and self.raw[:1] != b"\x16":
            raise ValueError("not a TLS handshake")
        while len(self.raw) - self._pos >= 5:
            record = self.raw[self._pos:self._pos + 5]
            length = int.from_bytes(record[3:5], "big")
            if record[0] != 0x16 or record[1] != 3 or not 0 < length <= 16384 + 2048:
                raise ValueError("not a TLS handshake record")
            if len(self.raw) - self._pos - 5 < length:
                break
            self._handshake += self.raw[self._pos + 5:self._pos + 5 + length]
            self._pos += 5 + length
            #: Where the records read so far end (after the ClientHello's, once it is whole).
            self.end = self._pos
            if len(self._handshake) >= 4:
                if self._handshake[0] != 1:
                    raise ValueError("the first handshake message is not a ClientHello")
                whole = 4 + int.from_bytes(self._handshake[1:4], "big")
                if whole > HELLO_LIMIT or len(self._handshake) > whole:
                    raise ValueError("a ClientHello too long, or followed by more handshake")
                if len(self._handshake) == whole:
                    return bytes(self._handshake[4:])
        if len(self.raw) > HELLO_LIMIT:
            raise ValueError(f"no whole ClientHello in {HELLO_LIMIT} bytes")
        return None


def check_server_name(name: str | None, host: str) -> Decision:
    """The ClientHello's server name must be the tunnel's: ``host``, or none for an address.
    It must be plain ASCII (`HOST_NAME`) as sent: it is forwarded unchanged, so a name that
    equals ``host`` only once stripped or lower-cased differently is refused."""
    if name is not None and not HOST_NAME.fullmatch(name):
        return Decision(False, "sni", f"the ClientHello names {name[:100]!r}, which is not a "
                        "plain host name (ASCII letters, digits, '.', '-', '_')")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        if name is None:
            return Decision(True)
        return Decision(False, "sni", f"the ClientHello names {name[:100]!r}; a tunnel to "
                        f"the address {host} may name no server")
    if name is None:
        return Decision(False, "sni", f"the ClientHello names no server (SNI); a tunnel to "
                        f"{host} must name {host}")
    try:
        same = normalize_host(name) == normalize_host(host)
    except ValueError:
        same = False
    if not same:
        return Decision(False, "sni", f"the ClientHello names {name[:100]!r}, not {host}")
    return Decision(True)
