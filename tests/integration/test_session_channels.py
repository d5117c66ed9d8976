"""A command's leftover child against another process of the sandbox user, on both session
transports (the FIFOs and the exec's attach stream) and for `execute_command`.

A session command may leave a readable, so dumpable, process behind (``sleep 600 &``, a
daemon). It holds the shell's stdout and stderr (its stdin is /dev/null), and any process of
the same uid may open its ``/proc/<pid>/fd`` entries, ``chmod`` what they point to if it owns
it, or ptrace it (Docker's seccomp profile allows ``ptrace`` here, and ``/proc/<pid>/mem``
opens for writing). The attacks below: read the next command's text (its nonces), reopen the
output channels (after a chmod back, if need be) to read later commands' output and end
markers, and drive the child by ptrace to do the same or write into them. What holds on both
transports: no command text is read (no dumpable process holds the stdin) and no failing
command comes back as a success (the success token travels only on the stdin). On FIFOs
(read-only bind mount: chmod gets EROFS) nothing is reopened. On the attach stream the pipes
are the sandbox user's, 0600, and an owner can always chmod its own inode: the reopen works,
so later output and end markers can be taken (a command then runs to its time limit). That
gap is open, said in docs/security.md, and marked ``xfail(strict=True)`` below so that it is
noticed the day it closes. The traced child may also write into the output channel it holds,
so text can be added to a later command's output; never its status.
"""

from __future__ import annotations

import glob
import json
import os
import secrets

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, Sandbox, SandboxConfig
from sandbox import _session_fifo as fifo
from sandbox._session import Session
from sandbox.docker._session_mount import TARGET

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

TRANSPORTS = ["fifo", "attach"]


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(fifo.ENV, "1" if request.param == "fifo" else "0")
    return str(request.param)


def box(image: str = IMAGE_PYTHON) -> Sandbox:
    """The default sandbox user (uid 1000, no capabilities), runc."""
    return Sandbox(SandboxConfig(image=image))


async def on_transport(sh: Session, transport: str) -> None:
    """Check the shell's stdout is what ``transport`` says (a FIFO, or the exec's pipe)."""
    said = (await sh.run("readlink /proc/self/fd/1")).stdout
    assert sh.guarded, "these attacks are against a guarded shell"
    assert said.startswith(TARGET + "/" if transport == "fifo" else "pipe:"), said


async def leave_child(sh: Session, *, stdin: str | None = None, prog: str = "sleep") -> str:
    """Start a readable process in a session command and leave it running: its pid."""
    pid = (await sh.run(f"{prog} 600 & echo $!", stdin=stdin)).stdout.strip()
    assert pid.isdigit(), pid
    return pid


#: ``python3 -c TRACER <pid> <text>``: attach to <pid> by ptrace and make it run syscalls of
#: the attacker's choosing (x86-64: a ``syscall`` instruction written at its rip through
#: /proc/<pid>/mem, then one single step per call): ``fchmod`` its fd 1 and 2 to 0600, reopen
#: its own /proc/self/fd/1 and fd/2 for reading (and close what opened), read its fd 1, write
#: <text> to it. Prints the calls' results (-errno on failure); the child is put back as it was
#: and runs on.
TRACER = r"""
import ctypes, json, os, sys
pid = int(sys.argv[1])
text = sys.argv[2].encode()
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags "
        "rsp ss fs_base gs_base ds es fs gs").split()]
def pt(req, data=None):
    if libc.ptrace(req, pid, None, data) != 0:
        raise OSError(ctypes.get_errno(), f"ptrace {req}")
pt(16)  # PTRACE_ATTACH
os.waitpid(pid, 0)
saved = Regs(); pt(12, ctypes.addressof(saved))  # GETREGS
mem = os.open(f"/proc/{pid}/mem", os.O_RDWR)
code = os.pread(mem, 2, saved.rip)
scratch = (saved.rsp - 4096) & ~15
def call(nr, *args):
    r = Regs.from_buffer_copy(saved)
    r.rax, r.orig_rax = nr, 2**64 - 1
    for name, v in zip(("rdi", "rsi", "rdx", "r10", "r8", "r9"), args):
        setattr(r, name, v % 2**64)
    pt(13, ctypes.addressof(r)); pt(9); os.waitpid(pid, 0)  # SETREGS, SINGLESTEP
    out = Regs(); pt(12, ctypes.addressof(out))
    return out.rax - 2**64 if out.rax >= 2**63 else out.rax
os.pwrite(mem, b"\x0f\x05", saved.rip)
said = {}
try:
    for fd in (1, 2):
        said[f"fchmod{fd}"] = call(91, fd, 0o600)
        os.pwrite(mem, f"/proc/self/fd/{fd}\0".encode(), scratch)
        said[f"reopen{fd}"] = got = call(257, -100, scratch, os.O_RDONLY | os.O_NONBLOCK)
        if got >= 0:
            call(3, got)
    said["read1"] = call(0, 1, scratch, 16)
    os.pwrite(mem, text, scratch)
    said["write1"] = call(1, 1, scratch, len(text))
finally:
    os.pwrite(mem, code, saved.rip)
    pt(13, ctypes.addressof(saved))
    pt(17)  # PTRACE_DETACH
print(json.dumps(said), flush=True)
"""

#: ``python3 -c THIEF <seconds> <stop> <chmod> [pid]``: open for reading every pipe or FIFO of
#: every process it may reach through /proc (of <pid> only, if given) and print all it reads
#: for <seconds>. With <chmod> "1" it first sets each one's mode to 0600 (as its owner may,
#: whatever mode it was given). <stop> ("-" for none) is stopped meanwhile (SIGSTOP needs only
#: the same uid), so the thief is first to read what is written to that process.
THIEF = r"""
import os, select, signal, sys, time
end = time.monotonic() + float(sys.argv[1])
stop = 0 if sys.argv[2] == "-" else int(sys.argv[2])
chmod = sys.argv[3] == "1"
pids = sys.argv[4:] or [p for p in os.listdir("/proc") if p.isdigit()]
held = {}
for pid in pids:
    if pid in (str(os.getpid()), str(os.getppid()), str(stop)):
        continue
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError as e:
        print("refused", pid, e.strerror, flush=True); continue
    for fd in fds:
        path = f"/proc/{pid}/fd/{fd}"
        try:
            if not os.readlink(path).startswith(("pipe:", "/dev/.sandbox-session")):
                continue
            if chmod:
                try:
                    os.chmod(path, 0o600)
                    print("mode set", path, flush=True)
                except OSError as e:
                    print("mode kept", path, e.strerror, flush=True)
            held[os.open(path, os.O_RDONLY | os.O_NONBLOCK)] = path
            print("opened", path, flush=True)
        except OSError as e:
            print("refused", path, e.strerror, flush=True)
if stop:
    os.kill(stop, signal.SIGSTOP)
print("ready", flush=True)
try:
    while held and (left := end - time.monotonic()) > 0:
        for fd in select.select(list(held), [], [], left)[0]:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                del held[fd]
            else:
                print("read", held[fd], repr(data), flush=True)
finally:
    if stop:
        os.kill(stop, signal.SIGCONT)
"""


#: What a guarded shell's stdout and stderr are, seen by ``stat -L``: the FIFOs are set to mode
#: 0 as the shell takes them; the attach stream's pipes are the engine's, the exec user's, 0600.
CHANNEL_MODES = {"fifo": "0", "attach": "600"}


async def test_a_leftover_child_holds_only_the_output_channels(transport: str) -> None:
    """What a command's background child inherits from the guarded shell, bash and POSIX sh,
    with and without input: /dev/null for stdin (never the command channel) and the shell's
    stdout and stderr: mode 0 FIFOs, or on the attach stream the sandbox user's own 0600 pipes
    (which that user may reopen, or chmod back if their mode were changed)."""
    for image in (IMAGE_PYTHON, IMAGE_BUSYBOX):
        async with box(image) as sb, sb.session() as sh:
            await on_transport(sh, transport)
            uid = (await sh.run("id -u")).stdout.strip()
            for stdin in (None, "x\n"):
                pid = await leave_child(sh, stdin=stdin, prog="/bin/sleep")
                fds = await sb.execute_command(
                    f"cd /proc/{pid}/fd && for f in *; do echo $f $(readlink $f); done")
                lines = fds.stdout.splitlines()
                assert [line.split()[0] for line in lines] == ["0", "1", "2"], (image, fds)
                assert lines[0] == "0 /dev/null", (image, lines)
                modes = await sb.execute_command(
                    f"stat -L -c '%a %u' /proc/{pid}/fd/1 /proc/{pid}/fd/2")
                said = modes.stdout.splitlines()
                assert [m.split()[0] for m in said] == [CHANNEL_MODES[transport]] * 2, (
                    image, stdin, modes)
                if transport == "attach":
                    assert [m.split()[1] for m in said] == [uid] * 2, (image, stdin, modes)
            assert (await sh.run("echo alive")).stdout == "alive\n"


def host_proc(container: str, pid: str) -> str:
    """The host's /proc entry of the container's process ``pid`` (as the container sees it)."""
    for entry in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{entry}/cgroup") as cgroup, open(f"{entry}/status") as status:
                if container not in cgroup.read():
                    continue
                nspid = [line for line in status if line.startswith("NSpid:")]
        except OSError:
            continue
        if nspid and nspid[0].split()[-1] == pid:
            return entry
    raise AssertionError(f"no host process for {pid} in {container}")




async def test_the_shells_own_stdio_as_the_host_sees_it(transport: str) -> None:
    """Seen from the host (as root), under bash and busybox: on FIFOs the guarded shell's
    stdin, stdout and stderr have mode 0; on the attach stream they are the sandbox user's
    0600 pipes, as the engine made them. Nothing inside can reach the stdin there all the same:
    the only process holding it is the shell, which is not dumpable (see the next test)."""
    if os.geteuid() != 0:
        pytest.skip("reads the container's processes in the host's /proc")
    for image in (IMAGE_PYTHON, IMAGE_BUSYBOX):
        async with box(image) as sb, sb.session() as sh:
            await on_transport(sh, transport)
            pid = (await sh.run("echo $$")).stdout.strip()
            uid = int((await sh.run("id -u")).stdout)
            container = (await sb.execute_command("true")).metadata["container_id"]
            entry = host_proc(str(container), pid)
            stats = [os.stat(f"{entry}/fd/{fd}") for fd in (0, 1, 2)]
            modes = [st.st_mode & 0o7777 for st in stats]
            if transport == "fifo":
                assert modes == [0, 0, 0], (image, [oct(m) for m in modes])
            else:
                assert modes == [0o600] * 3, (image, [oct(m) for m in modes])
                assert [st.st_uid for st in stats] == [uid] * 3, (image, stats)


async def test_no_process_reads_the_next_commands_text(transport: str) -> None:
    """Every descriptor another process can reach, chmodded to 0600 where it may and opened
    for reading while the session runs its next command, the shell stopped meanwhile so the
    thief reads first: the command's text (and so its nonces) never shows. Children left by
    commands with and without input are there to be used. (With bash's fd 255 leak put back,
    the attach stream's stdin pipe, the user's with mode 0600, gave the whole line: nonce and
    success token.)"""
    canary = "canary-" + secrets.token_hex(8)
    async with box() as sb, sb.session() as sh:
        await on_transport(sh, transport)
        await leave_child(sh)
        await leave_child(sh, stdin="x\n")
        shell = (await sh.run("echo $$")).stdout.strip()
        async with sb.stream_command(["python3", "-c", THIEF, "4", shell, "1"]) as thief:
            async for chunk in thief:
                if b"ready" in chunk.data:
                    break
            with anyio.fail_after(30):
                r = await sh.run(f": {canary}; false", timeout=10)
            said = (await thief.wait()).combined
        assert canary not in said, said
        assert r.exit_code == 1 and not r.success, r


ATTACH_GAP = pytest.mark.xfail(
    strict=True, reason="open gap: on the attach stream the shell's stdout and stderr are the "
    "sandbox user's pipes, which that user may reopen through a leftover child (after a chmod "
    "back if need be); the FIFO transport closes it")


@pytest.mark.parametrize("transport", [
    "fifo", pytest.param("attach", marks=ATTACH_GAP)], indirect=True)
@pytest.mark.parametrize("chmod", [False, True], ids=["reopen", "chmod-then-reopen"])
async def test_a_leftover_childs_channels_give_no_later_output_away(
        transport: str, chmod: bool) -> None:
    """Reopening a leftover child's stdout or stderr for reading (they are the shell's),
    directly or after setting their mode back to 0600, must be refused, so a later command's
    output and end markers stay the session's. On FIFOs it is: the chmod gets EROFS (a
    read-only bind mount, whoever asks) and the open EACCES. On the attach stream both work
    (the pipes are the user's: round 9's mode 0 was undone by a chmod), so this fails there,
    as expected, at the first assertion."""
    secret = "secret-" + secrets.token_hex(8)
    async with box() as sb, sb.session() as sh:
        await on_transport(sh, transport)
        pid = await leave_child(sh)
        argv = ["python3", "-c", THIEF, "3", "-", "1" if chmod else "0", pid]
        async with sb.stream_command(argv) as thief:
            ready = b""
            async for chunk in thief:
                ready += chunk.data
                if b"ready" in chunk.data:
                    break
            early = ready.decode()
            assert "opened" not in early and early.count("Permission denied") == 2, early
            assert "mode set" not in early, early
            if chmod:
                assert early.count("Read-only file system") == 2, early
            with anyio.fail_after(30):  # stolen end markers leave it to its time limit
                r = await sh.run(f"echo {secret}; echo {secret} >&2; false", timeout=10)
            said = (await thief.wait()).combined
        assert secret not in said and "SBX" not in said, said
        assert r.exit_code == 1 and r.stdout == r.stderr == secret + "\n", r


@pytest.mark.parametrize("transport", ["attach"], indirect=True)
async def test_on_attach_a_reopened_channel_costs_output_never_a_status(transport: str) -> None:
    """What the open gap above gives on the attach stream: the thief chmods and opens the
    leftover child's stdout and stderr and reads beside the engine, so it may take the
    command's output and end markers (the command then runs to its time limit) or not (a
    race). Either way the failing command never comes back as a success: status 0 needs the
    token, which only the shell's stdin carries."""
    async with box() as sb, sb.session() as sh:
        await on_transport(sh, transport)
        pid = await leave_child(sh)
        async with sb.stream_command(["python3", "-c", THIEF, "3", "-", "1", pid]) as thief:
            async for chunk in thief:
                if b"ready" in chunk.data:
                    break
            with anyio.fail_after(30):
                r = await sh.run("echo out; false", timeout=6)
            said = (await thief.wait()).combined
        assert said.count("opened") == 2 and said.count("mode set") == 2, said  # the gap
        assert not r.success and r.exit_code != 0, r
        assert (await sh.run("echo alive")).stdout == "alive\n"


async def test_a_traced_leftover_child_neither_reads_nor_forges_a_status(transport: str) -> None:
    """ptrace is allowed (no yama, Docker's seccomp profile allows it): the child is made to
    set its channels' mode to 0600 and reopen them for reading, to read them (they are
    write-only) and to write into stdout during a later failing command. On FIFOs the fchmod
    gets EROFS and the reopen EACCES; on the attach stream both work (the open gap: the pipes
    are the user's). The write lands as output (said in docs/security.md); the status stays 1."""
    async with box() as sb, sb.session() as sh:
        await on_transport(sh, transport)
        pid = await leave_child(sh)
        results: list[object] = []

        async def later() -> None:
            results.append(await sh.run(
                "while [ ! -e /tmp/traced ]; do sleep 0.05; done; echo real; false",
                timeout=60))

        async with anyio.create_task_group() as tg:
            tg.start_soon(later)
            traced = await sb.execute_command(
                ["/bin/sh", "-c", 'python3 -c "$0" "$1" "$2"; s=$?; touch /tmp/traced; exit $s',
                 TRACER, pid, "INJECTED\n"])
        said = json.loads(traced.stdout)
        assert (said.pop("read1"), said.pop("write1")) == (-9, 9), traced
        if transport == "fifo":
            assert said == {"fchmod1": -30, "reopen1": -13, "fchmod2": -30, "reopen2": -13}
        else:
            assert (said["fchmod1"], said["fchmod2"]) == (0, 0), traced
            assert said["reopen1"] >= 0 and said["reopen2"] >= 0, traced
        r = results[0]
        assert r.exit_code == 1 and not r.success, r  # type: ignore[attr-defined]
        assert r.stdout == "INJECTED\nreal\n", r  # type: ignore[attr-defined]
        alive = await sb.execute_command(f"grep State /proc/{pid}/status")
        assert "S (sleeping)" in alive.stdout, alive  # put back as it was
        assert (await sh.run("echo alive")).stdout == "alive\n"


async def test_execute_command_output_is_its_own() -> None:
    """`execute_command` has pipes per exec: a child an earlier exec left holds only that
    exec's, which another process may reopen (0600, the user's), and nothing of a later exec
    reaches it or comes from it."""
    secret = "secret-" + secrets.token_hex(8)
    async with box() as sb:
        pid = (await sb.execute_command("sleep 600 & echo $!")).stdout.strip()
        assert pid.isdigit(), pid
        writer = f"while :; do echo 42 passed > /proc/{pid}/fd/1 || exit; sleep 0.05; done"
        async with sb.stream_command(["python3", "-c", THIEF, "3", "-", "0", pid]) as thief, \
                sb.stream_command(["/bin/sh", "-c", writer]):
            async for chunk in thief:
                if b"ready" in chunk.data:
                    break
            r = await sb.execute_command(f"sleep 0.5; echo {secret}; false")
            said = (await thief.wait()).combined
        assert "opened" in said, said  # the earlier exec's pipe is open to the user ...
        assert secret not in said, said  # ... and carries nothing of the later one
        assert r.exit_code == 1 and r.stdout == secret + "\n" and "42 passed" not in r.combined, r
