"""A sandbox without a network in a bare namespace (``Config.NetworkDisabled``, `_netless`):
observed in real containers to hold what a ``NetworkMode: none`` one held: only ``lo``, no way
out (not even to a container on a network of the test's own, internal), localhost resolving
to 127.0.0.1 first (Docker's /etc/hosts, IPv6 off), the engine's hostname; and the body is the
one expected (inspect). Where it does not apply (a read-only root) the sandbox keeps
``NetworkMode: none`` alone and localhost still works."""

from __future__ import annotations

import asyncio
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
    SandboxNotRunning,
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


class Execs:
    """The execs the SDK asks the engine for: (user, argv)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[tuple[str, list[str]]] = []
        original = _gateway.Engine.create_exec

        async def spy(engine: Any, action: str, container_id: str, body: Any) -> str:
            self.made.append((str(body.get("User") or ""), [str(a) for a in body["Cmd"]]))
            return await original(engine, action, container_id, body)

        monkeypatch.setattr(_gateway.Engine, "create_exec", spy)

    def hosts_writes(self) -> int:
        return sum(1 for user, argv in self.made if user == "0:0" and HOSTS.decode() in argv)


def never_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process has looked at no image's working dir and probed no user yet."""
    monkeypatch.setattr(_workdir, "_WORKDIR_ENTRIES", SingleFlight(8))
    monkeypatch.setattr(_workdir, "_PROBED", SingleFlight(8))


SHOW_HOSTS = "cat /etc/hosts; stat -c '%u:%g %a %F' /etc/hosts /workspace"


def assert_hosts(text: str, user: str = "") -> None:
    lines = text.splitlines()
    assert text.encode().startswith(HOSTS) and lines[-2] == "0:0 644 regular file", text
    assert lines[-1].startswith(f"{user or 1000}:"), text


@pytest.mark.parametrize("user", ["", "2000"], ids=["default", "uid-2000"])
async def test_creates_of_a_new_image_write_hosts_without_an_archive_put_of_their_own(
        user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Creates of an image nobody looked at yet (the children of a fork: a new image each
    # time) wait for one archive GET of its working dir and run (or wait for) one user
    # probe after start. None pays an archive PUT for /etc/hosts: it rides in the working
    # dir's hand-over where there is one (uid 2000: the image's /workspace is 1000's), else
    # one root exec writes it after start, beside the probe.
    security = SecurityPolicy(run_as_user=user, run_as_group=user) if user else SecurityPolicy()
    config = SandboxConfig(image=IMAGE_BUSYBOX, security=security)
    never_seen(monkeypatch)
    calls, execs = Calls(monkeypatch), Execs(monkeypatch)
    shown: list[str] = []

    async def one() -> None:
        async with Sandbox(config) as sb:
            shown.append(await sh(sb, SHOW_HOSTS))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(one)
    assert calls.actions.count("look at the working directory") == 1, calls.actions
    assert HOSTS_PUT not in calls.actions, calls.actions
    assert calls.actions.count(HAND_OVER) == (3 if user else 0), calls.actions
    assert execs.hosts_writes() == (0 if user else 3), execs.made
    assert len(shown) == 3
    for text in shown:
        assert_hosts(text, user)


async def test_hosts_are_right_before_the_first_command_however_slow_the_write(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The exec that writes /etc/hosts is part of the create: a slow one delays the create,
    # never the file (a write left running beside the caller's first command fails here).
    from sandbox.docker import _netless

    never_seen(monkeypatch)
    monkeypatch.setattr(_netless, "WRITE_SH", "sleep 1.5\n" + _netless.WRITE_SH)
    execs = Execs(monkeypatch)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        assert_hosts(await sh(sb, SHOW_HOSTS))
    assert execs.hosts_writes() == 1, execs.made


async def test_another_tasks_command_waits_for_the_end_of_a_new_images_create(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The backend says RUNNING at start; the user probe and the /etc/hosts exec come after.
    # A command from another task in between was let through, and read the engine's
    # /etc/hosts, not the sandbox's. Now it is refused until initialize() has returned.
    from sandbox.docker import _netless

    never_seen(monkeypatch)  # a new image: the probe and the exec run after start
    monkeypatch.setattr(_netless, "WRITE_SH", "sleep 1\n" + _netless.WRITE_SH)
    sb = Sandbox(SandboxConfig(image=IMAGE_BUSYBOX))
    init = asyncio.ensure_future(sb.initialize())
    refused: list[str] = []
    try:
        with anyio.fail_after(60):
            while True:
                done_when_sent = init.done()
                try:
                    shown = await sh(sb, SHOW_HOSTS)
                except SandboxNotRunning as exc:
                    refused.append(f"{sb.status.value}: {exc.message}")
                    await asyncio.sleep(0.01)
                    continue
                break
        # Accepted only once initialize() had returned; refused before, as "starting" too.
        assert done_when_sent, shown
        assert_hosts(shown)
        assert any(r.startswith("starting: the sandbox is starting: initialize() has not "
                                "finished") for r in refused), refused
    finally:
        await init
        await sb.cleanup()


@pytest.fixture
def image_refusing_the_write(tmp_path: Path) -> Iterator[str]:
    """An image whose shell fails the SDK's hosts script (and runs everything else)."""
    wrapper = ('#!/bin/busybox ash\\n'
               'case "$*" in *sandbox-hosts*) exit 1;; esac\\n'
               'exec /bin/busybox ash "$@"\\n')
    yield from derived_image(
        tmp_path, f"sandbox-test-netless:{uuid.uuid4().hex[:8]}",
        f"RUN rm /bin/sh && printf '{wrapper}' > /bin/sh && chmod 755 /bin/sh\n",
        base=IMAGE_BUSYBOX)


async def test_the_archive_put_writes_hosts_where_the_exec_cannot(
        image_refusing_the_write: str, monkeypatch: pytest.MonkeyPatch) -> None:
    never_seen(monkeypatch)
    calls, execs = Calls(monkeypatch), Execs(monkeypatch)
    async with Sandbox(SandboxConfig(image=image_refusing_the_write)) as sb:
        assert_hosts(await sh(sb, SHOW_HOSTS))
    assert execs.hosts_writes() == 1 and calls.actions.count(HOSTS_PUT) == 1, calls.actions


#: A shell that, run as root by an exec (its parent outside the container: pid 0), first
#: points /etc/hosts at a file of the image's own; then runs the real shell.
HOSTILE_SH = """#!/bin/busybox ash
if [ "$PPID" = 0 ] && [ "$(/bin/busybox id -u)" = 0 ]; then
  /bin/busybox ln -sfn /etc/target /etc/hosts
fi
exec /bin/busybox ash "$@"
"""


async def test_a_checkpoint_whose_shell_plants_a_symlink_at_hosts_gets_no_write_through_it(
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The attacker: code that ran as root (opted in) in a sandbox replaced /bin/sh and left
    # /etc/hosts a symlink; a sandbox of another user is made from its checkpoint. The
    # engine's init layer hides the committed symlink; the replaced shell, run as root by
    # the SDK's hosts write, plants a new one. The write renames a new file over it (as the
    # archive PUT replaces an entry) instead of writing through it: /etc/hosts is a regular
    # file with the hosts and the file the symlink named is untouched. (A write through the
    # symlink, `printf > /etc/hosts`, fails both.) The shell itself has the container's
    # root's privileges and no more: no capabilities, as its main process has.
    root = SecurityPolicy(run_as_user="root")
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, security=root)) as source:
        await source.write_file("/tmp/hostile-sh", HOSTILE_SH, mode=0o755)
        done = await source.execute_command(
            "printf 'keep\\n' > /etc/target && ln -sfn /etc/target /etc/hosts && "
            "rm /bin/sh && cp /tmp/hostile-sh /bin/sh")
        assert done.success, done
        point = await source.checkpoint(f"{prefix}-hostile-sh")
    user = SecurityPolicy(run_as_user="1000", run_as_group="1000")
    never_seen(monkeypatch)
    execs = Execs(monkeypatch)
    async with Sandbox(attrs.evolve(point.config, security=user)) as sb:
        assert_hosts(await sh(sb, SHOW_HOSTS))
        assert await sh(sb, "cat /etc/target; [ -L /etc/hosts ] || echo regular") == \
            "keep\nregular\n"
    assert execs.hosts_writes() == 1, execs.made


@pytest.fixture
def image_with_a_user_path(tmp_path: Path) -> Iterator[str]:
    """A Debian image whose PATH starts with a directory the sandbox user (1000) owns, as
    a conda prefix is in notebook images."""
    yield from derived_image(
        tmp_path, f"sandbox-test-netless:{uuid.uuid4().hex[:8]}",
        "RUN mkdir -p /opt/userbin && chown 1000:1000 /opt/userbin\n"
        "ENV PATH=/opt/userbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n")


async def test_a_path_directory_the_user_owns_puts_no_program_in_a_root_exec(
        image_with_a_user_path: str, prefix: str) -> None:
    # The attacker: the sandbox user (not root) plants `mv`, `rm`, `stat`, `ls` and `mkdir`
    # in the image's first PATH directory, which it owns, each noting who ran it. A sandbox
    # from its checkpoint gets its /etc/hosts and working dir made by root execs: they take
    # their tools from the system's directories, so no planted program runs as root (uid 0
    # would be noted). (busybox's shell runs its own applets whatever the PATH; dash does not.)
    async with Sandbox(SandboxConfig(image=image_with_a_user_path)) as source:
        script = ('#!/bin/sh\nid -u >> /opt/userbin/ran 2>/dev/null\n'
                  'exec "/bin/$(basename "$0")" "$@"\n')
        for tool in ("mv", "rm", "stat", "ls", "mkdir"):
            await source.write_file(f"/opt/userbin/{tool}", script.encode(), mode=0o755)
        # Root there has no capabilities: the note it would leave must be writable by all.
        await sh(source, "ls /opt >/dev/null; chmod 666 /opt/userbin/ran")
        assert (await sh(source, "cat /opt/userbin/ran")).split() == ["1000"]
        point = await source.checkpoint(f"{prefix}-planted-path")
    async with Sandbox(point.config) as sb:
        assert_hosts(await sh(sb, SHOW_HOSTS))
        ran = (await sh(sb, "cat /opt/userbin/ran")).split()
        assert "0" not in ran, ran


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
