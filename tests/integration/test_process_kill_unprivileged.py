"""Timeouts on the process backend with the SDK run by a user other than root (uid 65534).

The host-side kill sweep finds a command's processes by the marker in their environment. A
process running a program its user cannot read (the session's guarded shell, what it forks,
busybox applets it starts again through ``/proc/self/exe``, any unreadable copy a command
makes) is not dumpable, and its ``/proc/<pid>/environ`` then belongs to the host's root: root
reads it, another SDK user was refused and never found those processes. Before the fix, a
session command's timeout killed nothing, the shell was replaced after the kill's grace (its
variables lost: ``shell_ended``), and an ``execute_command`` child that double-forked into an
unreadable copy outlived its timeout. The sweep now reads such a process's environment from
its memory (``process_vm_readv``: that SDK owns the sandbox's user namespace), as the kernel
allows it, and only the timed-out command's processes are killed.
"""

from __future__ import annotations

import textwrap

import pytest

from sandbox import IMAGE_BUSYBOX
from sandbox.process._rootfs import resolve_rootfs
from tests.integration._unprivileged import run_as

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]
UID = 65534

_SCRIPT = textwrap.dedent(r"""
    import asyncio, json, sys
    from sandbox import Command, ResourceLimits, Sandbox, SandboxConfig, SecurityPolicy

    PS = (r"for d in /proc/[0-9]*; do [ $d = /proc/$$ ] && continue; "
          r"c=$(tr '\0' ' ' < $d/cmdline 2>/dev/null) || continue; echo \"$c\"; done")
    # An unreadable copy of busybox named sleep, started in a new session and re-parented
    # (double fork): only its marker ties it to the command.
    ESCAPE = ("mkdir -p /tmp/h && cp /bin/busybox /tmp/h/sleep && chmod 0111 /tmp/h/sleep && "
              "(setsid /tmp/h/sleep 7003 >/dev/null 2>&1 </dev/null &); sleep 7004")

    async def running(sb):
        r = await sb.execute_command(PS)
        return sorted(w for w in r.stdout.split() if w.startswith("700"))

    async def main():
        cfg = SandboxConfig(type="process", image=sys.argv[1],
                            security=SecurityPolicy(read_only_root=True),
                            resources=ResourceLimits(allow_unbounded=("cpu_limit",)))
        out = {}
        async with Sandbox(cfg) as sb:
            async with sb.session() as sh:
                # An earlier command's background job: no part of the next command.
                await sh.run("export X=1; sleep 7001 >/dev/null 2>&1 &")
                r = await sh.run("echo a; sleep 7002 & sleep 7002", timeout=1)
                out["timeout"] = [r.timed_out, r.stdout, dict(r.metadata), r.error]
                out["x"] = (await sh.run("echo $X")).stdout
                out["after_session"] = await running(sb)
                await sh.run("kill $!")
            r = await sb.execute_command(Command.shell(ESCAPE, timeout=1))
            out["exec"] = [r.timed_out, r.error]
            out["after_exec"] = await running(sb)
        print(json.dumps(out))

    asyncio.run(main())
""")


async def test_a_timeout_kills_the_commands_processes_and_keeps_the_shell() -> None:
    root = (await resolve_rootfs(IMAGE_BUSYBOX)).path  # exported by root, readable by all
    out = await run_as(UID, _SCRIPT, str(root))
    timed_out, stdout, metadata, error = out["timeout"]
    assert timed_out and stdout == "a\n", out
    # Before: "the command did not end when its processes were killed ...; the shell was
    # replaced", and X was gone.
    assert "shell_ended" not in metadata, error
    assert out["x"] == "1\n", out
    # The command's two sleeps are gone; the earlier command's job was left alone.
    assert out["after_session"] == ["7001"], out
    # Before: ["7003"], the re-parented unreadable copy outlived its command's timeout.
    assert out["exec"][0] and out["after_exec"] == [], out
