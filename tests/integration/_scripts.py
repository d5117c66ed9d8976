"""Scripts run inside sandboxes by more than one test module."""

from __future__ import annotations

EAGAIN = 11


def fork_until_refused(cap: int) -> str:
    """A script that forks children that wait, until a fork fails or ``cap`` succeeded; kills
    and reaps them all, then prints "<children> <errno of the failed fork, or 0>"."""
    return f"""
import os, signal
kids, err = [], 0
try:
    while len(kids) < {cap}:
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        kids.append(pid)
except OSError as exc:
    err = exc.errno
for pid in kids:
    os.kill(pid, signal.SIGKILL)
for pid in kids:
    os.waitpid(pid, 0)
print(len(kids), err)
"""


#: Forks until the fork is refused (at most 5,000 children): "<count> <errno>".
FORK_UNTIL_REFUSED = fork_until_refused(5000)
