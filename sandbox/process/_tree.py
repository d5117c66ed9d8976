"""Find and signal every process one command started, seen from the host's /proc.

A command is the process the backend spawned in the sandbox and everything below it. Its
descendants are found by parent links; a process that left the tree (a double fork re-parents
to the sandbox's init) is still found by the marker variable in its environment, but only
inside the sandbox's own pid namespace, so nothing outside the sandbox can ever be signalled.
KILL first stops every member, so a fork loop cannot outrun the sweep.
"""

from __future__ import annotations

import contextlib
import os
import signal as _signal
import time

from .._below_shell import between, forked_since, ns_pid
from .._proc_environ import has_entry
from .._sweep import MARKER_VAR
from ._environ import read_environ

__all__ = ["MARKER_VAR", "members", "sweep"]

def _pid_ns(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


def _table() -> tuple[dict[int, int], dict[int, int]]:
    """pid -> parent pid, and pid -> start tick, of every live (not zombie) process now
    visible."""
    parents: dict[int, int] = {}
    starts: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            fields = stat.rsplit(b")", 1)[1].split()
            if fields[0] != b"Z":  # a zombie is already dead: nothing to signal
                starts[int(name)] = int(fields[19])  # field 22: started, ticks since boot
                parents[int(name)] = int(fields[1])
    return parents, starts


def _has_marker(pid: int, marker: bytes) -> bool:
    env = read_environ(pid)  # from its memory where /proc is closed (`_environ`)
    return env is not None and has_entry(env, marker)


def _spared(pid: int, spare: tuple[bytes, ...]) -> bool:
    """It carries the exact marker of a command that ended in the send's tick."""
    if not spare:
        return False
    env = read_environ(pid)
    return env is not None and any(has_entry(env, entry) for entry in spare)


def members(roots: set[int], marker: str, sandbox_ns: str, *, entry: str = "",
            shell: int = 0, since: int = 0, spare: tuple[str, ...] = ()) -> set[int]:
    """Descendants of ``roots`` in the sandbox's pid namespace ``sandbox_ns``, plus its
    processes carrying ``marker`` (or, given, the environment entry ``entry``) and, with a
    session's ``shell`` (its pid in the sandbox), the subshells between those and the shell
    and the shell's children started since the tick ``since`` with all below them, but
    ``spare``'s (`.._below_shell`)."""
    roots = roots - {0}
    parents, starts = _table()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    # Only the sandbox's own processes are ever signalled: never the spawner (`root`, a host
    # process whose pid may be reused once it was reaped), nor anything outside.
    found = {pid for pid in found & parents.keys() if _pid_ns(pid) == sandbox_ns}
    wanted = (entry or f"{MARKER_VAR}={marker}").encode()
    for pid in parents:
        if pid not in found and _pid_ns(pid) == sandbox_ns and _has_marker(pid, wanted):
            found.add(pid)
    if shell:
        spared = tuple(item.encode() for item in spare)

        def inner(pid: int) -> int:
            return ns_pid(pid) if _pid_ns(pid) == sandbox_ns else 0
        found |= {pid for pid in between(found, parents, shell, inner)
                  if _pid_ns(pid) == sandbox_ns}
        # The shell's environment: a fork of it that ran no program shows the same bytes.
        shell_pid = next((pid for pid in parents if inner(pid) == shell), 0) \
            if shell > 1 and since > 0 else 0
        shell_env = (read_environ(shell_pid) or b"") if shell_pid else b""

        def shell_fork(pid: int) -> bool:
            return bool(shell_env) and pid != shell_pid and _pid_ns(pid) == sandbox_ns and \
                read_environ(pid) == shell_env

        todo = [pid for pid in forked_since(parents, starts, shell, inner, since,
                                            lambda pid: _spared(pid, spared), shell_fork)
                if _pid_ns(pid) == sandbox_ns]
        while todo:
            pid = todo.pop()
            if pid not in found and _pid_ns(pid) == sandbox_ns:
                found.add(pid)
                todo.extend(children.get(pid, ()))
    return found


def _signal_all(pids: set[int], sig: int, *, first: int = 0) -> None:
    """Signal ``first`` (when among ``pids``), then the others by pid (roughly parents
    before children)."""
    for pid in sorted(pids, key=lambda pid: (pid != first, pid)):
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def sweep(root: int, marker: str, sandbox_ns: str, sig: int, *, rounds: int = 50,
          entry: str = "", shell: int = 0, since: int = 0, spare: tuple[str, ...] = ()
          ) -> bool:
    """Send ``sig`` to the command's processes; with SIGKILL repeat until none is left.

    For KILL, every member is stopped first and the tree read again until it stops growing
    (a stopped parent cannot fork, and its children stay below it), then all are killed.
    Returns True when none is left (for another signal: once sent). Blocking: run it in a
    worker thread. ``root`` 0 and an ``entry`` ("NAME=value"): the processes carrying that
    entry alone (a session's command), with the subshells below its ``shell`` and its
    children since ``since`` (`members`).
    """
    def look(roots: set[int]) -> set[int]:
        return members(roots, marker, sandbox_ns, entry=entry, shell=shell, since=since,
                       spare=spare)

    if sig != _signal.SIGKILL:
        # The command itself first: signalled after a child, a shell in ``wait`` could see
        # that child end and exit by itself before its own signal came (a set's order).
        _signal_all(look({root}), sig, first=root)
        return True
    known: set[int] = set()
    for _ in range(rounds):
        for _ in range(rounds):
            new = look(known | {root}) - known
            if not new:
                break
            _signal_all(new, _signal.SIGSTOP)
            known |= new
        if not look(known | {root}):
            return True
        _signal_all(known, _signal.SIGKILL)
        time.sleep(0.002)
        if not look(known | {root}):
            return True
    return False
