"""Sessions on the real engine: a persistent shell, its markers, kills, stdin and its death."""

from __future__ import annotations

import secrets
import shlex

import anyio
import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    ConfigError,
    Sandbox,
    SandboxConfig,
    SecurityPolicy,
    SessionClosed,
    SessionJob,
)

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: Lists every process of the sandbox as "pid cmdline" (no ps in the python image).
PROCS = r"""for d in /proc/[0-9]*; do
  c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) && echo "${d#/proc/} $c"
done"""


def box(image: str = IMAGE_BUSYBOX, **kw: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=image, **kw))  # type: ignore[arg-type]


#: The places a session must work: runc and gVisor, root and not, a read-only root.
PLACES = {
    "busybox-root": {"image": IMAGE_BUSYBOX, "security": SecurityPolicy(run_as_user="root")},
    "python-1000-readonly": {"image": IMAGE_PYTHON, "security": SecurityPolicy(
        run_as_user="1000", read_only_root=True)},
    "busybox-runsc": {"image": IMAGE_BUSYBOX, "runtime": "runsc"},
}


async def processes(sb: Sandbox, needle: str) -> list[str]:
    """The sandbox's processes whose command line holds ``needle`` (seen from an exec)."""
    out = (await sb.execute_command(PROCS)).stdout
    return [line for line in out.splitlines() if needle in line]


@pytest.mark.parametrize("place", sorted(PLACES))
async def test_session_core_everywhere(place: str) -> None:
    """State persists, output ends without a newline, stdin arrives then EOF, and a timeout
    kills the whole tree while the shell lives on: under runc and runsc, root and uid 1000
    with a read-only root."""
    async with box(**PLACES[place]) as sb, sb.session() as sh:  # type: ignore[arg-type]
        r = await sh.run("cd /tmp && export SESS_X=42 && greet() { echo hi-$1; }")
        assert r.success and sh.cwd == "/tmp"
        r = await sh.run("echo $SESS_X $PWD; greet you; printf no-newline")
        assert r.stdout == "42 /tmp\nhi-you\nno-newline"
        data = bytes(range(256)) * 3 + b"'\"%s\\n$(x)`y`"
        r = await sh.run("cat; echo; echo end", stdin=data)
        assert r.stdout_bytes == data + b"\nend\n"
        r = await sh.run("read line; echo got:$line:$?")  # no stdin given: /dev/null
        assert r.stdout == "got::1\n"
        tag = 1000 + secrets.randbelow(9000)
        r = await sh.run(f"sleep 3{tag}1 & setsid sleep 3{tag}2 & "
                         f"sh -c 'sleep 3{tag}3 & sleep 3{tag}4' & echo started; sleep 3{tag}5",
                         timeout=1.5)
        assert r.timed_out and not r.success and r.exit_code == 137
        assert r.stdout == "started\n"  # the partial output
        assert await processes(sb, f"3{tag}") == []
        r = await sh.run("echo $SESS_X; greet again")  # the same shell: state kept
        assert r.stdout == "42\nhi-again\n" and r.metadata["shell"] == "1"


async def test_spoofed_markers_do_not_end_a_command() -> None:
    """Output imitating an end marker (any nonce, both streams) is output; ``set -x`` shows
    the wrapper's text, which never renders as a marker."""
    async with box() as sb, sb.session() as sh:
        fake = secrets.token_hex(16)
        script = (f"printf '\\036SBX{fake}:x0:/\\000'; printf '\\036SBX{fake}:e\\000' >&2; "
                  "printf '\\036SBX'; sleep 1; echo after; echo err-after >&2")
        r = await sh.run(script)
        assert r.stdout_bytes == f"\x1eSBX{fake}:x0:/\x00\x1eSBXafter\n".encode()
        assert r.stderr_bytes == f"\x1eSBX{fake}:e\x00err-after\n".encode()
        assert r.exit_code == 0
        await sh.run("set -x")
        r = await sh.run("echo traced; false")
        assert r.stdout == "traced\n" and r.exit_code == 1
        assert "+ echo traced" in r.stderr
        await sh.run("set +x")
        assert (await sh.run("echo clean")).stderr == ""


async def test_interleaved_stdout_and_stderr_stay_apart() -> None:
    async with box(IMAGE_PYTHON) as sb, sb.session() as sh:
        r = await sh.run("for i in $(seq 1 200); do echo out$i; echo err$i >&2; done")
        assert r.stdout == "".join(f"out{i}\n" for i in range(1, 201))
        assert r.stderr == "".join(f"err{i}\n" for i in range(1, 201))
        assert sorted(str(r.combined).splitlines()) == sorted(
            [f"out{i}" for i in range(1, 201)] + [f"err{i}" for i in range(1, 201)])


async def test_aliases_and_bash_where_the_image_has_it() -> None:
    async with box(IMAGE_PYTHON) as sb, sb.session() as sh:
        assert sh.shell == "bash"
        await sh.run("alias hello='echo aliased'")
        assert (await sh.run("hello")).stdout == "aliased\n"
        # With bash, a command given stdin still runs in the shell itself.
        await sh.run("read v; cd /tmp; export FROM_STDIN=$v", stdin="given\n")
        assert (await sh.run("echo $FROM_STDIN $PWD")).stdout == "given /tmp\n"
    async with box() as sb, sb.session() as sh:
        assert sh.shell == "sh"
        await sh.run("alias hello='echo aliased'")
        assert (await sh.run("hello")).stdout == "aliased\n"


async def test_stdin_a_command_leaves_unread_never_reaches_the_shell() -> None:
    """Input the command does not read is dropped, not run by the shell as commands."""
    async with box() as sb, sb.session() as sh:
        evil = b"touch /tmp/pwned\n" * 5000
        r = await sh.run("head -c 3", stdin=evil)
        assert r.stdout == "tou" and r.success
        r = await sh.run("true", stdin=evil)
        assert r.success
        with anyio.fail_after(60):  # the reader may start after a quick command ended
            for n in range(20):
                assert (await sh.run(f"echo {n}", stdin=b"x")).stdout == f"{n}\n"
        assert (await sh.run("ls /tmp/pwned 2>&1; echo rc=$?")).stdout.endswith("rc=1\n")


async def test_a_cd_in_a_subshell_does_not_move_the_session() -> None:
    """Under a POSIX sh a command given stdin runs in a subshell: its ``cd`` is lost, and
    the session's ``cwd`` says where the shell really is (it once took the subshell's)."""
    async with box() as sb, sb.session() as sh:
        assert sh.shell == "sh"
        r = await sh.run("read v; cd /tmp; pwd", stdin="x\n")
        assert r.stdout == "/tmp\n"
        assert sh.cwd == "/workspace"
        assert (await sh.run("pwd")).stdout == "/workspace\n"
        await sh.run("cd /tmp")
        assert sh.cwd == "/tmp"


async def test_exit_in_a_command_given_stdin() -> None:
    """Under a POSIX sh a command given stdin runs in a subshell: its ``exit`` ends only that
    (the result has its status, the shell lives); under bash it ends the shell itself."""
    async with box() as sb, sb.session() as sh:
        with anyio.fail_after(30):
            r = await sh.run("read v; echo got $v; exit 3", stdin="hi\n")
        assert r.exit_code == 3 and r.stdout == "got hi\n" and "shell_ended" not in r.metadata
        r = await sh.run("echo next")
        assert r.stdout == "next\n" and r.stderr == ""  # no stray marker bytes
        for _ in range(10):  # the markers come twice; the first carries the status
            assert (await sh.run("cat >/dev/null; (exit 7)", stdin="x")).exit_code == 7
    async with box(IMAGE_PYTHON) as sb, sb.session() as sh:
        with anyio.fail_after(30):
            r = await sh.run("read v; echo got $v; exit 3", stdin="hi\n")
        assert r.exit_code == 3 and r.stdout == "got hi\n"
        assert r.metadata["shell_ended"] == "true"


async def test_background_job_does_not_hold_the_command() -> None:
    async with box() as sb, sb.session() as sh:
        with anyio.fail_after(20):  # the exec-level drain would add seconds; a hang fails
            r = await sh.run("sleep 60 & echo started")
        assert r.stdout == "started\n" and r.success
        r = await sh.run("sleep 61 >/dev/null 2>&1 & echo $!")
        assert r.stdout.strip().isdigit()


async def test_idle_timeout_and_builtin_loop() -> None:
    async with box() as sb, sb.session() as sh:
        await sh.run("export KEEP=1")
        r = await sh.run("echo one; sleep 30", idle_timeout=1)
        assert r.timed_out and "idle timeout" in r.error and r.stdout == "one\n"
        assert (await sh.run("echo $KEEP")).stdout == "1\n"
        # A loop in the shell itself cannot be killed apart from it: the shell is replaced.
        with anyio.fail_after(30):
            r = await sh.run("while :; do :; done", timeout=1)
        assert r.timed_out and r.metadata.get("shell_ended") == "true"
        assert "replaced" in r.error
        r = await sh.run("echo alive; echo ${KEEP:-gone}")
        assert r.stdout == "alive\ngone\n" and r.metadata["shell"] == "2"


async def test_dead_shell_is_detected_and_restarted_or_raises() -> None:
    async with box() as sb:
        async with sb.session() as sh:
            await sh.run("cd /tmp")
            with anyio.fail_after(20):
                r = await sh.run("echo bye; exit 3")
            assert r.exit_code == 3 and not r.success and r.stdout == "bye\n"
            assert r.metadata["shell_ended"] == "true" and "exited with code 3" in r.error
            r = await sh.run("echo $PWD")  # a fresh shell, in the last directory
            assert r.success and r.stdout == "/tmp\n" and r.metadata["shell"] == "2"
            with anyio.fail_after(20):
                r = await sh.run("kill -9 $$")
            assert r.metadata["shell_ended"] == "true" and not r.success
        async with sb.session(restart=False) as sh:
            r = await sh.run("exit 0")
            assert r.metadata["shell_ended"] == "true"
            assert not sh.alive
            with pytest.raises(SessionClosed, match="restart=False"):
                await sh.run("true")
        with pytest.raises(SessionClosed):
            await sh.run("true")  # closed with its block


async def test_commands_queue_and_sessions_coexist() -> None:
    async with box() as sb, sb.session() as one, sb.session() as two:
        await one.run("cd /tmp; rm -f order")

        async def step(n: int) -> None:
            await one.run(f"echo start{n} >> /tmp/order; sleep 0.3; echo end{n} >> /tmp/order")

        async with anyio.create_task_group() as tg:
            for n in range(3):
                tg.start_soon(step, n)
            tg.start_soon(two.run, "echo other > /tmp/other")
            tg.start_soon(sb.execute_command, "echo exec > /tmp/exec")
        lines = (await one.run("cat /tmp/order")).stdout.split()
        assert len(lines) == 6
        for i in range(0, 6, 2):  # each start followed by its own end: one at a time
            assert lines[i].replace("start", "") == lines[i + 1].replace("end", "")
        assert (await two.run("cat /tmp/other /tmp/exec")).stdout == "other\nexec\n"


async def test_leaving_the_session_kills_what_it_started() -> None:
    async with box() as sb:
        tag = 1000 + secrets.randbelow(9000)
        async with sb.session() as sh:
            await sh.run(f"sleep 4{tag} >/dev/null 2>&1 &")
        assert await processes(sb, f"4{tag}") == []
        assert await processes(sb, "sandbox-session") == []


async def test_truncation_callbacks_and_usage() -> None:
    async with box() as sb, sb.session(usage=True) as sh:
        seen: list[bytes] = []
        r = await sh.run("head -c 100000 /dev/zero; echo tail >&2", max_output_bytes=1000,
                         on_stdout=seen.append)
        assert r.truncated and len(r.stdout_bytes) == 1000 and r.stderr == "tail\n"
        assert sum(map(len, seen)) == 100000
        r = await sh.run("i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done")
        assert r.resource_usage.cpu_time.total_seconds() > 0

        def boom(data: bytes) -> None:
            raise RuntimeError("callback failed")
        with pytest.raises(RuntimeError, match="callback failed"):
            await sh.run("echo x; sleep 30", on_stdout=boom)
        assert (await sh.run("echo fine")).stdout == "fine\n"


async def test_cancelled_run_kills_the_command_and_keeps_the_session() -> None:
    async with box() as sb, sb.session() as sh:
        tag = 1000 + secrets.randbelow(9000)
        with anyio.move_on_after(1):
            await sh.run(f"sleep 5{tag}")
        assert await processes(sb, f"5{tag}") == []
        assert (await sh.run("echo ok")).stdout == "ok\n"


async def test_start_returns_early_then_finishes() -> None:
    async with box() as sb, sb.session() as sh:
        job = await sh.start("echo first; sleep 2; echo second", yield_after=0.5)
        assert isinstance(job, SessionJob) and job.running
        assert job.output == "first\n"
        result = await job.poll(30)
        assert not isinstance(result, SessionJob)
        assert result.stdout == "first\nsecond\n" and result.success
        done = await sh.start("echo quick", yield_after=30)
        assert not isinstance(done, SessionJob) and done.stdout == "quick\n"


async def test_start_write_close_and_kill() -> None:
    async with box(IMAGE_PYTHON) as sb, sb.session() as sh:
        job = await sh.start("cat -n; cd /tmp", yield_after=0.2)
        assert isinstance(job, SessionJob)
        await job.write("hello\n")
        polled = await job.poll(0.5)
        assert isinstance(polled, SessionJob) and polled.output == "     1\thello\n"
        await job.close_stdin()
        result = await job.wait()
        assert result.success and sh.cwd == "/tmp"
        tag = 1000 + secrets.randbelow(9000)
        job = await sh.start(f"sleep 6{tag}", yield_after=0.2)
        assert isinstance(job, SessionJob)
        killed = await job.kill()
        assert killed.signal == "SIGKILL" and not killed.success
        assert await processes(sb, f"6{tag}") == []
        assert (await sh.run("echo next")).stdout == "next\n"


async def test_start_bounds_output_for_a_model() -> None:
    async with box() as sb, sb.session() as sh:
        job = await sh.start("seq 1 100000; sleep 30", yield_after=2, keep_chars=200)
        assert isinstance(job, SessionJob)
        assert job.output.startswith("1\n2\n") and job.output.rstrip().endswith("100000")
        assert "omitted" in job.output and len(job.output) < 400
        result = await job.kill()
        assert result.stdout.endswith("100000\n")  # the result keeps it all


async def test_bad_arguments_are_refused() -> None:
    async with box() as sb, sb.session() as sh:
        for bad in ("", "   "):
            with pytest.raises(ConfigError, match="non-empty"):
                await sh.run(bad)
        with pytest.raises(ConfigError, match="timeout"):
            await sh.run("true", timeout=-1)
        with pytest.raises(ConfigError, match="yield_after"):
            await sh.start("true", yield_after=float("nan"))


#: Another process of the sandbox user, as the agent would leave it: stop the session's shell,
#: take the next command line off its stdin (/proc/<pid>/fd/0), never let it run, and answer
#: with fake output and markers for it on the shell's stdout and stderr (fd/1, fd/2).
FORGER = r"""pid=$1
trap 'kill -CONT "$pid"' EXIT
kill -STOP "$pid"
echo stopped
if line=$(head -n 2 "/proc/$pid/fd/0"); then
  rest=${line#*036SBX}; n=${rest%%:*}
  case $rest in
    *":o"*) t=${rest#*:o}; end="o${t%%:*}:/forged";;
    *) end="x0:/forged";;
  esac
  printf "42 passed\n\036SBX%s:%s\000" "$n" "$end" >"/proc/$pid/fd/1"
  printf "\036SBX%s:e\000" "$n" >"/proc/$pid/fd/2"
  echo forged
fi
if true >"/proc/$pid/fd/1"; then echo stdout-open; fi
"""

#: Where a session's shell is closed to other processes: a non-root user under runc (gVisor
#: cannot run an unreadable program), a writable and a read-only root; and the process backend,
#: where the shell's copy is the sandbox user's own (a racing process could replace it before
#: it runs), so it is closed but not promised (``guarded`` False).
GUARDED_PLACES = {
    "busybox-1000": {"image": IMAGE_BUSYBOX},
    "python-1000-readonly": {"image": IMAGE_PYTHON, "security": SecurityPolicy(
        run_as_user="1000", read_only_root=True)},
    "process-backend": {"image": IMAGE_BUSYBOX, "type": "process"},
}


@pytest.mark.parametrize("place", sorted(GUARDED_PLACES))
async def test_another_process_cannot_forge_a_session_result(place: str) -> None:
    """The issue-26 reproduction: a process started beside the session (here by an exec)
    steals the grader's next command off the shell's stdin and writes fake output with valid
    markers. The shell's /proc entries are closed to it, so the command runs and its own
    status comes back."""
    async with box(**GUARDED_PLACES[place]) as sb, sb.session() as sh:  # type: ignore[arg-type]
        pid = (await sh.run("echo $$")).stdout.strip()
        async with sb.stream_command(["/bin/sh", "-c", FORGER, "forger", pid]) as forger:
            async for chunk in forger:  # the shell is stopped: the next line waits for it
                if chunk.stream == "stdout" and chunk.data.startswith(b"stopped"):
                    break
            with anyio.fail_after(60):
                r = await sh.run("echo ran > /tmp/ran; false")
            said = (await forger.wait()).combined
        assert r.exit_code == 1 and not r.success and r.stdout == "" and sh.cwd != "/forged"
        assert "forged" not in said and "stdout-open" not in said, said
        assert "Permission denied" in said
        assert (await sb.execute_command("cat /tmp/ran")).stdout == "ran\n"
        assert sh.guarded == (place != "process-backend")
        left = await sb.execute_command("ls -a /tmp /dev")  # a copy of its own is removed
        assert ".sandbox-session" not in left.stdout or place != "process-backend"


async def test_a_root_sandbox_user_is_not_promised_a_guarded_session() -> None:
    """Root in the sandbox owns the shell's copy and could replace it: never ``guarded``."""
    async with box(security=SecurityPolicy(run_as_user="root")) as sb, sb.session() as sh:
        assert not sh.guarded
        assert (await sh.run("echo ok")).stdout == "ok\n"


#: Lists a program's descriptors past stdout/stderr that are pipes or sockets: what another
#: process of the user could open through /proc/<program>/fd (the program is not guarded).
LIST_CHANNELS = ("import os\n"
                 "for fd in sorted(map(int, os.listdir('/proc/self/fd'))):\n"
                 "    if fd > 2:\n"
                 "        try: t = os.readlink(f'/proc/self/fd/{fd}')\n"
                 "        except OSError: continue\n"
                 "        if t.startswith(('pipe:', 'socket:', '/dev/.sandbox-session')):\n"
                 "            print(fd, t)\n")


@pytest.mark.parametrize("how", ["stdin", "start"])
async def test_no_program_a_command_runs_holds_the_sessions_command_channel(how: str) -> None:
    """Under bash a command fed stdin runs in the shell itself (lastpipe), which parks its
    own stdin (the SDK's command channel) at fd 255 without close-on-exec: every program the
    command ran carried it, and another process of the user could write commands into the
    guarded shell through /proc/<program>/fd/255. The programs must hold no such channel."""
    async with box(image=IMAGE_PYTHON) as sb, sb.session() as sh:
        assert sh.shell == "bash" and sh.guarded
        cmd = f"python3 -c {shlex.quote(LIST_CHANNELS)}"
        if how == "stdin":
            r = await sh.run(cmd, stdin="hi\n")
        else:
            job = await sh.start(cmd, yield_after=30)
            assert not isinstance(job, SessionJob)
            r = job
        assert r.success, r
        assert r.stdout == "", f"the program held: {r.stdout}"
        assert (await sh.run("echo still")).stdout == "still\n"
