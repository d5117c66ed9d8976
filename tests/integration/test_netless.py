"""A sandbox without a network in a bare namespace (``Config.NetworkDisabled``, `_netless`):
observed in real containers to hold what a ``NetworkMode: none`` one held: only ``lo``, no way
out (not even to a container on a network of the test's own, internal), localhost resolving
to 127.0.0.1 first (Docker's /etc/hosts, IPv6 off), the engine's hostname; and the body is the
one expected (inspect). Where it does not apply (a read-only root) the sandbox keeps
``NetworkMode: none`` alone and localhost still works."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    NetworkConfig,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
    remove_checkpoint,
)
from sandbox._single_flight import SingleFlight
from sandbox.docker import _gateway, _workdir
from sandbox.docker._netless import HOSTS
from tests.conftest import LABEL, derived_image, docker_cli
from tests.integration.test_create_fast import Calls

#: The engine calls that write the working dir's owner and /etc/hosts.
HAND_OVER = "give the working directory to the sandbox user"
HOSTS_PUT = "write the sandbox's /etc/hosts"

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


def inspect(cid: str | None) -> dict[str, Any]:
    assert cid
    data: list[dict[str, Any]] = json.loads(docker_cli("inspect", cid))
    return data[0]


async def sh(sb: Sandbox, cmd: str) -> str:
    done = await sb.execute_command(cmd)
    assert done.success, (done.stdout, done.stderr)
    return done.stdout


SHOW = ("cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' '; echo ---; cat /etc/hosts; "
        "echo ---; cat /proc/sys/net/ipv6/conf/all/disable_ipv6 "
        "/proc/sys/net/ipv6/conf/lo/disable_ipv6; hostname; cat /etc/hostname")


@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON], ids=["busybox", "python"])
async def test_default_sandbox_is_a_bare_namespace_with_what_none_held(image: str) -> None:
    async with Sandbox(SandboxConfig(image=image)) as sb:
        data = inspect(sb.backend.container_id)  # type: ignore[attr-defined]
        assert data["Config"].get("NetworkDisabled") is True
        assert data["HostConfig"]["NetworkMode"] == "none"
        assert data["NetworkSettings"]["Networks"] in ({}, None)
        links, hosts, rest = (await sh(sb, SHOW)).split("---\n")
        assert links.split() == ["lo"]
        assert hosts.encode() == HOSTS
        assert rest.split() == ["1", "1", data["Config"]["Hostname"],
                                data["Config"]["Hostname"]]
        assert (await sb.get_info()).hostname == data["Config"]["Hostname"]


SERVE = r"""
import socket, threading
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
port = srv.getsockname()[1]
def serve():
    c, _ = srv.accept(); c.sendall(b"hello " + c.recv(16)); c.close()
threading.Thread(target=serve, daemon=True).start()
# The first address only, as a client that tries one would.
family, kind, proto, _, addr = socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)[0]
c = socket.socket(family, kind, proto); c.settimeout(5); c.connect(addr)
c.sendall(b"there"); print(addr[0], c.recv(64).decode())
"""


async def test_python_serves_and_connects_on_localhost() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        assert inspect(sb.backend.container_id)["Config"].get(  # type: ignore[attr-defined]
            "NetworkDisabled") is True
        out = await sh(sb, f"python3 -c '{SERVE}'")
    assert out.split() == ["127.0.0.1", "hello", "there"]


@pytest.fixture
def neighbour() -> Iterator[tuple[str, str]]:
    """A Python http.server on an internal network of the test's own: (its address, the network)."""
    name = f"sandbox-test-{uuid.uuid4().hex[:8]}"
    docker_cli("network", "create", "--internal", "--label", LABEL, name)
    try:
        cid = docker_cli("run", "-d", "--rm", "--network", name, "--label", LABEL,
                         IMAGE_PYTHON, "python3", "-m", "http.server", "8080", "-d",
                         "/etc").strip()
        try:
            ip = docker_cli("inspect", "--format",
                            f'{{{{(index .NetworkSettings.Networks "{name}").IPAddress}}}}',
                            cid).strip()
            assert ip
            yield ip, name
        finally:
            docker_cli("rm", "-f", cid, check=False)
    finally:
        docker_cli("network", "rm", name, check=False)


async def test_cannot_reach_a_container_on_another_network(
        neighbour: tuple[str, str]) -> None:
    ip, network = neighbour
    # The neighbour answers a container on its network (the test's check of itself) ...
    fetch = ("python3 -c 'import urllib.request as u; "
             f"print(u.urlopen(\"http://{ip}:8080/hostname\", timeout=3).read())'")
    assert docker_cli("run", "--rm", "--network", network, "--label", LABEL, IMAGE_PYTHON,
                      "sh", "-c", f"for i in 1 2 3 4 5 6; do {fetch} && exit; sleep 0.5; done; "
                      "exit 1").strip()
    # ... and the sandbox has no route to it.
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        done = await sb.execute_command(fetch)
        assert not done.success
        assert "unreachable" in (done.stderr + done.stdout).lower(), done


async def test_a_read_only_root_keeps_network_mode_none_and_localhost() -> None:
    cfg = SandboxConfig(image=IMAGE_BUSYBOX, security=SecurityPolicy(read_only_root=True))
    async with Sandbox(cfg) as sb:
        data = inspect(sb.backend.container_id)  # type: ignore[attr-defined]
        assert not data["Config"].get("NetworkDisabled")
        assert data["HostConfig"]["NetworkMode"] == "none"
        assert "Sysctls" not in data["HostConfig"] or not data["HostConfig"]["Sysctls"]
        links, hosts, rest = (await sh(sb, SHOW)).split("---\n")
        assert links.split() == ["lo"]
        assert "127.0.0.1\tlocalhost" in hosts.splitlines()
        assert rest.split()[:2] == ["1", "1"]


@pytest.fixture
def lying_image(tmp_path: Path) -> Iterator[str]:
    """An image whose own /etc/hosts sends localhost elsewhere and names a host."""
    yield from derived_image(
        tmp_path, f"sandbox-test-netless:{uuid.uuid4().hex[:8]}",
        "RUN printf '10.9.9.9 localhost\\n10.9.9.8 evil.example\\n' > /etc/hosts\n",
        base=IMAGE_BUSYBOX)


async def test_an_images_own_hosts_file_is_not_what_the_sandbox_reads(lying_image: str) -> None:
    # As with NetworkMode none: the engine's init layer hides the image's /etc/hosts.
    async with Sandbox(SandboxConfig(image=lying_image)) as sb:
        assert inspect(sb.backend.container_id)["Config"].get(  # type: ignore[attr-defined]
            "NetworkDisabled") is True
        assert (await sh(sb, "cat /etc/hosts")).encode() == HOSTS


@pytest.mark.parametrize("user", ["", "2000"], ids=["default", "uid-2000"])
async def test_hosts_ride_in_the_working_dirs_put_where_there_is_one(
        user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    security = SecurityPolicy(run_as_user=user, run_as_group=user) if user else SecurityPolicy()
    config = SandboxConfig(image=IMAGE_BUSYBOX, security=security)
    async with Sandbox(config):
        pass  # the image's working dir is read once per image id
    calls = Calls(monkeypatch)
    async with Sandbox(config) as sb:
        puts = [a for a in calls.actions if a in (HAND_OVER, HOSTS_PUT)]
        hosts = await sh(sb, "cat /etc/hosts; stat -c '%u:%g %a' /etc/hosts /workspace")
    # One PUT either way: the hand-over carrying /etc/hosts, or /etc/hosts alone.
    assert len(puts) == 1 and (puts == [HAND_OVER] or not user), (puts, hosts)
    assert hosts.encode().startswith(HOSTS) and "0:0 644" in hosts.splitlines()


@pytest.mark.parametrize("user", ["", "2000"], ids=["default", "uid-2000"])
async def test_hosts_are_written_while_another_create_looks_at_the_working_dir(
        user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Creates of an image nobody looked at yet (the children of a fork: a new image each
    # time) wait for one archive GET of its working dir; the others write /etc/hosts beside
    # that wait, not after it. The one that looks writes it after its look, in its hand-over
    # where there is one (uid 2000: the image's empty /workspace is 1000's); the others then
    # hand the working dir over alone. Each ends with the same files.
    security = SecurityPolicy(run_as_user=user, run_as_group=user) if user else SecurityPolicy()
    config = SandboxConfig(image=IMAGE_BUSYBOX, security=security)
    monkeypatch.setattr(_workdir, "_WORKDIR_ENTRIES", SingleFlight(8))  # never looked at
    events: list[tuple[str, str, str]] = []  # (start or end, action, container id)
    original = _gateway.Engine.request
    look = "look at the working directory"

    async def spy(engine: Any, action: str, path: str, *args: Any, **kwargs: Any) -> Any:
        who = path.split("/")[1] if path.startswith("containers/") else ""
        events.append(("start", action, who))
        try:
            if action == look:
                await anyio.sleep(1.5)  # the others reach their wait meanwhile
            return await original(engine, action, path, *args, **kwargs)
        finally:
            events.append(("end", action, who))

    monkeypatch.setattr(_gateway.Engine, "request", spy)
    shown: list[str] = []

    async def one() -> None:
        async with Sandbox(config) as sb:
            shown.append(await sh(sb, "cat /etc/hosts; stat -c '%u:%g %a' /etc/hosts /workspace"))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    looks = [who for e, a, who in events if e == "start" and a == look]
    assert len(looks) == 1, events
    looked_end = events.index(("end", look, looks[0]))
    others = {who for e, a, who in events if e == "start" and a == HOSTS_PUT} - {looks[0]}
    assert len(others) == 2, events
    for who in others:
        assert events.index(("start", HOSTS_PUT, who)) < looked_end, events
    for who in {looks[0], *others}:
        puts = [a for e, a, w in events if e == "start" and w == who and a in (HAND_OVER,
                                                                              HOSTS_PUT)]
        expected = [HAND_OVER] if who == looks[0] else [HOSTS_PUT, HAND_OVER]
        assert puts == (expected if user else [HOSTS_PUT]), (who, events)
    for text in shown:
        lines = text.splitlines()
        assert text.encode().startswith(HOSTS) and lines[-2] == "0:0 644", text
        assert lines[-1].startswith(f"{user or 1000}:"), text


async def test_a_checkpoint_of_a_bare_namespace_sandbox_starts_with_a_network(
        neighbour: tuple[str, str], prefix: str) -> None:
    # The bare namespace is the container's setting, not its image's: a sandbox with a
    # network made from the checkpoint (on the test's own internal network) has one.
    ip, network = neighbour
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        point = await sb.checkpoint(f"{prefix}-netless")
    try:
        config = attrs.evolve(
            point.config, network=NetworkConfig(isolated=False, bridge=network),
            security=SecurityPolicy(allow_networking=True, isolate_network=False))
        async with Sandbox(config) as again:
            data = inspect(again.backend.container_id)  # type: ignore[attr-defined]
            assert not data["Config"].get("NetworkDisabled")
            assert data["HostConfig"]["NetworkMode"] == network
            fetch = ("python3 -c 'import urllib.request as u; "
                     f"print(u.urlopen(\"http://{ip}:8080/hostname\", timeout=3).read())'")
            done = await again.execute_command(
                f"for i in 1 2 3 4 5 6; do {fetch} && exit; sleep 0.5; done; exit 1")
            assert done.success, done
            assert "localhost" in await sh(again, "cat /etc/hosts")
    finally:
        await remove_checkpoint(point.name)
