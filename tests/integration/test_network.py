"""Networks in a real container: none by default, own or named networks, DNS, proxies, ports.

Every address contacted is loopback or a container these tests create; every network the tests
make themselves is internal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator

import anyio
import attrs
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    ConfigError,
    NetworkConfig,
    PortMapping,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
)
from tests.conftest import LABEL, docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

OPEN = SecurityPolicy(allow_networking=True, isolate_network=False)

# A one-answer DNS server: logs each query name and answers every A query with 10.1.2.3.
DNS_PY = r"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 53))
while True:
    q, a = s.recvfrom(512)
    i = 12
    while q[i]:
        i += 1 + q[i]
    qtype = q[i + 1:i + 3]
    ans = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04\x0a\x01\x02\x03"
    ans = ans if qtype == b"\x00\x01" else b""
    count = b"\x00\x01" if ans else b"\x00\x00"
    s.sendto(q[:2] + b"\x81\x80" + q[4:6] + count + b"\x00\x00\x00\x00" + q[12:i + 5] + ans, a)
"""

UDP_ECHO_PY = r"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", 9090))
print("ready", flush=True)
while True:
    d, a = s.recvfrom(2048); s.sendto(b"echo:" + d, a)
"""


def sdk_networks(sandbox_id: str | None = None) -> list[dict[str, str]]:
    args = ["network", "ls", "--filter", f"label={LABEL}", "--format", "{{json .}}"]
    if sandbox_id:
        args[2:2] = ["--filter", f"label=io.sandbox.id={sandbox_id}"]
    return [json.loads(line) for line in docker_cli(*args).splitlines() if line.strip()]


def network_inspect(name: str) -> dict[str, object]:
    data: list[dict[str, object]] = json.loads(docker_cli("network", "inspect", name))
    return data[0]


async def sh(sb: Sandbox, script: str) -> str:
    r = await sb.execute_command(script)
    assert r.success, (script, r.stderr)
    return r.stdout


async def test_isolated_by_default_has_only_loopback() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        assert (await sh(sb, "ls /sys/class/net")).split() == ["lo"]
        info = await sb.get_info()
        assert info.ip_address == "" and info.mac_address == ""
        assert sdk_networks(sb.id) == []


async def test_dns_and_proxies_without_a_network() -> None:
    net = NetworkConfig(dns_servers=["10.9.9.9"], dns_search=["example.test"],
                        http_proxy="http://proxy.invalid:3128",
                        https_proxy="http://proxy.invalid:3129", no_proxy="localhost,.internal")
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, network=net)) as sb:
        resolv = await sh(sb, "cat /etc/resolv.conf")
        assert "nameserver 10.9.9.9" in resolv and "search example.test" in resolv
        env = dict(line.split("=", 1) for line in (await sh(sb, "env")).splitlines()
                   if "=" in line)
        for name, value in (("http_proxy", net.http_proxy), ("https_proxy", net.https_proxy),
                            ("no_proxy", net.no_proxy)):
            assert env[name] == value and env[name.upper()] == value, name
        # also for a command run as another user with its own environment
        r = await sb.execute_command(["sh", "-c", "echo $HTTPS_PROXY"])
        assert r.stdout.strip() == net.https_proxy


async def test_networked_sandbox_gets_its_own_internal_network() -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=OPEN,
                        network=NetworkConfig(isolated=False))
    async with Sandbox(cfg) as sb:
        assert (await sh(sb, "ls /sys/class/net")).split() == ["eth0", "lo"]
        nets = sdk_networks(sb.id)
        assert len(nets) == 1
        detail = network_inspect(nets[0]["ID"])
        assert detail["Internal"] is True
        labels = detail["Labels"]
        assert isinstance(labels, dict)
        assert labels["io.sandbox.managed-by"] == "sandbox-sdk"
        assert labels["io.sandbox.id"] == sb.id
        info = await sb.get_info()
        addr = (await sh(sb, "ip -4 -o addr show eth0")).split()[3].split("/")[0]
        mac = (await sh(sb, "cat /sys/class/net/eth0/address")).strip()
        assert info.ip_address == addr and info.mac_address == mac
        assert info.hostname and (await sh(sb, "hostname")).strip() == info.hostname
    assert sdk_networks(sb.id) == []


@pytest.fixture
def dns_network() -> Iterator[tuple[str, str]]:
    """An internal network of the test's own with a fake DNS server on it: (name, server ip)."""
    name = f"sandbox-test-{uuid.uuid4().hex[:8]}"
    docker_cli("network", "create", "--internal", "--label", LABEL, name)
    try:
        cid = docker_cli("run", "-d", "--rm", "--network", name, "--label", LABEL,
                         IMAGE_PYTHON, "python3", "-c", DNS_PY).strip()
        try:
            ip = docker_cli("inspect", "--format",
                            f'{{{{(index .NetworkSettings.Networks "{name}").IPAddress}}}}',
                            cid).strip()
            yield name, ip
        finally:
            docker_cli("rm", "-f", cid, check=False)
    finally:
        docker_cli("network", "rm", name, check=False)


async def test_named_network_and_dns_servers(dns_network: tuple[str, str]) -> None:
    name, dns_ip = dns_network
    net = NetworkConfig(isolated=False, bridge=name, dns_servers=[dns_ip],
                        dns_search=["example.test"])
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, security=OPEN, network=net)) as sb:
        assert sdk_networks(sb.id) == []  # joined the named network, made none
        resolv = await sh(sb, "cat /etc/resolv.conf")
        # On a user network the engine's resolver (127.0.0.11) forwards to dns_servers.
        assert "search example.test" in resolv
        out = await sh(sb, "nslookup short-name")
        assert "short-name.example.test" in out and "10.1.2.3" in out
    assert network_inspect(name)["Name"] == name  # a named network is never removed


async def test_missing_named_network_is_named() -> None:
    net = NetworkConfig(isolated=False, bridge="no-such-network-xyz")
    with pytest.raises(SandboxInitFailed, match="no-such-network-xyz"):
        async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, security=OPEN, network=net)):
            pass


async def _http_get(port: int, path: str) -> bytes:
    """GET through the published port, retrying while the server inside starts."""
    with anyio.fail_after(10):
        while True:
            # docker-proxy accepts at once and resets while nothing listens inside yet.
            with contextlib.suppress(OSError):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                try:
                    writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
                    await writer.drain()
                    data = await reader.read()
                finally:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
                if data:
                    return data
            await anyio.sleep(0.1)


class _Echo(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.replies: asyncio.Queue[bytes] = asyncio.Queue()

    def datagram_received(self, data: bytes, addr: tuple[str | object, ...]) -> None:
        self.replies.put_nowait(data)


async def _udp_roundtrip(port: int, payload: bytes) -> bytes:
    loop = asyncio.get_running_loop()
    transport, proto = await loop.create_datagram_endpoint(
        _Echo, remote_addr=("127.0.0.1", port))
    try:
        with anyio.fail_after(10):
            while True:
                transport.sendto(payload)
                with anyio.move_on_after(0.3):
                    return await proto.replies.get()
    finally:
        transport.close()


async def test_tcp_port_mapping_reaches_httpd_inside() -> None:
    net = NetworkConfig(isolated=False, port_mappings=[PortMapping(container_port=8080)])
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=OPEN, network=net)
    async with Sandbox(cfg) as sb:
        await sb.write_file("/tmp/www/index.html", "hello from inside\n")
        nets = sdk_networks(sb.id)
        assert len(nets) == 1
        assert network_inspect(nets[0]["ID"])["Internal"] is False  # publishing needs it
        port = await sb.backend.published_port(8080)
        assert port > 0
        async with sb.stream_command(["httpd", "-f", "-p", "8080", "-h", "/tmp/www"]):
            reply = await _http_get(port, "/index.html")
        assert reply.startswith(b"HTTP/1.") and reply.endswith(b"hello from inside\n")
        with pytest.raises(ConfigError, match="9999/tcp"):
            await sb.backend.published_port(9999)
    assert sdk_networks(sb.id) == []


async def test_udp_port_mapping_echoes() -> None:
    net = NetworkConfig(isolated=False, port_mappings=[
        PortMapping(container_port=9090, protocol="udp")])
    cfg = SandboxConfig(image=IMAGE_PYTHON, security=OPEN, network=net)
    async with Sandbox(cfg) as sb:
        port = await sb.backend.published_port(9090, "udp")
        async with sb.stream_command(["python3", "-c", UDP_ECHO_PY]) as proc:
            async for chunk in proc:
                if b"ready" in chunk.data:
                    break
            assert await _udp_roundtrip(port, b"ping") == b"echo:ping"
    assert sdk_networks(sb.id) == []


@pytest.mark.parametrize(
    ("net", "message"),
    [
        (NetworkConfig(isolated=False, allowed_hosts=["example.invalid"]), "allowed_hosts"),
        (NetworkConfig(blocked_hosts=["x"]), "blocked_hosts"),
        (NetworkConfig(isolated=False, allowed_ports=[443]), "allowed_ports"),
        (NetworkConfig(ingress_limit=1000, egress_limit=1000), "ingress_limit.*egress_limit"),
        (NetworkConfig(port_mappings=[PortMapping(container_port=80)]), "port_mappings"),
    ],
)
async def test_unsupported_settings_are_refused(net: NetworkConfig, message: str) -> None:
    before = sdk_networks()
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=OPEN, network=net)
    with pytest.raises(SandboxInitFailed, match=message):
        async with Sandbox(cfg):
            pass
    assert sdk_networks() == before


async def test_security_policy_overrides_network_config() -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, network=NetworkConfig(isolated=False))
    for security in (SecurityPolicy(allow_networking=False, isolate_network=False),
                     SecurityPolicy(allow_networking=True, isolate_network=True)):
        async with Sandbox(attrs.evolve(cfg, security=security)) as sb:
            assert (await sh(sb, "ls /sys/class/net")).split() == ["lo"]
            assert sdk_networks(sb.id) == []
