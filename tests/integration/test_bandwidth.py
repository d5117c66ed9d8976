"""Bandwidth limits, measured: a sandbox sends to and receives from test containers on a
network the test makes (internal), and the rate comes out within 25 % of the limit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sandbox import (
    IMAGE_PYTHON,
    NetworkConfig,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
)
from tests.conftest import LABEL, docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

RATE = 256 * 1024  # bytes per second
SIZE = 2 * 1024 * 1024  # 8 s at the limit; unlimited it takes milliseconds

PEER = r"""
import socket, sys
mode, size = sys.argv[1], int(sys.argv[2])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 9000)); s.listen()
while True:
    c, _ = s.accept()
    if mode == "sink":
        n = 0
        while d := c.recv(65536):
            n += len(d)
        c.sendall(str(n).encode())
    else:
        c.sendall(b"x" * size)
    c.close()
"""

PROBE = r"""
import socket, sys, time
host, mode, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.create_connection((host, 9000), timeout=60)
start = time.monotonic()
if mode == "up":
    s.sendall(b"x" * size); s.shutdown(socket.SHUT_WR); got = int(s.recv(100))
else:
    got = 0
    while d := s.recv(65536):
        got += len(d)
print(got, time.monotonic() - start)
"""


@pytest.fixture(scope="module")
def peers() -> Iterator[str]:
    """An internal network with a sink (``sink``) and a source (``source``) on port 9000."""
    name = f"bandwidth-test-{uuid.uuid4().hex[:8]}"
    docker_cli("network", "create", "--internal", "--label", LABEL, name)
    made: list[str] = []
    try:
        for alias, mode in (("sink", "sink"), ("source", "source")):
            made.append(docker_cli("run", "-d", "--network", name, "--label", LABEL,
                                   "--network-alias", alias, IMAGE_PYTHON, "python3", "-c",
                                   PEER, mode, str(SIZE)).strip())
        yield name
    finally:
        if made:
            docker_cli("rm", "-f", *made, check=False)
        docker_cli("network", "rm", name, check=False)


async def _rate(sb: Sandbox, host: str, mode: str) -> float:
    r = await sb.execute_command(["python3", "-c", PROBE, host, mode, str(SIZE)])
    assert r.success, r.stderr
    got, seconds = r.stdout.split()
    assert int(got) == SIZE
    return int(got) / float(seconds)


async def test_egress_and_ingress_limits_hold_within_a_quarter(peers: str) -> None:
    cfg = SandboxConfig(
        image=IMAGE_PYTHON, security=SecurityPolicy(allow_networking=True,
                                                    isolate_network=False),
        # Both places: the NetworkConfig field one way, the ResourceLimits one the other.
        network=NetworkConfig(isolated=False, bridge=peers, egress_limit=RATE),
        resources=ResourceLimits(network_in_limit=RATE))
    async with Sandbox(cfg) as sb:
        up = await _rate(sb, "sink", "up")
        down = await _rate(sb, "source", "down")
        # The sandbox cannot lift them: no NET_ADMIN (bit 12) in its capabilities.
        caps = await sb.execute_command("grep CapEff /proc/self/status")
        assert not int(caps.stdout.split()[1], 16) & (1 << 12)
    assert 0.75 <= up / RATE <= 1.25, up / RATE
    assert 0.75 <= down / RATE <= 1.25, down / RATE


async def test_without_limits_it_is_much_faster(peers: str) -> None:
    """The same transfer unlimited: so the limited one measured the limit, not the setup."""
    cfg = SandboxConfig(image=IMAGE_PYTHON, security=SecurityPolicy(
        allow_networking=True, isolate_network=False),
        network=NetworkConfig(isolated=False, bridge=peers))
    async with Sandbox(cfg) as sb:
        assert await _rate(sb, "sink", "up") > 4 * RATE
        assert await _rate(sb, "source", "down") > 4 * RATE
