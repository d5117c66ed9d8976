"""A command's leftover child against another process of the sandbox user, on both session
transports (the FIFOs and the exec's attach stream) and for `execute_command`.

A session command may leave a readable, so dumpable, process behind (``sleep 600 &``, a
daemon). It holds the shell's stdout and stderr (its stdin is /dev/null), and any process of
the same uid may open its ``/proc/<pid>/fd`` entries or ptrace it (Docker's seccomp profile
allows ``ptrace`` here, and ``/proc/<pid>/mem`` opens for writing). The attacks below: read
the next command's text (its nonces), reopen the output channels to read later commands'
output and end markers, and drive the child by ptrace to reopen, read or write them. What must
hold: no command text is read, nothing is reopened, no failing command comes back as a success.
What does not (said in docs/security.md): the traced child may still write into the output
channel it holds, so text can be added to a later command's output; never its status.
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
from sandbox._session_shell import _copies
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
#: /proc/<pid>/mem, then one single step per call): reopen its own /proc/self/fd/1 and fd/2 for
#: reading, read its fd 1, write <text> to it. Prints the calls' results (-errno on failure);
#: the child is put back as it was and runs on.
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
        os.pwrite(mem, f"/proc/self/fd/{fd}\0".encode(), scratch)
        said[f"reopen{fd}"] = call(257, -100, scratch, os.O_RDONLY | os.O_NONBLOCK)
    said["read1"] = call(0, 1, scratch, 16)
    os.pwrite(mem, text, scratch)
    said["write1"] = call(1, 1, scratch, len(text))
finally:
    os.pwrite(mem, code, saved.rip)
    pt(13, ctypes.addressof(saved))
    pt(17)  # PTRACE_DETACH
print(json.dumps(said), flush=True)
"""

#: ``python3 -c THIEF <seconds> <stop> [pid]``: open for reading every pipe or FIFO of every
#: process it may reach through /proc (of <pid> only, if given) and print all it reads for
#: <seconds>. <stop> ("-" for none) is stopped meanwhile (SIGSTOP needs only the same uid), so
#: the thief is first to read what is written to that process.
THIEF = r"""
import os, select, signal, sys, time
end = time.monotonic() + float(sys.argv[1])
stop = 0 if sys.argv[2] == "-" else int(sys.argv[2])
pids = sys.argv[3:] or [p for p in os.listdir("/proc") if p.isdigit()]
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


async def test_a_leftover_child_holds_only_the_output_channels(transport: str) -> None:
    """What a command's background child inherits from the guarded shell, bash and POSIX sh,
    with and without input: /dev/null for stdin (never the command channel) and the shell's
    stdout and stderr, mode 0 on both transports (on the attach stream they were the engine's
    0600 pipes, open to the sandbox user)."""
    for image in (IMAGE_PYTHON, IMAGE_BUSYBOX):
        async with box(image) as sb, sb.session() as sh:
            await on_transport(sh, transport)
            for stdin in (None, "x\n"):
                pid = await leave_child(sh, stdin=stdin, prog="/bin/sleep")
                fds = await sb.execute_command(
                    f"cd /proc/{pid}/fd && for f in *; do echo $f $(readlink $f); done")
                lines = fds.stdout.splitlines()
                assert [line.split()[0] for line in lines] == ["0", "1", "2"], (image, fds)
                assert lines[0] == "0 /dev/null", (image, lines)
                modes = await sb.execute_command(f"stat -L -c %a /proc/{pid}/fd/1 /proc/{pid}/fd/2")
                assert modes.stdout.split() == ["0", "0"], (image, stdin, modes)
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


async def test_the_shells_own_stdio_is_mode_0(transport: str) -> None:
    """Seen from the host (as root): the guarded shell's stdin, stdout and stderr all have
    mode 0, on both transports, under bash and busybox. The stdin pipe of the attach stream was
    0600, the user's: a descriptor leaked to a readable program (bash's fd 255 once) handed
    every later command and its nonces to any process of that user. An unreadable ``chmod``
    beside the shell's copy closes it without a readable process ever holding it."""
    if os.geteuid() != 0:
        pytest.skip("reads the container's processes in the host's /proc")
    for image in (IMAGE_PYTHON, IMAGE_BUSYBOX):
        async with box(image) as sb, sb.session() as sh:
            await on_transport(sh, transport)
            pid = (await sh.run("echo $$")).stdout.strip()
            container = (await sb.execute_command("true")).metadata["container_id"]
            entry = host_proc(str(container), pid)
            modes = [os.stat(f"{entry}/fd/{fd}").st_mode & 0o7777 for fd in (0, 1, 2)]
            assert modes == [0, 0, 0], (image, [oct(m) for m in modes])


async def test_no_process_reads_the_next_commands_text(transport: str) -> None:
    """Every descriptor another process can reach, opened for reading while the session runs
    its next command, the shell stopped meanwhile so the thief reads first: the command's text
    (and so its nonces) never shows. Children left by commands with and without input are
    there to be used. (With bash's fd 255 leak put back, the attach stream's stdin pipe, the
    user's with mode 0600, gave the whole line: nonce and success token.)"""
    canary = "canary-" + secrets.token_hex(8)
    async with box() as sb, sb.session() as sh:
        await on_transport(sh, transport)
        await leave_child(sh)
        await leave_child(sh, stdin="x\n")
        shell = (await sh.run("echo $$")).stdout.strip()
        async with sb.stream_command(["python3", "-c", THIEF, "4", shell]) as thief:
            async for chunk in thief:
                if b"ready" in chunk.data:
                    break
            with anyio.fail_after(30):
                r = await sh.run(f": {canary}; false", timeout=10)
            said = (await thief.wait()).combined
        assert canary not in said, said
        assert r.exit_code == 1 and not r.success, r


async def test_a_leftover_childs_channels_give_no_later_output_away(transport: str) -> None:
    """Reopening a leftover child's stdout or stderr for reading (it is the shell's) is
    refused, so a later command's output and end markers stay the session's. (Vulnerable on
    the attach stream before its pipes went to mode 0: opened, and read from there.)"""
    secret = "secret-" + secrets.token_hex(8)
    async with box() as sb, sb.session() as sh:
        await on_transport(sh, transport)
        pid = await leave_child(sh)
        async with sb.stream_command(["python3", "-c", THIEF, "3", "-", pid]) as thief:
            async for chunk in thief:
                if b"ready" in chunk.data:
                    break
            with anyio.fail_after(30):  # stolen end markers leave it to its time limit
                r = await sh.run(f"echo {secret}; echo {secret} >&2; false", timeout=10)
            said = (await thief.wait()).combined
        assert "opened" not in said and said.count("Permission denied") == 2, said
        assert secret not in said and "SBX" not in said, said
        assert r.exit_code == 1 and r.stdout == r.stderr == secret + "\n", r


async def test_a_traced_leftover_child_neither_reads_nor_forges_a_status(transport: str) -> None:
    """ptrace is allowed (no yama, Docker's seccomp profile allows it): the child is made to
    reopen its own channels for reading (refused: mode 0; the attach stream's 0600 pipes
    opened before), to read them (they are write-only) and to write into stdout during a later
    failing command. The write lands as output (said in docs/security.md); the status stays 1."""
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
        assert said == {"reopen1": -13, "reopen2": -13, "read1": -9, "write1": 9}, traced
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
        async with sb.stream_command(["python3", "-c", THIEF, "3", "-", pid]) as thief, \
                sb.stream_command(["/bin/sh", "-c", writer]):
            async for chunk in thief:
                if b"ready" in chunk.data:
                    break
            r = await sb.execute_command(f"sleep 0.5; echo {secret}; false")
            said = (await thief.wait()).combined
        assert "opened" in said, said  # the earlier exec's pipe is open to the user ...
        assert secret not in said, said  # ... and carries nothing of the later one
        assert r.exit_code == 1 and r.stdout == secret + "\n" and "42" not in r.combined, r


#: ``sh -c PEEK <chmod>``: run <chmod> so it blocks (its errors fill a pipe nobody reads),
#: then try to list its descriptors from another process: "fds:" and the listing, or why not.
PEEK = r"""c=$1
"$c" 0 $(seq -f /nonexistent/%g 30000) 2>&1 | sleep 60 &
for _ in $(seq 100); do
  for d in /proc/[0-9]*; do
    case $(tr '\0' ' ' <"$d/cmdline" 2>/dev/null) in "$c 0 "*) pid=${d#/proc/};; esac
  done
  [ -n "${pid:-}" ] && break; sleep 0.05
done
ls "/proc/$pid/fd" >/dev/null 2>&1 && echo "fds: open" || echo "fds: refused"
kill "$pid"
"""


async def test_the_chmod_that_holds_the_stdin_is_not_dumpable() -> None:
    """The ``chmod`` that closes the shell's stdin holds it while it runs: it must be as closed
    as the shell. The copy beside the shell's (unreadable) is; the image's is not."""
    async with box() as sb, sb.session() as sh:
        assert sh.guarded
        copy = _copies[sh._backend]  # type: ignore[attr-defined]
        own = copy.rsplit("/", 1)[0] + "/chmod"
        for prog, said in ((own, "fds: refused"), ("/usr/bin/chmod", "fds: open")):
            r = await sb.execute_command(["/bin/sh", "-c", PEEK, "peek", prog])
            assert r.stdout.strip() == said, (prog, r)
