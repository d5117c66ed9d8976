"""The processes between a session command's marked processes and the session's shell.

A session command's processes carry its marker variable in their environment, which is what
the kill sweeps look for. But /proc shows the environment a process was exec'd with, and a
subshell the command forks (``( while :; do sleep 1; done ) &``) execs nothing: it shows the
shell's own start-up environment, without the marker, and outlived the timeout. The programs
such a subshell runs carry the marker of the command that forked it (the shell exports it
before the command), so each unmarked process on the parent chain from a process marked with
*this* command's marker up to the shell is this command's too, and is killed with it. An
earlier command's background jobs carry that command's marker, not this one, and are spared.

A subshell that runs only builtins (``( while :; do :; done ) &``) shows no marked process at
all. It is found by its start: the session runs one command at a time and only the shell makes
its own children, so a child of the shell that started once this command was sent is this
command's (`forked_since`), with everything below it. The SDK reads the boot clock when it
sends the command (`boot_tick`, nothing else per command) and compares it at the kill with
each process's start in ``/proc/<pid>/stat``, the same clock in clock ticks (10 ms). Within
the send's own tick the two cannot be told apart, but only when an earlier command ended in
that tick too (the shell makes no child between two commands): then a child of the shell
started in that tick is spared when it or a process below it carries the exact marker of a
command that ended in it (``prog &`` sent just before); such a command's subshell of builtins
alone is killed with this one, and a command that gives a program it starts one of those
markers (it can read them from that command's jobs) keeps it alive. A subshell that leaves
the shell's children (a double fork, ``( (loop) & )``: the sandbox's init adopts it) is
found by its environment: a fork that ran no program shows the shell's own, byte for byte
(the shell's exec marker or spawn marker makes it unique), and one started since the send is
this command's too. An earlier command's subshell that forks again after the send (its
``$( )`` before the program's ``execve``) shows it as well, and a kill that looks at that
instant takes that fork.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = ["between", "boot_tick", "forked_since", "ns_pid"]

#: How far up a chain is followed before giving up (a deeper nest is not the shell's).
MAX_DEPTH = 64
#: Clock ticks per second, the unit of a process's start in ``/proc/<pid>/stat``.
TICKS = os.sysconf("SC_CLK_TCK")


def boot_tick() -> int:
    """Now, in clock ticks since boot, floored as the kernel floors a process's start: a
    process started at or after this moment shows a start of at least this tick."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) * TICKS // 1_000_000_000


def ns_pid(pid: int, proc: Path = Path("/proc")) -> int:
    """``pid``'s number in its own (innermost) pid namespace, as ``$$`` says it there; 0
    when it cannot be read."""
    try:
        with open(proc / str(pid) / "status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def between(pids: Iterable[int], parents: Mapping[int, int], shell: int,
            inner_pid: Callable[[int], int]) -> set[int]:
    """Every process strictly between one of ``pids`` and the shell, on its parent chain
    (``parents``: pid -> parent pid); only chains that do reach the shell count. ``shell`` is
    the shell's pid as the sandbox sees it (``$$``), ``inner_pid`` maps a pid of ``parents``
    to that numbering (`ns_pid`), and gives 0 or less for a process outside the sandbox: a
    walk ends at the sandbox's init (1) or outside it, so a ``$$`` the sandbox forged (or one
    that equals a host process's own number, when the SDK runs in a pid namespace of its
    own) never takes the sandbox's init or anything above it. The shell is never among them."""
    out: set[int] = set()
    if shell <= 0:
        return out
    for pid in pids:
        chain: list[int] = []
        parent = parents.get(pid, 0)
        for _ in range(MAX_DEPTH):
            if parent <= 1 or parent not in parents or parent in out:
                if parent in out:
                    out.update(chain)
                break
            inner = inner_pid(parent)
            if inner <= 1:  # the sandbox's init, or outside the sandbox: the walk ends there
                break
            if inner == shell:
                out.update(chain)
                break
            chain.append(parent)
            parent = parents[parent]
    return out


def forked_since(parents: Mapping[int, int], starts: Mapping[int, int], shell: int,
                 inner_pid: Callable[[int], int], since: int,
                 earlier: Callable[[int], bool],
                 shell_fork: Callable[[int], bool] = lambda pid: False) -> set[int]:
    """The shell's children that started at or after tick ``since`` (the command's send,
    `boot_tick`): this command's (see the module doc); so too any process started then that
    ``shell_fork`` says is a fork of the shell that ran no program (its environment, byte for
    byte the shell's: a subshell that left the shell's children by a double fork, adopted by
    the sandbox's init). ``parents``: pid -> parent pid, ``starts``: pid -> start tick of
    each live process; ``shell`` and ``inner_pid`` as in `between` (the shell is matched by
    its pid inside the sandbox, never the sandbox's init nor a process outside it; the shell
    itself is never taken). A process started in the send's own tick is left out when
    ``earlier`` (pid -> it carries the marker of a command that ended in that tick) holds for
    it or for a process below it. Their descendants are the caller's to add."""
    out: set[int] = set()
    if shell <= 0 or since <= 0:
        return out
    is_shell: dict[int, bool] = {}

    def the_shell(pid: int) -> bool:
        if pid not in is_shell:
            inner = inner_pid(pid)
            is_shell[pid] = inner > 1 and inner == shell
        return is_shell[pid]

    children: dict[int, list[int]] | None = None
    for pid, start in starts.items():
        parent = parents.get(pid, 0)
        if start < since:
            continue
        shells_child = parent > 1 and parent in parents and the_shell(parent)
        if not shells_child and (the_shell(pid) or not shell_fork(pid)):
            continue
        if start == since:
            if children is None:
                children = {}
                for child, ppid in parents.items():
                    children.setdefault(ppid, []).append(child)
            if _any_below(pid, children, earlier):
                continue
        out.add(pid)
    return out


def _any_below(pid: int, children: Mapping[int, list[int]],
               test: Callable[[int], bool]) -> bool:
    """Whether ``test`` holds for ``pid`` or a process below it."""
    todo, seen = [pid], set[int]()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        if test(pid):
            return True
        todo.extend(children.get(pid, ()))
    return False
