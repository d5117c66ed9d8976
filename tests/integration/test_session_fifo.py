"""The session FIFO transport (`sandbox._session_fifo`) against a sandbox that plays the
attacker: it may not list the directory, open a FIFO by path, plant anything there, reach
another session's FIFOs, or find any left behind; no other host user may enter the host
directory; a handshake that fails falls back to the attach stream."""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from test_session import FORGER

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    Sandbox,
    SandboxConfig,
    SandboxPool,
    SecurityPolicy,
    SessionJob,
    StdinClosed,
)
from sandbox import _session_fifo as fifo
from sandbox._session import Session
from sandbox.docker._session_mount import TARGET

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: What the command's stdout and stderr are (its stdin is /dev/null): each printed on itself.
OWN_FDS = "readlink /proc/self/fd/1; readlink /proc/self/fd/2 >&2"


@pytest.fixture(autouse=True)
def _fifo_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fifo.ENV, "1")


def box(image: str = IMAGE_BUSYBOX, **kw: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=image, **kw))  # type: ignore[arg-type]


def host_listing() -> list[str]:
    """What this process's host FIFO directory holds (its owner may not read it: opened up
    for the look, as gc does)."""
    where = fifo.process_dir()
    assert where is not None
    mode = os.stat(where.path).st_mode & 0o7777
    os.chmod(where.path, 0o700)
    try:
        return os.listdir(where.path)
    finally:
        os.chmod(where.path, mode)


async def fifo_paths(sh: Session) -> list[str]:
    """The FIFOs the session's shell holds, from its own command (which is trusted with
    them: it could forge its own result anyway)."""
    said = await sh.run(OWN_FDS)
    paths = [said.stdout.strip(), said.stderr.strip()]
    assert all(p.startswith(TARGET + "/") for p in paths), paths
    return [p.removesuffix(" (deleted)") for p in paths]


PLACES = {
    "busybox-1000": {"image": IMAGE_BUSYBOX},
    "python-1000-readonly": {"image": IMAGE_PYTHON, "security": SecurityPolicy(
        run_as_user="1000", read_only_root=True)},
}


@pytest.mark.parametrize("place", sorted(PLACES))
async def test_a_guarded_session_runs_over_unlinked_fifos(place: str) -> None:
    """The shell's stdio are the FIFOs, already unlinked: no other process can open them by
    path, even knowing the names; the directory cannot be listed; nothing is left behind."""
    async with box(**PLACES[place]) as sb:  # type: ignore[arg-type]
        async with sb.session() as sh:
            assert sh.guarded
            paths = await fifo_paths(sh)
            assert len({p.rsplit("/", 1)[1] for p in paths}) == 2
            assert all(len(p.rsplit("/", 1)[1]) == 32 for p in paths)  # 128 bits each
            assert host_listing() == []  # unlinked before the first command was sent
            for path in paths:
                r = await sb.execute_command(f"exec 3<{path}; echo opened")
                assert "opened" not in r.stdout and "no such file" in r.stderr.lower(), r
            r = await sb.execute_command(f"ls -a {TARGET}")
            assert r.exit_code != 0 and "Permission denied" in r.stderr, r
            assert (await sh.run("cd /tmp; x=7")).success
            assert (await sh.run("echo $x; pwd", stdin="in\n")).stdout == "7\n/tmp\n"
        assert host_listing() == []


@pytest.mark.parametrize("place", sorted(PLACES))
async def test_another_process_cannot_forge_a_result_over_fifos(place: str) -> None:
    """test_session's issue-26 forger against a shell on FIFOs: its /proc entries stay
    closed, the command runs and its own status comes back."""
    async with box(**PLACES[place]) as sb, sb.session() as sh:  # type: ignore[arg-type]
        await fifo_paths(sh)
        pid = (await sh.run("echo $$")).stdout.strip()
        async with sb.stream_command(["/bin/sh", "-c", FORGER, "forger", pid]) as forger:
            async for chunk in forger:
                if chunk.stream == "stdout" and chunk.data.startswith(b"stopped"):
                    break
            with anyio.fail_after(60):
                r = await sh.run("echo ran > /tmp/ran; false")
            said = (await forger.wait()).combined
        assert r.exit_code == 1 and not r.success and r.stdout == "" and sh.cwd != "/forged"
        assert "forged" not in said and "stdout-open" not in said, said
        assert "Permission denied" in said
        assert (await sb.execute_command("cat /tmp/ran")).stdout == "ran\n"


async def test_a_capability_less_root_can_neither_list_nor_plant() -> None:
    """Root in the sandbox (capabilities dropped) is "other" to the host directory: it may
    not list it, and the read-only mount refuses a file, a FIFO, a symlink and a chmod."""
    async with box(security=SecurityPolicy(run_as_user="root")) as sb:
        attempts = {
            "list": f"ls -a {TARGET}",
            "file": f"echo x > {TARGET}/planted",
            "fifo": f"mkfifo {TARGET}/planted",
            "link": f"ln -s /etc/passwd {TARGET}/planted",
            "chmod": f"chmod 0777 {TARGET}",
        }
        for what, cmd in attempts.items():
            r = await sb.execute_command(Command.shell(cmd, user="0"))
            assert r.exit_code != 0, (what, r)
            assert "Permission denied" in r.stderr or "Read-only" in r.stderr, (what, r)
        assert host_listing() == []


async def test_another_session_cannot_reach_the_fifos() -> None:
    """A second session (another guarded shell of the same user) cannot open the first's
    FIFOs by path nor through its /proc entries, nor write a command into it."""
    async with box() as sb, sb.session() as first, sb.session() as second:
        paths = await fifo_paths(first)
        pid = (await first.run("echo $$")).stdout.strip()
        for target in [*paths, f"/proc/{pid}/fd/0", f"/proc/{pid}/fd/1"]:
            r = await second.run(f"echo 'touch /tmp/pwned' >{target} && echo wrote")
            assert "wrote" not in r.stdout, (target, r)
        assert (await first.run("echo alive")).stdout == "alive\n"
        assert "pwned" not in (await sb.execute_command("ls /tmp")).stdout
        assert {p.rsplit("/", 1)[1] for p in paths}.isdisjoint(
            {p.rsplit("/", 1)[1] for p in await fifo_paths(second)})


async def test_a_pooled_sandboxs_next_user_cannot_reach_the_previous_fifos(
        caplog: pytest.LogCaptureFixture) -> None:
    """A sandbox reset between users: the previous user's FIFOs are gone (unlinked at
    their handshake, their shell killed with its session)."""
    cfg = SandboxConfig(image=IMAGE_BUSYBOX)
    async with SandboxPool(cfg, min_ready=1, max_size=1, max_uses=2) as pool:
        async with pool.acquire() as sb, sb.session() as sh:
            paths = await fifo_paths(sh)
            first = sb.id
            await sh.run("sleep 600 >/dev/null 2>&1 &")  # a process of the last user
        async with pool.acquire() as sb:
            # Reset and reused (the read-only mount does not stop it).
            assert sb.id == first, caplog.text
            for path in paths:
                r = await sb.execute_command(f"exec 3<{path}; echo opened")
                assert "opened" not in r.stdout, r
            async with sb.session() as sh:
                assert (await sh.run("echo ok")).stdout == "ok\n"
                assert set(paths).isdisjoint(await fifo_paths(sh))


async def test_forks_take_fifos_of_their_own() -> None:
    """A fork's container is planned anew: its sessions run over FIFOs of their own."""
    async with box() as sb, sb.session() as sh:
        parent = await fifo_paths(sh)
        children = await sb.fork(1)
        try:
            async with children[0].session() as child_sh:
                assert child_sh.guarded
                assert set(parent).isdisjoint(await fifo_paths(child_sh))
        finally:
            for child in children:
                await child.cleanup()


async def test_where_not_offered_sessions_keep_the_attach_stream() -> None:
    """gVisor, and the process backend: no mount, no FIFOs, sessions work as before."""
    for cfg in (SandboxConfig(image=IMAGE_BUSYBOX, runtime="runsc"),
                SandboxConfig(image=IMAGE_BUSYBOX, type="process")):
        async with Sandbox(cfg) as sb, sb.session() as sh:
            said = (await sh.run(OWN_FDS)).stdout
            assert TARGET not in said, (cfg.type, said)
            assert (await sh.run("echo ok")).stdout == "ok\n"


@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON])  # ash, bash
async def test_a_failed_handshake_keeps_the_same_shell_on_attach(
        monkeypatch: pytest.MonkeyPatch, image: str) -> None:
    """The shell cannot open the FIFOs (here: told a path that does not exist): it says so
    on its attach stdout and the session goes on in that shell; a handshake that times out
    replaces the shell by one on the attach stream."""
    real = fifo.Handshake.__init__

    def elsewhere(self: fifo.Handshake, where: fifo.FifoDir, target: str) -> None:
        real(self, where, "/nonexistent")

    monkeypatch.setattr(fifo.Handshake, "__init__", elsewhere)
    async with box(image) as sb, sb.session() as sh:
        assert sh.guarded and (await sh.run("echo $$")).metadata["shell"] == "1"
        assert TARGET not in (await sh.run(OWN_FDS)).stdout
        assert host_listing() == []
    monkeypatch.setattr(fifo.Handshake, "__init__", real)

    waited = fifo.Handshake.wait_shell

    async def no_time(self: fifo.Handshake, failed: anyio.Event,
                      limit: float = 0) -> fifo.FifoLink | None:
        return await waited(self, failed, 0)

    monkeypatch.setattr(fifo.Handshake, "wait_shell", no_time)
    async with box(image) as sb, sb.session() as sh:
        r = await sh.run(OWN_FDS)
        assert r.metadata["shell"] == "2" and TARGET not in r.stdout, r
        assert sh.guarded
        assert host_listing() == []


@pytest.fixture
def other_user() -> Iterator[list[str]]:
    if os.geteuid() != 0:
        pytest.skip("needs root on the host to act as another user")
    yield ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]


async def test_another_host_user_cannot_enter_the_host_directory(
        other_user: list[str]) -> None:
    async with box() as sb, sb.session() as sh:
        paths = await fifo_paths(sh)
        where = fifo.process_dir()
        assert where is not None
        base = Path(where.path).parent
        assert (await anyio.Path(base).stat()).st_mode & 0o777 == 0o700
        for target in (str(base), where.path, f"{where.path}/{paths[0].rsplit('/', 1)[1]}"):
            proc = await anyio.run_process([*other_user, "ls", "-a", target], check=False)
            assert proc.returncode != 0 and b"Permission denied" in proc.stderr, proc


#: A child SDK process: opens a session over FIFOs, says its directory, waits to be killed.
CHILD = textwrap.dedent("""
    import asyncio, sys, sandbox
    from sandbox import _session_fifo as fifo
    async def main():
        async with sandbox.Sandbox() as sb, sb.session() as sh:
            await sh.run("true")
            print(fifo.process_dir().path, flush=True)
            if sys.argv[1] == "kill":
                await asyncio.sleep(600)
    asyncio.run(main())
""")


def run_child(env: dict[str, str], end: str) -> str:
    """Start `CHILD`, read its directory, let it exit or SIGKILL it."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, end], stdout=subprocess.PIPE,
                             text=True, env=env)
    timer = threading.Timer(120, child.kill)
    timer.start()
    try:
        assert child.stdout is not None
        path = child.stdout.readline().strip()
        if end == "exit":
            child.wait()
        return path
    finally:
        timer.cancel()
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


async def test_a_sigkilled_owners_directory_is_collected_by_gc() -> None:
    env = {**os.environ, fifo.ENV: "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    path = anyio.Path(await anyio.to_thread.run_sync(run_child, env, "kill"))
    assert str(path) != "." and await path.is_dir()  # nothing ran at its exit
    gc = await anyio.run_process([sys.executable, "-m", "sandbox", "gc"], check=False, env=env)
    assert gc.returncode == 0, gc
    assert not await path.exists(), gc.stdout


async def test_an_sdk_process_removes_its_directory_at_exit() -> None:
    env = {**os.environ, fifo.ENV: "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    path = await anyio.to_thread.run_sync(run_child, env, "exit")
    assert path.startswith(str(fifo._base()))
    assert not await anyio.Path(path).exists()


async def test_no_process_reopens_the_fifos_through_proc() -> None:
    """A command's background process holds the shell's stdout and stderr FIFOs, and its
    /proc entries are open to the sandbox user. Mode 0 once linked: no process of that
    user reopens them there, to write (forge output) or to read (steal end markers) -- also
    where the sandbox user has the SDK's uid and owns them (see the same-uid test below).
    (Python's image: busybox runs its applets from the shell's unreadable copy, which leaves
    them closed anyway; coreutils' sleep is a readable program.)"""
    async with box(**PLACES["python-1000-readonly"]) as sb, sb.session() as sh:  # type: ignore[arg-type]
        await fifo_paths(sh)
        pid = (await sh.run("sleep 600 & echo $!")).stdout.strip()
        assert pid.isdigit()
        for fd in ("1", "2"):
            held = await sb.execute_command(f"readlink /proc/{pid}/fd/{fd}")
            assert held.stdout.startswith(TARGET + "/"), held
            for redirect in (">", "<"):
                r = await sb.execute_command(f"exec 3{redirect}/proc/{pid}/fd/{fd} && echo opened")
                assert "opened" not in r.stdout and "Permission denied" in r.stderr, (
                    fd, redirect, r)
        assert (await sh.run("echo alive")).stdout == "alive\n"


@pytest.mark.parametrize("how", ["kill -9 $$", "exec sleep 0"])
async def test_a_dying_shell_ends_its_command_while_a_background_job_holds_the_fifos(
        how: str) -> None:
    """No end-of-file comes on the FIFOs while ``sleep 600 &`` holds them: the end of the
    shell's exec ends the running command (it waited for ever with no time limit)."""
    async with box() as sb, sb.session() as sh:
        await fifo_paths(sh)
        assert (await sh.run("sleep 600 &")).success
        with anyio.fail_after(60):
            r = await sh.run(f"echo before; {how}")
        assert not r.success and r.metadata.get("shell_ended") == "true", r
        assert r.stdout == "before\n", r
        with anyio.fail_after(60):
            again = await sh.run("echo again")
        assert again.stdout == "again\n" and again.metadata["shell"] == "2"


async def test_a_time_limit_acts_while_a_writer_waits_on_a_full_stdin() -> None:
    """A job's writer blocked on the shell's full stdin FIFO (the command reads none) held
    the lock the kill waited on: the time limit could not act."""
    async with box() as sb, sb.session() as sh:
        await fifo_paths(sh)
        await sh.run("export KEEP=1")
        job = await sh.start("sleep 600", yield_after=0, timeout=3)
        assert isinstance(job, SessionJob)
        wrote = anyio.Event()

        async def write() -> None:
            with contextlib.suppress(StdinClosed):
                await job.write(b"x" * (1 << 20))
            wrote.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            with anyio.fail_after(60):
                r = await job.wait()
                await wrote.wait()
        assert r.timed_out and not r.success, r
        r = await sh.run("echo $KEEP")
        assert r.stdout == "1\n" and r.metadata["shell"] == "1", r  # the same shell


#: A child SDK process: runs a session and says what its command's stdout is.
OWN_STDOUT = textwrap.dedent("""
    import asyncio, sandbox
    async def main():
        async with sandbox.Sandbox() as sb, sb.session() as sh:
            print("stdout:", (await sh.run("readlink /proc/self/fd/1")).stdout.strip(),
                  "guarded:", sh.guarded, flush=True)
    asyncio.run(main())
""")


def child_env() -> dict[str, str]:
    return {**os.environ, fifo.ENV: "1", "PYTHONPATH": str(Path(__file__).parents[2])}


async def test_an_sdk_in_a_mount_namespace_of_its_own_keeps_the_attach_stream(
        tmp_path: Path) -> None:
    """systemd's PrivateTmp: the SDK's temp dir is a mount dockerd's namespace lacks. The FIFO
    directory is not offered (every create failed: "bind source path does not exist"; and
    whatever another host user planted at that path in the host's /tmp was mounted). The
    private tmpfs goes on the SDK's TMPDIR, not /tmp: the interpreter may live under /tmp
    (a CI clone), and a mount over it would hide it."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare to give the SDK a private temp dir")
    private = tmp_path / "private-tmp"
    private.mkdir()
    script = 'mount -t tmpfs tmpfs "$TMPDIR" && exec "$@"'
    proc = await anyio.run_process(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh",
         sys.executable, "-c", OWN_STDOUT], check=False,
        env={**child_env(), "TMPDIR": str(private)})
    said = proc.stdout.decode()
    assert proc.returncode == 0, (said, proc.stderr.decode()[-3000:])
    assert "guarded: True" in said and TARGET not in said, said


async def test_a_sandbox_user_with_the_sdks_uid_cannot_reopen_the_fifos() -> None:
    """The SDK runs as uid 1000 (in the docker group), its sandbox user is 1000 too: it owns
    the FIFOs. Mode 0 keeps even the owner from reopening them through /proc/<pid>/fd, and
    the read-only mount from changing that mode back. (A non-root SDK also needs the
    directory's ``O_PATH`` fd: its 0311 mode refuses the owner ``O_RDONLY``.)"""
    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        docker_gid = -1
    if os.geteuid() != 0 or docker_gid < 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root, a docker group and setpriv to run the SDK as uid 1000")
    child = textwrap.dedent("""
        import asyncio, os, sandbox
        async def main():
            cfg = sandbox.SandboxConfig(image=sandbox.IMAGE_PYTHON,
                                        security=sandbox.SecurityPolicy(run_as_user="1000"))
            async with sandbox.Sandbox(cfg) as sb, sb.session() as sh:
                out = (await sh.run("readlink /proc/self/fd/1; id -u")).stdout.split()
                pid = (await sh.run("sleep 600 & echo $!")).stdout.strip()
                tries = []
                for fd in ("1", "2"):
                    for way in (">", "<"):
                        r = await sb.execute_command(
                            f"exec 3{way}/proc/{pid}/fd/{fd} && echo opened")
                        tries.append(r.stdout.strip() or r.stderr.strip()[-40:])
                r = await sb.execute_command(f"chmod 666 /proc/{pid}/fd/1 && echo changed")
                tries.append(r.stdout.strip() or r.stderr.strip()[-40:])
                print("sdk:", os.geteuid(), "stdout:", out, "tries:", tries, flush=True)
                print("alive:", (await sh.run("echo ok")).stdout.strip(), flush=True)
        asyncio.run(main())
    """)
    env = {**child_env(), "HOME": "/tmp", "TMPDIR": "/tmp"}
    proc = await anyio.run_process(
        ["setpriv", "--reuid", "1000", "--regid", "1000", "--groups", str(docker_gid),
         sys.executable, "-c", child], check=False, env=env)
    said = proc.stdout.decode()
    assert proc.returncode == 0, (said, proc.stderr.decode()[-3000:])
    assert "sdk: 1000" in said and TARGET in said and "'1000'" in said, said
    assert "opened" not in said and said.count("Permission denied") == 4, said
    assert "changed" not in said and "Read-only" in said, said  # the owner cannot chmod back
    assert "alive: ok" in said, said


async def test_a_command_goes_to_the_shell_before_other_ready_work_runs() -> None:
    """`run` writes its command without first yielding to the event loop (its locks take
    the fast path when free): right after an exec, whatever else is ready (another task,
    the engine connection's callbacks) runs after the command is on its way, in the time the
    shell runs it, not before."""
    async with box() as sb, sb.session() as sh:
        await sh.run("true")
        shell = sh._shell
        assert shell is not None and shell.link is not None
        link = shell.link
        order: list[str] = []
        write = link.write

        async def spy(data: bytes) -> None:
            await write(data)
            order.append("written")

        link.write = spy  # type: ignore[method-assign]
        asyncio.get_running_loop().call_soon(order.append, "other ready work")
        assert (await sh.run("true")).success
        assert order == ["written", "other ready work"]
