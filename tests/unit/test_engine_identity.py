"""Which daemon instance answers a unix socket (`_engine_identity.identify`), told with real
processes: a listener named like the engine keeps its identity across connects and loses it
when it is restarted on the same path; a listener made by one process and served by another
(socket activation), or one named otherwise (a proxy), is not named at all."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.docker._engine_identity import identify

#: A listener that names itself (its ``comm``), binds ``path`` (or serves the listening socket
#: it was given, ``fd:N``), and accepts and closes connections until killed.
SERVER = r"""
import os, socket, sys
name, path = sys.argv[1], sys.argv[2]
with open("/proc/self/comm", "w") as comm:
    comm.write(name)
if path.startswith("fd:"):
    listener = socket.socket(fileno=int(path[3:]))
else:
    if os.path.exists(path):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)
print("ready", flush=True)
while True:
    listener.accept()[0].close()
"""


@pytest.fixture
def place() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="ident") as where:  # short: sun_path is 108 bytes
        yield Path(where) / "engine.sock"


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def serve(servers: list[subprocess.Popen[bytes]], name: str, path: str = "",
          listener: socket.socket | None = None) -> subprocess.Popen[bytes]:
    """Start a listener named ``name`` at ``path``, or serving ``listener`` (made here)."""
    given = (listener.fileno(),) if listener else ()
    where = f"fd:{given[0]}" if given else path
    proc = subprocess.Popen([sys.executable, "-c", SERVER, name, where], stdout=subprocess.PIPE,
                            pass_fds=given)
    servers.append(proc)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def peer_pid(path: Path) -> int:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        return int(struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                       12))[0])


def test_the_same_listener_keeps_its_identity_and_a_restarted_one_gets_another(
        place: Path, servers: list[subprocess.Popen[bytes]]) -> None:
    address = f"unix://{place}"
    first = serve(servers, "dockerd", str(place))
    named = identify(address)
    assert named is not None and named.pid == first.pid
    assert [identify(address) for _ in range(20)] == [named] * 20
    first.kill()
    first.wait()
    assert identify(address) is None  # nobody listens: nothing named
    second = serve(servers, "dockerd", str(place))
    renamed = identify(address)
    assert renamed is not None and renamed.pid == second.pid and renamed != named


def test_a_listener_passed_on_by_its_maker_is_not_named(
        place: Path, servers: list[subprocess.Popen[bytes]]) -> None:
    # Socket activation: the maker (here this test, as systemd for docker.socket) keeps the
    # socket while the daemon serving it is restarted, and the peer credentials stay the
    # maker's: they would name the same "instance" across the restart.
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(place))
        listener.listen(64)
        serving = serve(servers, "dockerd", listener=listener)
        before = peer_pid(place)
        assert identify(f"unix://{place}") is None
        serving.kill()
        serving.wait()
        serve(servers, "dockerd", listener=listener)
        assert peer_pid(place) == before  # why the credentials cannot be trusted here
        assert identify(f"unix://{place}") is None


def test_a_listener_that_is_not_the_engine_is_not_named(
        place: Path, servers: list[subprocess.Popen[bytes]]) -> None:
    # A proxy in front of an engine elsewhere: its restarts say nothing of the engine's.
    serve(servers, "docker-proxy", str(place))
    assert identify(f"unix://{place}") is None


def test_addresses_without_a_local_peer_are_not_named(place: Path) -> None:
    assert identify("tcp://127.0.0.1:2375") is None
    assert identify("ssh://user@host") is None
    assert identify(f"unix://{place}") is None  # no socket there


def test_a_listener_in_a_pid_namespace_not_seen_from_here_is_not_named(
        place: Path, servers: list[subprocess.Popen[bytes]]) -> None:
    # The engine's socket mounted into a container: the kernel gives the peer's pid as 0.
    serve(servers, "dockerd", str(place))
    probe = ("import sys; from sandbox.docker._engine_identity import identify; "
             f"print(identify({f'unix://{place}'!r}))")
    root = str(Path(__file__).resolve().parents[2])
    try:
        out = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable,
                              "-c", probe], capture_output=True, text=True, timeout=60,
                             check=True, env={"PYTHONPATH": root}, cwd=root).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no pid namespace here: {exc}")
    assert out.strip() == "None"
    assert identify(f"unix://{place}") is not None  # seen from here, the same listener is


def test_a_proc_of_another_pid_namespace_names_nothing(
        place: Path, servers: list[subprocess.Popen[bytes]]) -> None:
    # `unshare --pid --fork` without a /proc of its own: the peer credentials give pids of the
    # new namespace, while /proc still shows the old one's (another process by that number).
    serve(servers, "dockerd", str(place))
    probe = ("from sandbox.docker._engine_identity import _proc_is_ours, identify; "
             f"print(_proc_is_ours(), identify({f'unix://{place}'!r}))")
    root = str(Path(__file__).resolve().parents[2])
    try:
        subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, timeout=60,
                       check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no pid namespace here: {exc}")
    out = subprocess.run(["unshare", "--pid", "--fork", sys.executable, "-c", probe],
                         capture_output=True, text=True, timeout=60, check=True,
                         env={"PYTHONPATH": root}, cwd=root).stdout
    assert out.split() == ["False", "None"]
    assert identify(f"unix://{place}") is not None  # from here, /proc is ours
