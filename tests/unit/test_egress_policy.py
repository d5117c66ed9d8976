"""The egress policy (pure), the proxy on loopback, its DNS refuser, and the create plan's part."""

from __future__ import annotations

import asyncio
import ipaddress
import random
import struct
from collections.abc import AsyncIterator, Mapping
from typing import Any

import attrs
import pytest
import pytest_asyncio

from sandbox import EgressStats
from sandbox._egress import EgressPolicy, is_public, merged_policy, normalize_host
from sandbox._egress_proxy import EgressProxy, refuse_query
from sandbox._egress_wire import check_server_name, split_host_port
from sandbox._errors import ConfigError, SandboxInitFailed
from sandbox._models import NetworkConfig, PortMapping, SecurityPolicy
from tests.unit._plan import ENGINE, NETWORKED, OPEN, plan

# --- policy ---------------------------------------------------------------------------------


def policy(**fields: Any) -> EgressPolicy:
    return EgressPolicy.from_fields(**fields)


def test_exact_and_wildcard_names() -> None:
    p = policy(allowed_hosts=["PyPI.org.", "*.pythonhosted.org"])
    assert p.check_name("pypi.org", 443).allowed
    assert p.check_name("files.pythonhosted.org", 443).allowed
    # "*.domain" is every name below it, not the domain itself, nor a look-alike suffix.
    assert p.check_name("pythonhosted.org", 443).rule == "allowed_hosts"
    assert p.check_name("evilpythonhosted.org", 443).rule == "allowed_hosts"
    assert p.check_name("pypi.org.evil.test", 443).rule == "allowed_hosts"
    assert "matches no allowed_hosts entry" in p.check_name("x.test", 443).reason


def test_blocked_wins_and_ports_first() -> None:
    p = policy(allowed_hosts=["*"], blocked_hosts=["*.evil.test"], allowed_ports=[8443])
    assert p.check_name("a.evil.test", 8443).rule == "blocked_hosts"
    assert p.check_name("good.test", 443).rule == "allowed_ports"
    assert "port 443 is not in allowed_ports (8443)" in p.check_name("good.test", 443).reason
    assert p.check_name("good.test", 8443).allowed


def test_default_ports_are_80_and_443() -> None:
    assert policy(allowed_hosts=["a.test"]).allowed_ports == (80, 443)


@pytest.mark.parametrize("address", [
    "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "::1", "fd00::1", "fe80::1", "::ffff:10.0.0.1", "::ffff:169.254.169.254",
    "224.0.0.1", "240.0.0.1",
])
def test_non_public_addresses_refused_unless_listed(address: str) -> None:
    p = policy(allowed_hosts=["api.test"])
    decision = p.check_addresses("api.test", [address])
    assert (decision.allowed, decision.rule) == (False, "private_address")
    listed = policy(allowed_hosts=["api.test", address])
    assert listed.check_addresses("api.test", [address]).allowed


def test_every_resolved_address_must_pass() -> None:
    """A name resolving to a public and a private address is refused (no rebinding by order)."""
    p = policy(allowed_hosts=["api.test"])
    assert p.check_addresses("api.test", ["93.184.216.34"]).allowed
    assert p.check_addresses("api.test", ["93.184.216.34", "10.0.0.1"]).rule == \
        "private_address"
    assert p.check_addresses("api.test", []).rule == "dns"


def test_blocked_address_refused_by_resolution() -> None:
    p = policy(allowed_hosts=["*"], blocked_hosts=["93.184.216.34"])
    assert p.check_addresses("x.test", ["93.184.216.34"]).rule == "blocked_hosts"


def test_is_public() -> None:
    assert is_public(ipaddress.ip_address("8.8.8.8"))
    assert not is_public(ipaddress.ip_address("100.127.255.255"))


#: IPv4 addresses that must never be reached, one per special-purpose block (and edges).
PRIVATE_V4 = [
    "0.0.0.0", "0.1.2.3", "10.0.0.1", "10.255.255.255", "100.64.0.1", "100.127.255.254",
    "127.0.0.1", "127.255.255.254", "169.254.169.254", "169.254.0.1", "172.16.0.1",
    "172.31.255.255", "192.0.0.8", "192.0.2.1", "192.88.99.1", "192.168.0.1",
    "198.18.0.1", "198.19.255.255", "198.51.100.7", "203.0.113.9", "224.0.0.1",
    "239.255.255.250", "240.0.0.1", "255.255.255.255",
]
PUBLIC_V4 = ["8.8.8.8", "1.1.1.1", "93.184.216.34", "151.101.1.69", "100.63.255.255",
             "100.128.0.1", "172.15.255.255", "172.32.0.1", "223.255.255.1"]


def _spellings(v4: str) -> dict[str, list[str]]:
    """IPv6 addresses that carry `v4`, in many spellings, by how they carry it."""
    n = int(ipaddress.IPv4Address(v4))
    hi, lo = f"{n >> 16:x}", f"{n & 0xFFFF:x}"
    return {
        "mapped": [f"::ffff:{v4}", f"::FFFF:{hi}:{lo}", f"0:0:0:0:0:ffff:{v4}",
                   f"0000:0000:0000:0000:0000:FFFF:{int(hi, 16):04x}:{int(lo, 16):04X}",
                   f"[::ffff:{v4}]"],
        "compatible": [f"::{v4}", f"::{hi}:{lo}", f"0:0:0:0:0:0:{v4}",
                       f"0000:0000:0000:0000:0000:0000:{int(hi, 16):04x}:{int(lo, 16):04x}"],
        "translated": [f"::ffff:0:{v4}", f"0:0:0:0:ffff:0:{hi}:{lo}"],
        "nat64": [f"64:ff9b::{v4}", f"64:FF9B::{hi}:{lo}", f"0064:ff9b:0000:0000:0000:0000:"
                  f"{int(hi, 16):04x}:{int(lo, 16):04x}", f"64:ff9b:0:0:0:0:{v4}"],
        "6to4": [f"2002:{hi}:{lo}::", f"2002:{hi}:{lo}::1", f"2002:{hi}:{lo}:ffff:1:2:3:4",
                 f"2002:{int(hi, 16):04X}:{int(lo, 16):04x}:0::5"],
    }


@pytest.mark.parametrize("v4", PRIVATE_V4)
def test_ipv6_carrying_a_private_ipv4_is_refused_in_every_spelling(v4: str) -> None:
    """The attacker's spellings of a private IPv4 (issue 26: ``::169.254.169.254``,
    ``::127.0.0.1`` and ``64:ff9b::<private>`` were allowed), whatever the resolver returns."""
    p = policy(allowed_hosts=["api.test"])
    assert not is_public(ipaddress.ip_address(v4))
    for how, texts in _spellings(v4).items():
        for text in texts:
            assert p.check_addresses("api.test", [text]).rule == "private_address", (how, text)
            assert not is_public(ipaddress.ip_address(text.strip("[]"))), (how, text)


@pytest.mark.parametrize("v4", PUBLIC_V4)
def test_ipv6_carrying_a_public_ipv4_is_judged_by_it(v4: str) -> None:
    assert is_public(ipaddress.ip_address(v4))
    for how, texts in _spellings(v4).items():
        for text in texts:
            assert is_public(ipaddress.ip_address(text.strip("[]"))), (how, text)


@pytest.mark.parametrize("address", [
    "64:ff9b:1::808:808", "64:ff9b:1:ffff::1",  # local-use NAT64: IPv4 at any length
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo (public server and client)
    "2001::1", "2001:db8::1", "3fff::1", "5f00::1", "100::1", "fec0::1", "fe80::1%eth0",
    "ff02::1", "fc00::1", "fd12:3456::1", "::", "::1",
])
def test_reserved_ipv6_refused(address: str) -> None:
    assert not is_public(ipaddress.ip_address(address))
    assert policy(allowed_hosts=["api.test"]).check_addresses(
        "api.test", [address]).rule == "private_address"


def test_every_ipv6_in_a_special_block_is_refused() -> None:
    """Sampled from each block: whatever Python's own lists say, none is public."""
    rng = random.Random(26)
    for block in ["::ffff:0:0/104", "::/104", "64:ff9b::/104", "64:ff9b:1::/48", "2001::/23",
                  "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "2002:a00::/24",
                  "2002:7f00::/24", "2002:a9fe::/32", "64:ff9b::a00:0/104"]:
        net = ipaddress.ip_network(block)
        for _ in range(200):
            address = net[rng.randrange(net.num_addresses)]
            assert not is_public(address), address


def test_global_ipv6_is_public() -> None:
    for text in ["2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001::1"]:
        assert is_public(ipaddress.ip_address(text))


@pytest.mark.parametrize("bad", ["", "a b", "-a.test", "a..test", "*", "x" * 64 + ".test"])
def test_bad_host_names(bad: str) -> None:
    with pytest.raises(ValueError, match="not a host name"):
        normalize_host(bad)


@pytest.mark.parametrize("bad", ["a b", "*.", "**.a", "a.*.test", "http://a.test"])
def test_bad_patterns_name_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match=r"allowed_hosts: .* is not a host name"):
        policy(allowed_hosts=[bad])


def test_both_config_places_make_one_policy() -> None:
    merged = merged_policy(
        SecurityPolicy(allowed_hosts=("a.test",), allowed_ports=(8080,)),
        NetworkConfig(allowed_hosts=("b.test",), blocked_hosts=("c.test",)))
    assert merged is not None
    assert merged.allowed_hosts == ("a.test", "b.test")
    assert merged.blocked_hosts == ("c.test",)
    assert merged.allowed_ports == (8080,)
    assert merged_policy(SecurityPolicy(), NetworkConfig()) is None


def test_blocked_or_ports_without_allowed_hosts_refused() -> None:
    with pytest.raises(ValueError, match=r"^security\.blocked_hosts: given without allowed_hos"):
        merged_policy(SecurityPolicy(blocked_hosts=("x.test",)), NetworkConfig())


def test_policy_json_round_trip() -> None:
    p = policy(allowed_hosts=["a.test", "10.0.0.1"], blocked_hosts=["b.test"])
    again = EgressPolicy.from_json(p.to_json())
    assert again == p
    assert again.check_addresses("a.test", ["10.0.0.1"]).allowed


def test_stats_counts() -> None:
    stats = EgressStats(enforced=True, refused=3, refused_by_rule={"dns": 1, "allowed_hosts": 2})
    assert stats.refused_by_rule == (("allowed_hosts", 2), ("dns", 1))
    assert stats.refused_for("allowed_hosts") == 2
    assert stats.refused_for("blocked_hosts") == 0
    assert hash(stats) == hash(attrs.evolve(stats))


# --- the proxy on loopback ------------------------------------------------------------------


async def _origin() -> tuple[asyncio.Server, int, list[bytes]]:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


async def _proxy(p: EgressPolicy, events: list[Mapping[str, Any]],
                 subnet: str = "") -> tuple[asyncio.Server, int]:
    proxy = EgressProxy(p, client_subnet=subnet, emit=events.append)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _ask(port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    try:
        data = await asyncio.wait_for(reader.read(65536), 10)
    except ConnectionResetError:
        data = b""  # cut with the request unread
    writer.close()
    return data


@pytest_asyncio.fixture
async def origin() -> AsyncIterator[tuple[int, list[bytes]]]:
    server, port, seen = await _origin()
    async with server:
        yield port, seen


@pytest.mark.asyncio
async def test_plain_http_forwarded_in_origin_form(origin: tuple[int, list[bytes]]) -> None:
    port, seen = origin
    events: list[Mapping[str, Any]] = []
    server, proxy_port = await _proxy(policy(allowed_hosts=["127.0.0.1"],
                                             allowed_ports=[port]), events)
    async with server:
        answer = await _ask(proxy_port, f"GET http://127.0.0.1:{port}/x?y=1 HTTP/1.1\r\n"
                            f"Host: 127.0.0.1:{port}\r\nProxy-Authorization: secret\r\n"
                            "Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\n\r\n".encode())
    assert answer.endswith(b"hello")
    assert seen[0].startswith(b"GET /x?y=1 HTTP/1.1\r\n")
    assert b"Proxy-Authorization" not in seen[0] and b"Connection: close" in seen[0]
    assert b"X-Hop" not in seen[0] and b"keep-alive" not in seen[0]
    assert seen[0].count(b"Host:") == 1 and f"Host: 127.0.0.1:{port}\r\n".encode() in seen[0]
    assert events == [{"decision": "allowed", "method": "GET", "host": "127.0.0.1",
                       "port": port, "address": "127.0.0.1"}]


@pytest.mark.asyncio
async def test_connect_tunnels(origin: tuple[int, list[bytes]]) -> None:
    port, _ = origin
    events: list[Mapping[str, Any]] = []
    server, proxy_port = await _proxy(policy(allowed_hosts=["127.0.0.1"],
                                             allowed_ports=[port]), events)
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
        writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
        assert await reader.readuntil(b"\r\n\r\n") == \
            b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"GET / HTTP/1.1\r\n\r\n")
        assert (await asyncio.wait_for(reader.read(65536), 10)).endswith(b"hello")
        writer.close()


@pytest.mark.asyncio
async def test_listed_name_resolving_to_loopback_refused(origin: tuple[int, list[bytes]]
                                                        ) -> None:
    """``localhost`` is listed, but it resolves to a non-public address that is not."""
    port, seen = origin
    events: list[Mapping[str, Any]] = []
    server, proxy_port = await _proxy(policy(allowed_hosts=["localhost"],
                                             allowed_ports=[port]), events)
    async with server:
        answer = await _ask(proxy_port, f"CONNECT localhost:{port} HTTP/1.1\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 403 Forbidden by sandbox egress policy "
                             b"(private_address): localhost resolves to ")
    assert b"X-Sandbox-Egress-Rule: private_address" in answer
    assert seen == []
    assert events[0]["decision"] == "refused" and events[0]["rule"] == "private_address"


@pytest.mark.parametrize(("request_line", "status"), [
    (b"GET /relative HTTP/1.1", b"400"),
    (b"GET https://a.test/ HTTP/1.1", b"400"),
    (b"CONNECT a.test:99999 HTTP/1.1", b"400"),
    (b"CONNECT unlisted.test:443 HTTP/1.1", b"403"),
    (b"GET http://a.test:25/ HTTP/1.1", b"403"),
    (b"CONNECT a.test:22 HTTP/1.1", b"403 Forbidden by sandbox egress policy (allowed_ports)"),
    (b"BREW", b"400"),
])
@pytest.mark.asyncio
async def test_bad_or_refused_requests(request_line: bytes, status: bytes) -> None:
    events: list[Mapping[str, Any]] = []
    server, proxy_port = await _proxy(policy(allowed_hosts=["a.test"]), events)
    async with server:
        answer = await _ask(proxy_port, request_line + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 " + status)


@pytest.mark.asyncio
async def test_head_too_long_is_cut() -> None:
    events: list[Mapping[str, Any]] = []
    proxy = EgressProxy(policy(allowed_hosts=["a.test"]), emit=events.append)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, limit=1024)
    async with server:
        answer = await _ask(server.sockets[0].getsockname()[1],
                            b"GET http://a.test/ HTTP/1.1\r\nX: " + b"a" * 4096 + b"\r\n\r\n")
    assert answer == b"" and events == []


@pytest.mark.asyncio
async def test_clients_off_the_sandbox_network_are_cut(origin: tuple[int, list[bytes]]) -> None:
    port, seen = origin
    events: list[Mapping[str, Any]] = []
    server, proxy_port = await _proxy(policy(allowed_hosts=["127.0.0.1"],
                                             allowed_ports=[port]), events,
                                      subnet="10.99.0.0/16")
    async with server:
        answer = await _ask(proxy_port, f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
    assert answer == b"" and seen == [] and events == []


def test_dns_queries_are_refused() -> None:
    question = b"\x07example\x03com\x00\x00\x01\x00\x01"
    query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + question
    answer = refuse_query(query)
    assert answer is not None
    ident, flags, qd, an, ns, ar = struct.unpack("!HHHHHH", answer[:12])
    assert (ident, flags & 0x8000, flags & 0xF, qd, an, ns, ar) == (0x1234, 0x8000, 5, 1, 0, 0, 0)
    assert flags & 0x0100  # RD kept
    assert answer[12:] == question
    assert refuse_query(b"\x00") is None
    assert refuse_query(answer) is None  # an answer is not a query
    assert refuse_query(query[:-3]) is None  # torn question


# --- the create plan ------------------------------------------------------------------------


def test_plan_carries_the_policy() -> None:
    net = attrs.evolve(NETWORKED, bridge="outside", allowed_hosts=("a.test",))
    p = plan(network=net, security=attrs.evolve(OPEN, blocked_hosts=("b.a.test",)))
    assert p.egress is not None and p.egress.blocked_hosts == ("b.a.test",)
    assert not p.needs_network


def test_plan_without_hosts_has_no_policy() -> None:
    assert plan(network=NETWORKED, security=OPEN).egress is None


@pytest.mark.parametrize("where", ["network", "security"])
def test_hosts_on_an_isolated_sandbox_refused(where: str) -> None:
    config: dict[str, Any] = {where: (NetworkConfig if where == "network" else SecurityPolicy)(
        allowed_hosts=("a.test",))}
    with pytest.raises(SandboxInitFailed, match="an isolated sandbox reaches no host"):
        plan(**config)


@pytest.mark.parametrize("conflict", [
    {"http_proxy": "http://p:1"}, {"dns_servers": ("1.1.1.1",)},
    {"port_mappings": (PortMapping(container_port=80),)},
])
def test_egress_conflicts_refused(conflict: dict[str, Any]) -> None:
    net = attrs.evolve(NETWORKED, allowed_hosts=("a.test",), **conflict)
    with pytest.raises(SandboxInitFailed, match="cannot go with an egress policy"):
        plan(network=net, security=OPEN)


def test_egress_refused_on_runtime_without_network() -> None:
    engine = attrs.evolve(ENGINE, runtime_args={"runsc": ("--network=none",)})
    net = attrs.evolve(NETWORKED, allowed_hosts=("a.test",))
    with pytest.raises(SandboxInitFailed, match="--network=none"):
        plan(engine, network=net, security=OPEN, runtime="runsc")


def test_bad_pattern_is_a_config_error() -> None:
    net = attrs.evolve(NETWORKED, allowed_hosts=("a b",))
    with pytest.raises(ConfigError, match="allowed_hosts: 'a b' is not a host name"):
        plan(network=net, security=OPEN)


# --- bandwidth ------------------------------------------------------------------------------


def test_bandwidth_fields_make_tc_commands() -> None:
    from sandbox._models import ResourceLimits, SandboxConfig
    from sandbox.docker._shaping import plan_shaping

    shaping = plan_shaping(SandboxConfig(network=NetworkConfig(egress_limit=100_000),
                                         resources=ResourceLimits(network_in_limit=50_000)))
    assert shaping is not None
    assert (shaping.egress, shaping.ingress) == (100_000, 50_000)
    assert shaping.tbf("eth0", shaping.egress) == [
        "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", "800000bit", "burst",
        "16384", "latency", "400ms"]
    assert shaping.tbf("veth1", 10_000_000)[9] == "1000000"  # burst: a tenth of a second
    assert plan_shaping(SandboxConfig()) is None


def test_bandwidth_on_an_isolated_sandbox_refused() -> None:
    from sandbox._models import ResourceLimits

    with pytest.raises(SandboxInitFailed, match=r"^network\.egress_limit, resources\.network_in_"
                                                r"limit: an isolated sandbox has no network"):
        plan(network=NetworkConfig(egress_limit=10),
             resources=ResourceLimits(network_in_limit=20))


def test_both_bandwidth_fields_must_agree() -> None:
    from sandbox._models import ResourceLimits

    with pytest.raises(ConfigError, match=r"network.egress_limit \(10\) and "
                                          r"resources.network_out_limit \(20\)"):
        plan(network=attrs.evolve(NETWORKED, egress_limit=10), security=OPEN,
             resources=ResourceLimits(network_out_limit=20))
    same = plan(network=attrs.evolve(NETWORKED, egress_limit=10), security=OPEN,
                resources=ResourceLimits(network_out_limit=10))
    assert same.body


def test_devices_of_a_namespace() -> None:
    from sandbox.docker._shaping import _devices

    net_dev = ("Inter-|   Receive\n face |bytes\n    lo: 0 0\n  eth0: 1 2\n"
               "  eth1: 3 4\n")
    assert _devices(net_dev) == ["eth0", "eth1"]


def test_a_backend_without_a_proxy_reports_nothing_enforced() -> None:
    from sandbox import Sandbox
    from sandbox.testing import FakeBackend

    assert Sandbox(backend=FakeBackend()).egress_stats() == EgressStats()


# -- host:port as a client spells it (sandbox/_egress_wire.py) ------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("a.test", ("a.test", 443)), ("a.test:8443", ("a.test", 8443)),
    ("[2606:4700::1]", ("2606:4700::1", 443)), ("[2606:4700::1]:8443", ("2606:4700::1", 8443)),
    ("127.0.0.1:1", ("127.0.0.1", 1)), ("a.test:65535", ("a.test", 65535)),
])
def test_split_host_port_reads_plain_spellings(text: str, expected: tuple[str, int]) -> None:
    assert split_host_port(text, 443) == expected


@pytest.mark.parametrize("text", [
    "[2606:4700::1]x:8443", "[::1]junk", "[::1]:", "[::1", "[a.test]:443", "[::1%eth0]:443",
    "a.test:", "a.test:0", "a.test:65536", "a.test:123456", "a.test:+443", "a.test:4_43",
    "a.test:\u0664\u0664\u0663", "a.test:\uff14\uff14\uff13", "a.test: 443", "a.test:443 ",
    " a.test:443", "\ta.test", "a.test\x1f", "a.t\xe9st", "", ":443",
])
def test_split_host_port_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError):
        split_host_port(text, 443)


@pytest.mark.parametrize("name", [" localhost", "\tlocalhost", "localhost\x1f", "LOCALHOST\x0c",
                                  "localhost\xa0", "local\u0131host", "localhost."[:-1] + "\n"])
def test_server_name_must_be_plain_as_sent(name: str) -> None:
    decision = check_server_name(name, "localhost")
    assert (decision.allowed, decision.rule) == (False, "sni")
    assert check_server_name("LocalHost", "localhost").allowed
