"""Kill a command from the engine's host: freeze the container's cgroup, SIGKILL the command's
processes, thaw, and look again until none is left.

The marker sweep is an exec, and an exec needs a free pid in the container: a fork bomb at the
process limit starves it, and the command lives on. This path needs nothing inside the
container. It works where the SDK runs as root in the engine's pid namespace (the usual local
engine); elsewhere `_host.find_container_cgroup` gives None and the sweep is all there is.

What it kills: every process of the container whose environment holds the command's marker
(as the sweep does), the exec's own process (the one whose parent is outside the container,
given by the engine's ``Pid``) and, for a session's command, the subshells up to its shell and
the shell's children started since the command was sent (`.._below_shell`), and every
descendant of these, all seen at one frozen instant so a fork loop cannot outrun it. Each
process is judged by what the host's /proc says, never by anything the sandbox reports (the
shell is matched by its pid in the container only among the execs' own processes).
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import time
from pathlib import Path

from .._below_shell import between, forked_since, ns_pid
from .._proc_environ import has_entry, has_name, read_environ_file
from .._sweep import MARKER_VAR
from ._host import PROC_ROOT, ContainerCgroup, ProcStat, read_stat

#: How long a freeze may take to settle before the kill goes on regardless (a task stuck in
#: uninterruptible sleep keeps a v1 freezer at FREEZING).
FREEZE_SETTLE = 1.0
#: How long the killed processes may take to be gone, per round.
REAP_WAIT = 3.0
#: Freeze-scan-kill rounds before the kill is reported unconfirmed.
ROUNDS = 5


def _stat(pid: int, proc: Path) -> ProcStat | None:
    """Its stat, or None when it cannot be read at all (gone, or not ours to see)."""
    try:
        return read_stat(pid, proc)
    except (OSError, ValueError):
        return None


#: The variable every exec of the SDK carries (`._exec_kill`), the session's shell included.
_EXEC_NAME = MARKER_VAR.encode()


def _environ(pid: int, proc: Path) -> bytes:
    """The process's environment as /proc gives it (at most `MAX_ENVIRON` bytes; empty when
    it cannot be read)."""
    try:
        return read_environ_file(proc / str(pid) / "environ")
    except OSError:
        return b""


def _targets(cg: ContainerCgroup, needle: bytes, root: int, proc: Path,
             shell: int = 0, since: int = 0,
             spare: tuple[bytes, ...] = ()) -> dict[int, int] | None:
    """pid -> start time of every live process to kill, read while the cgroup is frozen;
    None when the cgroup cannot be listed. A session's ``shell`` (its pid in the container):
    the subshells between its command's marked processes and it too, and the shell's
    children started since the tick ``since`` the command was sent (`.._below_shell`)."""
    pids = cg.pids()
    if pids is None:
        return None
    procs = {pid: st for pid in pids if (st := _stat(pid, proc)) is not None}

    @functools.cache
    def facts(pid: int) -> tuple[bool, bool]:
        """(it holds this command's marker, it sets the exec's variable): its environment
        read once per look, and not kept (4 MiB per process of a fork bomb would add up)."""
        env = _environ(pid, proc)
        return has_entry(env, needle), has_name(env, _EXEC_NAME)

    seeds = [pid for pid, st in procs.items() if not st.zombie and facts(pid)[0]]
    # The exec's own process: its parent (the engine's shim) is outside the container.
    if root in procs and procs[root].ppid not in procs:
        seeds.append(root)
    parents = {pid: st.ppid for pid, st in procs.items()}
    inner = functools.partial(ns_pid, proc=proc)
    seeds.extend(between(seeds, parents, shell, inner))

    def exec_root(pid: int) -> int:
        """Its pid in the container when it is an exec's own process, as the session's shell
        is (its parent outside, the exec's marker set), else 0: no other process of the
        container (gVisor's own, seen from the host) can be taken for the shell."""
        if procs[pid].ppid in procs or not facts(pid)[1]:
            return 0
        return inner(pid)

    # The shell's environment: a fork of it that ran no program shows the same bytes.
    shell_pid = next((pid for pid in procs if exec_root(pid) == shell), 0) \
        if shell > 1 and since > 0 else 0
    shell_env = _environ(shell_pid, proc) if shell_pid else b""

    def shell_fork(pid: int) -> bool:
        return bool(shell_env) and pid != shell_pid and _environ(pid, proc) == shell_env

    def spared(pid: int) -> bool:
        env = _environ(pid, proc) if spare else b""
        return any(has_entry(env, entry) for entry in spare)

    seeds.extend(forked_since(parents,
                              {pid: st.start for pid, st in procs.items() if not st.zombie},
                              shell, exec_root, since,
                              spared, shell_fork))
    children: dict[int, list[int]] = {}
    for pid, st in procs.items():
        children.setdefault(st.ppid, []).append(pid)
    found: dict[int, int] = {}
    while seeds:
        pid = seeds.pop()
        if pid in found:
            continue
        if not procs[pid].zombie:
            found[pid] = procs[pid].start
        seeds.extend(children.get(pid, ()))
    return found


def _gone(pid: int, start: int, proc: Path) -> bool:
    st = _stat(pid, proc)
    return st is None or st.zombie or st.start != start


def _wait_frozen(cg: ContainerCgroup) -> None:
    until = time.monotonic() + FREEZE_SETTLE
    while cg.state() != "FROZEN" and time.monotonic() < until:
        time.sleep(0.001)


def kill_from_host(cg: ContainerCgroup, marker_entry: str, root_pid: int, *,
                   freeze: bool = True, proc: Path = PROC_ROOT,
                   shell: int = 0, since: int = 0, spare: tuple[str, ...] = ()) -> bool | None:
    """SIGKILL the command's processes (see the module doc); True once a frozen look finds
    none left, False if they could not be confirmed gone; None when the host does not see the
    command at all (the first look found none of its processes: another runtime such as
    gVisor, or it ended), so another way must decide. Blocking: run it in a thread.

    A container someone else froze (a pause) is not thawed here: its processes, SIGKILL
    pending, die the moment it is, before running another instruction; none can fork
    meanwhile. So one look at it is the whole story, and that counts as confirmed.

    ``freeze=False`` (an exec of the SDK may still be starting: freezing its ``runc init``
    can wedge the engine) looks and kills without freezing, round after round; a fork loop
    may then outrun it, which is reported as False, never claimed.
    """
    needle = marker_entry.encode()
    spared = tuple(entry.encode() for entry in spare)
    for round_ in range(ROUNDS):
        state = cg.state()
        thawed = state == "THAWED"
        froze = freeze and thawed and cg.set_frozen(True)
        try:
            if froze:
                _wait_frozen(cg)
            found = _targets(cg, needle, root_pid, proc, shell, since, spared)
            for pid in found or ():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        finally:
            if froze:
                cg.set_frozen(False)
        if found is None:
            return False
        if not found:
            return None if round_ == 0 else True
        if state == "FROZEN":  # paused by someone else: they die when it is thawed
            return True
        until = time.monotonic() + REAP_WAIT
        while time.monotonic() < until and \
                not all(_gone(pid, start, proc) for pid, start in found.items()):
            time.sleep(0.01)
    return False
