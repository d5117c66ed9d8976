"""The leftover-child attack of ``test_session_channels`` as one function any backend's sandbox
can be handed to (the process backend run by root or by another host user, Kubernetes): it
plays the attacker and returns what each step saw, for the caller to judge.

A session command leaves ``sleep 600 &`` behind, holding the shell's stdout and stderr. Then
another process of the sandbox user (a) reads every descriptor it can open through ``/proc``
while the next command is sent, the shell stopped meanwhile (its text, with the nonces, must
not show), (b) sets the child's channels to mode 0600 and reopens them for reading while a
later command prints a secret (output and end markers must stay the session's), (a') opens
the shell's own descriptors and stops it while the next command is sent, and (c)
ptraces the child to make it fchmod, reopen, read and write its channels; the status of the
failing command after it must stay 1.
"""

from __future__ import annotations

import secrets
from typing import Any

import anyio

from sandbox import Sandbox
from tests.integration.test_session_channels import THIEF as _THIEF
from tests.integration.test_session_channels import TRACER

__all__ = ["THIEF", "THIEF_SELF", "TRACER", "attack"]

#: The round 9 thief, which also tries sockets (the process backend's sealed channels) and
#: gVisor's host-backed descriptors (``host:[N]`` there, for the exec's pipes).
THIEF = _THIEF.replace('startswith(("pipe:", ', 'startswith(("pipe:", "socket:", "host:", ')
assert THIEF != _THIEF
#: The same, which also takes the stopped process's own descriptors (the shell's stdin).
THIEF_SELF = THIEF.replace("str(os.getppid()), str(stop))", "str(os.getppid()))")
assert THIEF_SELF != THIEF


async def _until_ready(proc: Any) -> str:
    seen = b""
    async for chunk in proc:
        seen += chunk.data
        if b"ready" in chunk.data:
            break
    return seen.decode(errors="replace")


async def attack(sb: Sandbox, *, limit: float = 60) -> dict[str, Any]:
    """Play the three attacks on a session of ``sb`` (python3 in the image); what they saw."""
    out: dict[str, Any] = {}
    secret = "secret-" + secrets.token_hex(8)
    canary = "canary-" + secrets.token_hex(8)
    async with sb.session() as sh:
        out["guarded"] = sh.guarded
        with anyio.fail_after(limit):
            pid = (await sh.run("sleep 600 & echo $!")).stdout.strip()
            assert pid.isdigit(), pid
            out["child_fds"] = (await sb.execute_command(
                f"readlink /proc/{pid}/fd/0 /proc/{pid}/fd/1 /proc/{pid}/fd/2")).stdout.split()
        # (b) chmod back and reopen the child's channels, then a later command prints.
        async with sb.stream_command(["python3", "-c", THIEF, "3", "-", "1", pid]) as thief:
            out["early"] = await _until_ready(thief)
            with anyio.fail_after(limit):  # stolen end markers leave it to its time limit
                r = await sh.run(f"echo {secret}; echo {secret} >&2; false", timeout=10)
            out["thief"] = (await thief.wait()).combined
        out["secret_stolen"] = secret in out["thief"] or "SBX" in out["thief"]
        out["later"] = {"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                        "secret": secret}
        # (a) every descriptor open to the user, the shell stopped while the text is sent.
        with anyio.fail_after(limit):
            await sh.run("sleep 600 &", stdin="x\n")
            shell = (await sh.run("echo $$")).stdout.strip()
        async with sb.stream_command(["python3", "-c", THIEF, "4", shell, "1"]) as thief:
            await _until_ready(thief)
            with anyio.fail_after(limit):
                r = await sh.run(f": {canary}; false", timeout=10)
            said = (await thief.wait()).combined
        out["canary_read"] = canary in said
        out["canary_thief"] = said
        out["canary_status"] = r.exit_code
        # (a') the shell's own stdin, the shell stopped once it is open (a plain shell's is
        # open to its user: gVisor, where no unreadable copy runs).
        canary = "canary-" + secrets.token_hex(8)
        async with sb.stream_command(["python3", "-c", THIEF_SELF, "4", shell, "0", shell]
                                     ) as thief:
            await _until_ready(thief)
            with anyio.fail_after(limit):
                r = await sh.run(f": {canary}; false", timeout=10)
            said = (await thief.wait()).combined
        out["shell_stdin_read"] = canary in said
        out["shell_thief"] = said
        out["shell_stdin_status"] = r.exit_code
        # (c) the traced child (a new one: a timeout above may have killed the first).
        with anyio.fail_after(limit):
            pid = (await sh.run("sleep 600 & echo $!")).stdout.strip()
            traced = await sb.execute_command(["python3", "-c", TRACER, pid, "INJECTED\n"])
            out["tracer"] = [traced.exit_code, traced.stdout.strip(), traced.stderr[-300:]]
            r = await sh.run("false")
            out["after_trace_status"] = r.exit_code
            out["alive"] = (await sh.run("echo alive")).stdout
    return out
