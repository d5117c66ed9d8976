"""The session FIFO transport's host side (`sandbox._session_fifo`) and where the Docker
backend offers it (`sandbox.docker._session_mount`), without an engine."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox import _session_fifo as fifo
from sandbox._owner import Here
from sandbox.docker import _session_mount as mount
from sandbox.docker._facts import EngineFacts


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "sessions"
    monkeypatch.setattr(fifo, "_base", lambda: where)
    monkeypatch.setattr(fifo, "_dirs", {})
    return where


def listing(path: str) -> list[str]:
    mode = os.stat(path).st_mode & 0o7777
    os.chmod(path, 0o700)
    try:
        return os.listdir(path)
    finally:
        os.chmod(path, mode)


def test_the_directory_is_unlistable_under_a_private_one(base: Path) -> None:
    where = fifo.process_dir()
    assert where is not None and Path(where.path).parent == base
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(where.path).st_mode) == 0o311
    pid, _, start = Path(where.path).name.partition("-")
    assert pid == str(os.getpid()) and start.isdigit()
    assert fifo.process_dir() is where  # one per process


@pytest.mark.parametrize("how", ["symlink", "open-to-others"])
def test_a_base_not_private_to_us_is_refused(base: Path, tmp_path: Path, how: str) -> None:
    if how == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        base.symlink_to(tmp_path / "elsewhere")
    else:
        base.mkdir()
        base.chmod(0o755)
    assert fifo.process_dir() is None


def shell_side(target: str, names: dict[str, str], said: list[bytes]) -> None:
    """What the shell's ``command exec 1>OUT 2>ERR 0<IN`` does, then echo one line."""
    out = os.open(f"{target}/{names['out']}", os.O_WRONLY)
    err = os.open(f"{target}/{names['err']}", os.O_WRONLY)
    inp = os.open(f"{target}/{names['in']}", os.O_RDONLY)  # blocks until the host writes
    said.append(os.read(inp, 100))
    os.write(out, b"out\n")
    os.write(err, b"err\n")
    for fd in (out, err, inp):
        os.close(fd)


@pytest.mark.asyncio
async def test_a_handshake_links_and_unlinks(base: Path) -> None:
    where = fifo.process_dir()
    assert where is not None
    hs = fifo.Handshake(where, where.path)
    hs.prepare()
    names = dict(hs._names)
    assert sorted(listing(where.path)) == sorted(names.values())
    assert all(len(n) == 32 for n in names.values())
    assert f"1>{where.path}/{names['out']} 2>{where.path}/{names['err']} 0<" in hs.line
    said: list[bytes] = []
    shell = threading.Thread(target=shell_side, args=(where.path, names, said))
    shell.start()
    link = await hs.wait_shell(anyio.Event())
    assert link is not None
    assert listing(where.path) == []  # unlinked before any command goes
    got: list[tuple[str, bytes]] = []

    async def feed(stream: Any, data: bytes) -> None:
        got.append((stream, data))

    await link.write(b"echo\n")
    with anyio.fail_after(10):
        await link.pump(feed)  # until the "shell" closed both
    shell.join()
    link.close()
    assert said == [b"echo\n"] and sorted(got) == [("stderr", b"err\n"), ("stdout", b"out\n")]


@pytest.mark.asyncio
async def test_a_handshake_that_fails_or_times_out_leaves_nothing(base: Path) -> None:
    where = fifo.process_dir()
    assert where is not None
    hs = fifo.Handshake(where, "/x")
    hs.prepare()
    failed = anyio.Event()
    failed.set()
    assert await hs.wait_shell(failed) is None
    assert listing(where.path) == []
    hs = fifo.Handshake(where, "/x")
    hs.prepare()
    assert await hs.wait_shell(anyio.Event(), 0.01) is None
    assert listing(where.path) == []


@pytest.mark.parametrize("plant", ["symlink", "another-fifo"])
def test_the_host_opens_only_the_fifo_it_made(base: Path, plant: str) -> None:
    where = fifo.process_dir()
    assert where is not None
    hs = fifo.Handshake(where, where.path)
    hs.prepare()
    name = hs._names["in"]
    os.mkfifo(f"{where.path}/decoy")
    if plant == "symlink":
        os.unlink(name, dir_fd=hs._dir)
        os.symlink("decoy", name, dir_fd=hs._dir)
    else:  # same name, another inode (made while the first lived: its number is not reused)
        os.rename("decoy", name, src_dir_fd=hs._dir, dst_dir_fd=hs._dir)
    reader = os.open(f"{where.path}/{name}", os.O_RDONLY | os.O_NONBLOCK)  # a "shell"
    try:
        with pytest.raises(OSError):
            hs._open("in", os.O_WRONLY)
    finally:
        os.close(reader)
        hs.discard()


@pytest.mark.asyncio
async def test_gc_removes_the_directories_of_dead_owners_only(base: Path) -> None:
    mine = fifo.process_dir()
    assert mine is not None
    dead = base / "999999999-12345"  # no such pid
    dead.mkdir(mode=0o311)
    collected = await fifo.collect(dry_run=False, older_than=None, checkpoints_older_than=None,
                                   here=Here.current(), now=None, docker=None)  # type: ignore[arg-type]
    assert [(item.kind, item.id) for item in collected.removed] == [("session", dead.name)]
    assert not await anyio.Path(dead).exists() and await anyio.Path(mine.path).is_dir()


BODY: dict[str, Any] = {"HostConfig": {"Mounts": [{"Target": "/repo"}]}}


@pytest.mark.parametrize(("setting", "facts", "host", "local"), [
    ("0", EngineFacts(), {}, True),  # turned off
    ("1", EngineFacts(), {"Runtime": "runsc"}, True),
    ("1", EngineFacts(runtimes=frozenset({"runc", "kata"}), default_runtime="kata"), {}, True),
    ("1", EngineFacts(), {"CapAdd": ["DAC_READ_SEARCH"]}, True),
    ("1", EngineFacts(security_options=("name=userns",)), {}, True),
    ("1", EngineFacts(security_options=("name=rootless",)), {}, True),
    ("1", EngineFacts(security_options=("name=selinux",)), {}, True),
    ("1", EngineFacts(), {}, False),  # remote, a VM's, or a rootless dockerd
])
def test_the_mount_is_offered_only_where_checked(
        monkeypatch: pytest.MonkeyPatch, base: Path, setting: str, facts: EngineFacts,
        host: dict[str, Any], local: bool) -> None:
    monkeypatch.setenv(fifo.ENV, setting)
    monkeypatch.setattr(mount, "_rootful_here", lambda address: local)
    body = {"HostConfig": {**BODY["HostConfig"], **host}}
    assert mount.add_fifo_mount(body, facts, runtime="", address="unix:///x") is None
    assert body["HostConfig"]["Mounts"] == [{"Target": "/repo"}]


def test_the_mount_is_read_only(monkeypatch: pytest.MonkeyPatch, base: Path) -> None:
    monkeypatch.setenv(fifo.ENV, "1")
    monkeypatch.setattr(mount, "_rootful_here", lambda address: True)
    body = {"HostConfig": dict(BODY["HostConfig"])}
    where = mount.add_fifo_mount(body, EngineFacts(), runtime="", address="unix:///x")
    assert where is not None
    assert body["HostConfig"]["Mounts"][-1] == {
        "Type": "bind", "Source": where.path, "Target": mount.TARGET, "ReadOnly": True,
        "BindOptions": {"Propagation": "rprivate"}}


def test_a_remote_engine_is_not_local() -> None:
    assert not mount._rootful_here("tcp://10.0.0.1:2375")
    assert not mount._rootful_here("")


def test_a_replaced_directory_is_refused(base: Path) -> None:
    where = fifo.process_dir()
    assert where is not None
    os.rename(where.path, f"{where.path}.old")
    os.mkdir(where.path, 0o311)  # same path, another inode
    with pytest.raises(OSError, match="replaced"):
        fifo.Handshake(where, "/x").prepare()
    assert listing(where.path) == []


def test_a_directory_that_went_is_made_again(base: Path) -> None:
    """A tmp cleaner that removed it must not fail every later create (a bind mount of a
    missing source does): the next create gets a new directory."""
    where = fifo.process_dir()
    assert where is not None
    os.chmod(where.path, 0o700)
    os.rmdir(where.path)
    os.rmdir(base)
    again = fifo.process_dir()
    assert again is not None and os.path.isdir(again.path)  # (ext4 may reuse the inode)
    assert stat.S_IMODE(os.stat(again.path).st_mode) == 0o311
    assert stat.S_IMODE(os.stat(base).st_mode) == 0o700
    assert fifo.process_dir() is again


def test_only_the_docker_backend_offers_fifos() -> None:
    """Kubernetes and the process backend keep their own transports."""
    from sandbox.docker._sandbox import DockerBackend
    from sandbox.kubernetes._sandbox import KubernetesBackend
    from sandbox.process._sandbox import ProcessBackend

    assert hasattr(DockerBackend, "session_fifo")
    assert not hasattr(KubernetesBackend, "session_fifo")
    assert not hasattr(ProcessBackend, "session_fifo")
