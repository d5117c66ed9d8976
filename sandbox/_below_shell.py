"""The processes between a session command's marked processes and the session's shell.

A session command's processes carry its marker variable in their environment, which is what
the kill sweeps look for. But /proc shows the environment a process was exec'd with, and a
subshell the command forks (``( while :; do sleep 1; done ) &``) execs nothing: it shows the
shell's own start-up environment, without the marker, and outlived the timeout. The programs
such a subshell runs carry the marker of the command that forked it (the shell exports it
before the command), so each unmarked process on the parent chain from a process marked with
*this* command's marker up to the shell is this command's too, and is killed with it. An
earlier command's background jobs carry that command's marker, not this one, and are spared.
(A subshell that runs only builtins shows no marked process at all and is not found this way.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

__all__ = ["between", "ns_pid"]

#: How far up a chain is followed before giving up (a deeper nest is not the shell's).
MAX_DEPTH = 64


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
