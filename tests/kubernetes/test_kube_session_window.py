"""The start-up window of a Kubernetes session's shell, played by the attacker on the local
cluster (a real kubelet, containerd and runc; the fake API server runs no processes).

A Kubernetes exec takes only argv, so every command starts under the SDK's ``/bin/sh``
wrapper, which sets the environment and working directory and then ``exec``s the program.
For a session that program is the unreadable copy of the shell (``_session_shell``): non-
dumpable, its ``/proc`` entries closed to the sandbox user. Found in round 11's review: the
wrapper before it (``env``, then ``/bin/sh -c``) was readable, so dumpable, and held the
exec's stdin, stdout and stderr until that ``exec``. A process of the sandbox user left by an
earlier command that saw the wrapper in time (it may stop it: SIGSTOP needs only the same uid)
opened those pipes through ``/proc/<pid>/fd`` and kept them: it read every later command as
sent, nonces and success token included, and wrote a success marker for a failing command.
Now the exec's first program is the unreadable copy itself, running the wrapper (``_exec``):
no dumpable process ever holds the session's channels.

The attacker (`WINDOW_THIEF`) polls ``/proc`` for a session wrapper (its argv is public),
stops it, reads its environment and opens its fd 0, 1 and 2, and lets it go. Asked to, it
stops the shell, reads what the SDK sends next off the stolen stdin and answers the command
with a forged success. The test retries a few sessions until the attacker saw one in time, so
a lost race never passes for a refusal.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from sandbox import Sandbox
from sandbox._backend import ProcessSpec
from sandbox._session import Session
from sandbox._sweep import MARKER_VAR
from sandbox.kubernetes._exec import wrap_argv
from tests.kubernetes._cluster import LOCAL_PYTHON_IMAGE, cluster

#: Sessions tried until the attacker sees one's wrapper before it became the shell.
ATTEMPTS = 8

#: ``python3 -c WINDOW_THIEF <seconds>``: watch /proc for session wrappers (argv holding
#: ``sandbox-exec`` and ``watched``), stop each at once, read its environ, open its fd 0 (read
#: and write ends), 1 and 2 (write ends), continue it. Reads its stdin: ``arm <pid>`` prints
#: ``armed <json>`` (what it saw of that pid; it stops that pid first if it holds its stdin),
#: then, holding the stdin, reads the next command sent, writes a success marker for it and
#: prints ``done <json>``.
WINDOW_THIEF = r"""
import json, os, re, select, signal, sys, time
end = time.monotonic() + float(sys.argv[1])
me = {str(os.getpid()), str(os.getppid())}
old = set(os.listdir("/proc"))
seen = {}
held = {}
def look(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return None
    if b"sandbox-exec" not in args or b"watched" not in args:
        return False
    try:
        os.kill(int(pid), signal.SIGSTOP)
    except OSError:
        return None
    got = {"argv0": args[0].decode(errors="replace")}
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            got["environ"] = "SANDBOX_EXEC_ID=" in f.read().decode(errors="replace")
    except OSError as e:
        got["environ"] = e.strerror
    fds = {}
    for n, flags in ((0, os.O_RDONLY), (0, os.O_WRONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        key = f"{n}{'r' if flags == os.O_RDONLY else 'w'}"
        try:
            fds[key] = os.open(f"/proc/{pid}/fd/{n}", flags | os.O_NONBLOCK)
            got[key] = "opened " + os.readlink(f"/proc/{pid}/fd/{n}")
        except OSError as e:
            got[key] = e.strerror
    os.kill(int(pid), signal.SIGCONT)
    held[pid] = fds
    seen[pid] = got
    return True
young = {}
print("ready", flush=True)
line = b""
while time.monotonic() < end:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid in old or pid in me or pid in seen:
            continue
        first = young.setdefault(pid, time.monotonic())
        if look(pid) is False and time.monotonic() - first > 2:
            old.add(pid)  # not a session wrapper, even after its exec
    if not select.select([0], [], [], 0)[0]:
        continue
    data = os.read(0, 4096)
    if not data:
        break
    line += data
    if not line.endswith(b"\n"):
        continue
    pid = line.split()[1].decode()
    line = b""
    fds = held.get(pid, {})
    said = {"seen": seen.get(pid), "forged": False, "read": ""}
    if "0r" not in fds:
        print("armed", json.dumps(said), flush=True)
        print("done", json.dumps(said), flush=True)
        continue
    os.set_blocking(fds["0r"], True)
    os.kill(int(pid), signal.SIGSTOP)
    print("armed", json.dumps(said), flush=True)
    text = b""
    found = None
    while found is None or not text.endswith(b">&2\n"):
        if not select.select([fds["0r"]], [], [], max(0.0, end - time.monotonic()))[0]:
            break
        text += os.read(fds["0r"], 65536)
        found = re.search(rb"SBX([0-9a-f]{32}):o([0-9a-f]+):", text)
    said["read"] = text.decode(errors="replace")
    if found is not None and "1w" in fds and "2w" in fds:
        nonce, token = found.group(1), found.group(2)
        os.write(fds["1w"], b"\x1eSBX" + nonce + b":o" + token + b":/\0")
        os.write(fds["2w"], b"\x1eSBX" + nonce + b":e\0")
        said["forged"] = True
    os.kill(int(pid), signal.SIGCONT)
    print("done", json.dumps(said), flush=True)
    break
"""


class _Lines:
    """The thief's stdout as lines, across calls."""

    def __init__(self, thief: Any) -> None:
        self._thief = thief
        self._chunks = thief.__aiter__()
        self._buf = b""

    async def next(self, word: str) -> str:
        """The rest of the next line starting with ``word``."""
        prefix = word.encode()
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                if line.startswith(prefix):
                    return line[len(prefix):].strip().decode()
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                raise AssertionError(f"the thief ended without saying {word!r}: "
                                     f"{self._buf!r}") from None
            if chunk.stream == "stdout":
                self._buf += chunk.data

    async def said(self, word: str) -> dict[str, Any]:
        out: dict[str, Any] = json.loads(await self.next(word))
        return out


async def _one(sb: Sandbox, thief: Any, lines: _Lines, canary: str) -> dict[str, Any] | None:
    """One session against the thief: what it saw and did, or None (it saw no wrapper)."""
    sh: Session
    async with sb.session() as sh:
        with anyio.fail_after(60):
            pid = (await sh.run("echo $$")).stdout.strip()
            assert pid.isdigit(), pid
            await thief.write_stdin(f"arm {pid}\n")
            armed = await lines.said("armed")
            if armed["seen"] is None:
                return None
            r = await sh.run(f": {canary}; false", timeout=10)
            done = await lines.said("done")
            after = await sh.run("false")
        return {"seen": armed["seen"], "read": done["read"], "forged": done["forged"],
                "status": r.exit_code, "after": after.exit_code}


async def _attack(sb: Sandbox) -> dict[str, Any]:
    """Sessions against the thief until it saw one's wrapper in time: what it got."""
    canary = "canary-" + secrets.token_hex(8)
    for _ in range(ATTEMPTS):
        async with sb.stream_command(["python3", "-c", WINDOW_THIEF, "120"]) as thief:
            lines = _Lines(thief)
            await lines.next("ready")
            out = await _one(sb, thief, lines, canary)
        if out is not None:
            out["canary_read"] = canary in out["read"]
            return out
    pytest.fail(f"the thief saw no session wrapper in {ATTEMPTS} sessions")


@pytest.mark.asyncio
async def test_no_process_takes_the_session_channels_as_its_shell_starts(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The attacker sees the session's wrapper (its argv is public) and stops it, yet opens
    none of its descriptors and reads no environment: the next command's text (the canary,
    its nonces and success token) is not read and the failing command stays a failure.
    Before: all opened, the canary read, ``false`` came back with exit code 0."""
    async with cluster(tmp_path, request.config) as kube:
        if not kube.local:
            pytest.skip("needs the local cluster (python3 in the Pod, real processes)")
        backend = kube.backend(kube.config(image=LOCAL_PYTHON_IMAGE))
        async with Sandbox(backend=backend) as sb:
            out = await _attack(sb)
    assert out["status"] == 1 and out["after"] == 1, out
    assert not out["canary_read"] and not out["forged"], out
    seen = out["seen"]
    assert seen["environ"] is not True, out
    for key in ("0r", "0w", "1w", "2w"):
        assert not seen[key].startswith("opened"), out


def test_only_a_session_shells_copy_runs_its_own_wrapper() -> None:
    """The copy (`shell_argv`: bash with its options, or sh) is the exec's first program and
    starts itself again; a plain command, a ``/bin/sh -c`` session shell (``shell=``, no copy)
    and a framed exec keep ``env`` + ``/bin/sh``."""
    copy = ("/tmp/.sandbox-session-x/bash", "--posix", "--noprofile", "--norc", "-p")
    spec = ProcessSpec(argv=copy, env={"A": "1"}, sealed=True)
    argv = wrap_argv(spec, marker="m", nonce="n", framed=False, watched=True)
    assert argv[:len(copy) + 1] == [*copy, "-c"] and argv[-len(copy):] == list(copy), argv
    assert "A=1" in argv and f"{MARKER_VAR}=m" in argv, argv
    sh_copy = wrap_argv(attrs.evolve(spec, argv=("/dev/.sandbox-session-y/sh",)),
                        marker="m", nonce="n", framed=False, watched=True)
    assert sh_copy[:2] == ["/dev/.sandbox-session-y/sh", "-c"], sh_copy
    for other, watched in (((("/bin/sh", "-c", "exec zsh", "s")), True), (copy, False),
                           (("/bin/cat",), False)):
        argv = wrap_argv(attrs.evolve(spec, argv=other), marker="m", nonce="n",
                         framed=False, watched=watched)
        assert argv[:3] == ["env", f"{MARKER_VAR}=m", "/bin/sh"], argv
