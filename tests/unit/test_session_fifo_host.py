"""The session FIFO transport's host side (`sandbox._session_fifo`) and where the Docker
backend offers it (`sandbox.docker._session_mount`), without an engine."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from sandbox import _session_fifo as fifo
from sandbox._errors import SandboxError
from sandbox._owner import Here
from sandbox.docker import _session_mount as mount
from sandbox.docker._engine_identity import EngineInstance
from sandbox.docker._facts import EngineFacts

#: A "daemon" that is this very process: it sees our mounts as we do.
HERE = EngineInstance(b"boot", os.getpid(), 0, 1, 1, 1)


@pytest.fixture
def base(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "sessions"
    monkeypatch.setattr(fifo, "_base", lambda: where)
    monkeypatch.setattr(fifo, "_dirs", {})
    monkeypatch.setattr(mount, "_seen", {})
    monkeypatch.setattr(mount, "_failed", set())
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
    monkeypatch.setattr(mount, "_rootful_here", lambda address: HERE if local else None)
    body = {"HostConfig": {**BODY["HostConfig"], **host}}
    assert mount.add_fifo_mount(body, facts, runtime="", address="unix:///x") is None
    assert body["HostConfig"]["Mounts"] == [{"Target": "/repo"}]


def test_the_mount_is_read_only(monkeypatch: pytest.MonkeyPatch, base: Path) -> None:
    monkeypatch.setenv(fifo.ENV, "1")
    monkeypatch.setattr(mount, "_rootful_here", lambda address: HERE)
    body = {"HostConfig": dict(BODY["HostConfig"])}
    where = mount.add_fifo_mount(body, EngineFacts(), runtime="", address="unix:///x")
    assert where is not None
    assert body["HostConfig"]["Mounts"][-1] == {
        "Type": "bind", "Source": where.path, "Target": mount.TARGET, "ReadOnly": True,
        "BindOptions": {"Propagation": "rprivate"}}


def test_a_remote_engine_is_not_local() -> None:
    assert mount._rootful_here("tcp://10.0.0.1:2375") is None
    assert mount._rootful_here("") is None


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


# -- the daemon must see the directory through the same mount (PrivateTmp) -------------------


def fake_proc(tmp_path: Path, daemon_lines: list[str]) -> str:
    """A /proc with our own mountinfo and a "daemon" (pid 4242) whose mountinfo is given."""
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "4242").mkdir()
    (proc / "self" / "mountinfo").write_bytes(Path("/proc/self/mountinfo").read_bytes())
    (proc / "4242" / "mountinfo").write_text("".join(line + "\n" for line in daemon_lines))
    return str(proc)


def our_mount(where: fifo.FifoDir) -> tuple[str, list[str]]:
    """The mount id holding ``where`` and our mountinfo lines."""
    fd = where.open()
    try:
        info = Path(f"/proc/self/fdinfo/{fd}").read_text()
    finally:
        os.close(fd)
    mnt_id = next(line.split(":")[1].strip() for line in info.splitlines()
                  if line.startswith("mnt_id:"))
    return mnt_id, Path("/proc/self/mountinfo").read_text().splitlines()


def test_a_daemon_in_our_mount_namespace_sees_the_directory(base: Path) -> None:
    where = fifo.process_dir()
    assert where is not None
    assert mount.dockerd_sees(where, os.getpid())


@pytest.mark.parametrize("how", ["mount-missing", "mounted-elsewhere", "unreadable"])
def test_a_daemon_in_another_mount_namespace_gets_no_mount(
        base: Path, tmp_path: Path, how: str) -> None:
    """PrivateTmp: our /tmp is a mount the daemon's namespace lacks (or has at another
    place); the path would name nothing there, or what another user planted in its /tmp."""
    where = fifo.process_dir()
    assert where is not None
    mnt_id, lines = our_mount(where)
    if how == "mount-missing":
        theirs = [line for line in lines if line.split(" ")[0] != mnt_id]
    elif how == "mounted-elsewhere":
        theirs = [" ".join([*line.split(" ")[:4], "/elsewhere", *line.split(" ")[5:]])
                  if line.split(" ")[0] == mnt_id else line for line in lines]
    else:
        theirs = lines
    proc = fake_proc(tmp_path, theirs)
    if how == "unreadable":
        os.unlink(f"{proc}/4242/mountinfo")
    else:
        assert mount.dockerd_sees(where, 4242, proc) is False
        # The same files with the mount kept as ours: seen (the fake /proc itself works).
        proc_ok = fake_proc(tmp_path / "ok", lines)
        assert mount.dockerd_sees(where, 4242, proc_ok)
    assert mount.dockerd_sees(where, 4242, proc) is False


def test_no_mount_is_offered_where_the_daemon_sees_another_tmp(
        monkeypatch: pytest.MonkeyPatch, base: Path) -> None:
    monkeypatch.setenv(fifo.ENV, "1")
    monkeypatch.setattr(mount, "_rootful_here", lambda address: HERE)
    asked: list[int] = []

    def not_seen(where: fifo.FifoDir, pid: int, proc: str = "/proc") -> bool:
        asked.append(pid)
        return False

    monkeypatch.setattr(mount, "dockerd_sees", not_seen)
    for _ in range(3):
        body = {"HostConfig": dict(BODY["HostConfig"])}
        assert mount.add_fifo_mount(body, EngineFacts(), runtime="", address="unix:///x") is None
        assert body["HostConfig"]["Mounts"] == [{"Target": "/repo"}]
    assert asked == [HERE.pid]  # once per process and daemon


@pytest.mark.asyncio
async def test_a_create_refusing_the_directory_is_made_again_without_fifos(
        monkeypatch: pytest.MonkeyPatch, base: Path) -> None:
    """Defence in depth: the engine says the bind source does not exist (it sees another
    file system than we do): FIFOs go off for this process and the create is made again."""
    monkeypatch.setenv(fifo.ENV, "1")
    monkeypatch.setattr(mount, "_rootful_here", lambda address: HERE)
    body = {"HostConfig": {"Mounts": [{"Target": "/repo"}]}}
    where = mount.add_fifo_mount(body, EngineFacts(), runtime="", address="unix:///x")
    assert where is not None
    bodies: list[list[Any]] = []

    async def create(sent: Mapping[str, Any]) -> str:
        mounts = list(sent["HostConfig"]["Mounts"])
        bodies.append(mounts)
        if any(m.get("Source") == where.path for m in mounts):
            raise SandboxError("create the sandbox container", details=(
                'invalid mount config for type "bind": bind source path does not exist: '
                f"{where.path}"))
        return "id1"

    assert await mount.create_dropping_fifo(create, body, where) == ("id1", None)
    assert bodies[1] == [{"Target": "/repo"}] and len(bodies) == 2
    again = {"HostConfig": {}}
    assert mount.add_fifo_mount(again, EngineFacts(), runtime="", address="unix:///x") is None

    async def other(sent: Mapping[str, Any]) -> str:
        raise SandboxError("create the sandbox container", details="no such image")

    with pytest.raises(SandboxError, match="no such image"):
        await mount.create_dropping_fifo(other, {"HostConfig": {}}, where)


# -- after the link: nobody reopens the FIFOs ----------------------------------------------------


@pytest.mark.asyncio
async def test_the_fifos_have_mode_0_once_linked(base: Path) -> None:
    """The sandbox user may have the SDK's uid (and own the FIFOs): with mode 0 not even the
    owner reopens them through /proc/<pid>/fd (only capabilities could)."""
    where = fifo.process_dir()
    assert where is not None
    hs = fifo.Handshake(where, where.path)
    hs.prepare()
    said: list[bytes] = []
    shell = threading.Thread(target=shell_side, args=(where.path, dict(hs._names), said))
    shell.start()
    link = await hs.wait_shell(anyio.Event())
    assert link is not None
    try:
        for fd in (*link._fds.values(), link._in):
            assert stat.S_ISFIFO(os.fstat(fd).st_mode)
            assert stat.S_IMODE(os.fstat(fd).st_mode) == 0
    finally:
        await link.write(b"x\n")
        shell.join()
        link.close()


@pytest.mark.asyncio
async def test_a_host_open_failure_other_than_not_yet_gives_up_on_the_link(
        base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """EMFILE, or a FIFO that is not the one made: no link (the session replaces the shell,
    as after a timeout) instead of an error failing the session's open."""
    where = fifo.process_dir()
    assert where is not None
    hs = fifo.Handshake(where, where.path)
    hs.prepare()

    def no_fds(key: str, flags: int) -> int:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(hs, "_open", no_fds)
    assert await hs.wait_shell(anyio.Event()) is None
    assert hs.error is not None and hs.error.errno == errno.EMFILE
    assert listing(where.path) == []


# -- the link's ends -------------------------------------------------------------------------


def pipes() -> tuple[fifo.FifoLink, list[int]]:
    """A link over plain pipes: the "shell's" ends returned (out, err writers; in reader)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    in_r, in_w = os.pipe()
    for fd in (out_r, err_r, in_w):
        os.set_blocking(fd, False)
    return fifo.FifoLink(out_r, err_r, in_w), [out_w, err_w, in_r]


@pytest.mark.asyncio
async def test_writers_blocked_on_a_full_fifo_get_a_broken_pipe_when_it_closes() -> None:
    """Not anyio's ClosedResourceError (the link closed while waiting) nor BusyResourceError
    (a second writer waiting on the same fd): the session maps BrokenPipeError (an OSError)
    to StdinClosed or "the shell could not take the command"."""
    link, ends = pipes()
    errors: list[BaseException] = []

    async def writer() -> None:
        try:
            await link.write(b"x" * (1 << 20))
        except Exception as exc:  # what escapes is the test's subject
            errors.append(exc)

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer)
                tg.start_soon(writer)
                await anyio.sleep(0.2)  # both blocked: the pipe is full
                assert errors == []
                link.close()
    finally:
        for fd in ends:
            os.close(fd)
    assert len(errors) == 2 and all(isinstance(e, BrokenPipeError) for e in errors), errors


@pytest.mark.asyncio
async def test_ending_the_link_hands_on_what_was_written_and_stops() -> None:
    """The shell exited but a process it left holds its stdout open: no end-of-file ever
    comes; `end` makes the pumps take what is readable and stop."""
    link, ends = pipes()
    got: list[tuple[str, bytes]] = []
    first = anyio.Event()

    async def feed(stream: Any, data: bytes) -> None:
        got.append((stream, data))
        first.set()

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(link.pump, feed)
                os.write(ends[0], b"one")
                await first.wait()
                await anyio.sleep(0.05)  # both readers wait again
                os.write(ends[0], b"two")
                os.write(ends[1], b"err")
                link.end()  # the writers stay open: only `end` stops the pump
    finally:
        link.close()
        for fd in ends:
            os.close(fd)
    assert sorted(got) == [("stderr", b"err"), ("stdout", b"one"), ("stdout", b"two")]


def test_remove_needs_no_lchmod(base: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc < 2.32 cannot chmod without following links: Python raises NotImplementedError
    (not OSError) there, which crashed gc, the exit handler and a create reusing a pid."""
    real = os.chmod

    def old_glibc(path: Any, mode: int, *, dir_fd: int | None = None,
                  follow_symlinks: bool = True) -> None:
        if not follow_symlinks:
            raise NotImplementedError("chmod: follow_symlinks unavailable on this platform")
        real(path, mode, dir_fd=dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(os, "chmod", old_glibc)
    where = fifo.process_dir()
    assert where is not None
    os.mkfifo("left", 0o600, dir_fd=(fd := where.open()))
    os.close(fd)
    fifo._remove(Path(where.path))
    assert not os.path.lexists(where.path)
    link = base / "999999999-1"
    link.symlink_to(base)  # never followed
    with pytest.raises(OSError):
        fifo._remove(link)
    assert base.is_dir()


@pytest.mark.asyncio
async def test_ending_the_link_stops_even_while_a_process_writes_on() -> None:
    """A process the shell left writes without pause (``yes &``): the pumps take at most
    what a pipe can hold after `end`, then stop."""
    link, ends = pipes()
    stop = threading.Event()

    def yes() -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                os.write(ends[0], b"y\n" * 4096)

    writer = threading.Thread(target=yes)
    writer.start()
    taken = 0
    enough = anyio.Event()

    async def feed(stream: Any, data: bytes) -> None:
        nonlocal taken
        taken += len(data)
        if taken >= 1 << 20:
            enough.set()
        await anyio.lowlevel.checkpoint()

    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(link.pump, feed)
                await enough.wait()
                link.end()
    finally:
        stop.set()
        link.close()  # the writer gets EPIPE
        writer.join()
        for fd in ends:
            os.close(fd)
    assert taken >= 1 << 20


@pytest.mark.asyncio
async def test_a_slow_feed_stops_the_reading_at_the_queue_bound() -> None:
    """The FIFOs are read by loop callbacks into a queue: while the feed is stuck (a slow
    output callback), reading stops once `_QUEUE` bytes wait, so the shell's writes block on
    a full FIFO instead of filling the SDK's memory; the rest comes once the feed goes on."""
    link, ends = pipes()
    os.set_blocking(ends[0], False)
    release = anyio.Event()
    all_in = anyio.Event()
    got = 0
    written = 0
    total = 4 * fifo._QUEUE

    async def feed(stream: Any, data: bytes) -> None:
        nonlocal got
        await release.wait()
        got += len(data)
        if got >= total:
            all_in.set()
    try:
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(link.pump, feed)
                stalled = 0
                while stalled < 20 and written < total:  # until the link reads no more
                    try:
                        written += os.write(ends[0], b"x" * min(1 << 16, total - written))
                        stalled = 0
                    except BlockingIOError:
                        stalled += 1
                    await anyio.sleep(0.01 if stalled else 0)
                # The pipe's own buffer and a chunk in the feed's hands beyond the bound.
                assert written <= fifo._QUEUE + 2 * fifo._READ + (1 << 20), written
                assert written < total
                release.set()
                os.set_blocking(ends[0], True)
                await anyio.to_thread.run_sync(os.write, ends[0], b"y" * (total - written))
                os.close(ends[0])
                ends[0] = os.open("/dev/null", os.O_WRONLY)  # closed below, like the rest
                await all_in.wait()
                link.end()
    finally:
        link.close()
        for fd in ends:
            os.close(fd)
    assert got == total


@pytest.mark.asyncio
async def test_closing_the_link_unwatches_its_fifos_first() -> None:
    """Its FIFOs are watched by the loop for the link's life: `close` takes them off before
    closing the fds (a number reused by another file must not call the link), and the pump
    stops."""
    link, ends = pipes()
    loop = asyncio.get_running_loop()
    fds = list(link._fds.values())

    async def feed(stream: Any, data: bytes) -> None:
        pass

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(link.pump, feed)
                await anyio.wait_all_tasks_blocked()
                assert all(loop._selector.get_key(fd) for fd in fds)  # type: ignore[attr-defined]
                link.close()
                for fd in fds:  # at once, before the pump has run again
                    with pytest.raises(KeyError):
                        loop._selector.get_key(fd)  # type: ignore[attr-defined]
    finally:
        for fd in ends:
            os.close(fd)
