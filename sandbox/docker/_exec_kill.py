"""Killing a Docker exec and every process it started.

The engine cannot kill an exec. So each exec carries a marker variable (`MARKER_VAR`). Where
the SDK reaches the container's cgroup (root beside a local engine), `_host_kill` freezes it
and kills the command's processes from outside: nothing in the sandbox can starve that. Else
a second exec, run as the same user, runs the marker sweep (`.._sweep`): it stops and kills
every process whose environment holds the marker, the command and everything it started, a
fork bomb included, as long as the container has a free pid for that exec. The engine facts
behind this are in docs/engine-notes.md, section "Killing a command's process tree".
"""

from __future__ import annotations

import functools
import os

import anyio

from .._constants import ROOT_PATH
from .._errors import SandboxError
from .._sweep import MARKER_VAR, SWEEP_ATTEMPTS, sweep_argv
from ._exec_gate import ExecGate
from ._gateway import Engine
from ._host import find_container_cgroup
from ._host_kill import kill_from_host
from ._root_env import is_root_user as _as_root

#: How long a kill waits for a command whose start the SDK did not see to show up.
START_SETTLE = 5.0


async def sweep(engine: Engine, container_id: str, user: str, marker: str, signal: str,
                gate: ExecGate | None = None) -> bool:
    """Send `signal` (a name such as ``"KILL"``) to every process carrying `marker`, in a
    second exec as `user`; with KILL, repeat until none is left. Shielded, at most 30 s, and
    silent when the sweep cannot run (the container is gone or paused, the engine is gone).

    Returns whether the sweep ran to its end (with KILL: none of them was left).
    """
    ok = False
    with anyio.CancelScope(shield=True), anyio.move_on_after(30):
        async with (gate or ExecGate()).held():
            for _attempt in range(SWEEP_ATTEMPTS):
                try:
                    killer = await engine.create_exec("kill the command", container_id, {
                        "Cmd": sweep_argv(marker, signal),
                        "User": user, "AttachStdout": True, "AttachStderr": True,
                        # As root: `tr` and `sleep` from the system's directories only.
                        "Env": [f"PATH={ROOT_PATH}"] if _as_root(user) else [],
                    })
                    async with await engine.attach_exec("kill the command", killer) as s:
                        while await s.read_out("kill the command") is not None:
                            pass
                    done = await engine.inspect_exec(killer)
                except SandboxError:
                    break
                # Exit 0: nothing carrying the marker is left. Otherwise the sweep could not
                # start or finish (no free pid under a fork bomb): try again shortly.
                ok = done.get("ExitCode") == 0
                if ok or signal != "KILL":
                    break
                await anyio.sleep(0.2)
    return ok


async def kill_command(engine: Engine, container_id: str, exec_id: str, user: str,
                       marker: str, gate: ExecGate) -> bool:
    """SIGKILL the command `exec_id` and everything it started; True when none of them was
    seen left afterwards. From the host when the SDK can reach the container's cgroup
    (`_host_kill`: no pid of the container needed), else by the marker sweep. Shielded."""
    done: bool | None = None
    with anyio.CancelScope(shield=True):
        await gate.wait_started(engine, exec_id, settle=START_SETTLE)
        if os.geteuid() == 0:
            done = await _kill_from_host(engine, container_id, exec_id,
                                         f"{MARKER_VAR}={marker}", gate)
        if done is None:
            done = await sweep(engine, container_id, user, marker, "KILL", gate)
    return bool(done)


async def kill_marked(engine: Engine, container_id: str, entry: str,
                      gate: ExecGate, shell: int = 0, since: int = 0,
                      spare: tuple[str, ...] = ()) -> bool | None:
    """SIGKILL from the host every process whose environment holds ``entry`` ("NAME=value")
    and their descendants (a session's command), the subshells between those and the
    session's ``shell``, and the shell's children started since the tick ``since`` (but for
    ``spare``'s, `.._below_shell`); None where the host path is not available or sees none
    of them (then the caller sweeps)."""
    done: bool | None = None
    if os.geteuid() == 0:
        with anyio.CancelScope(shield=True):
            done = await _kill_from_host(engine, container_id, "", entry, gate, shell, since,
                                         spare)
    return done


async def _kill_from_host(engine: Engine, container_id: str, exec_id: str, entry: str,
                          gate: ExecGate, shell: int = 0, since: int = 0,
                          spare: tuple[str, ...] = ()) -> bool | None:
    """`kill_from_host` for the exec (or, with no ``exec_id``, for ``entry`` alone); None
    when the host cannot see it (see there)."""
    try:
        pid = int((await engine.inspect_exec(exec_id, deadline=10)).get("Pid") or 0) \
            if exec_id else 0
        cgroup = find_container_cgroup(pid, container_id)
        if cgroup is None:  # the exec's process is gone: find the cgroup through the container's
            data = await engine.query_json("inspect the sandbox",
                                           f"containers/{container_id}/json", deadline=10)
            main = int(((data or {}).get("State") or {}).get("Pid") or 0)
            cgroup = find_container_cgroup(main, container_id)
    except SandboxError:
        return None
    if cgroup is None:
        return None
    done: bool | None = False
    with anyio.move_on_after(40):
        # Closed: never thaw a checkpoint's freeze, and never freeze while an exec of the SDK
        # is starting (runc refuses to exec into a frozen container, and a `runc init` caught
        # joining it can wedge the engine). Not settled within 5 s (a loaded engine): kill
        # without freezing, and say so if that could not be confirmed.
        async with gate.closed(engine, settle=5) as settled:
            done = await anyio.to_thread.run_sync(
                functools.partial(kill_from_host, cgroup, entry, pid, freeze=settled,
                                  shell=shell, since=since, spare=spare),
                abandon_on_cancel=True)
    return done
