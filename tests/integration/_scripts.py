"""Scripts run inside sandboxes by more than one test module."""

from __future__ import annotations

EAGAIN = 11

#: Forks children that wait until the fork fails, then kills them all and reports how many it
#: got and why the next fork failed; the output is "<count> <errno>".
FORK_UNTIL_REFUSED = """
import os, signal
kids = []
err = 0
try:
    while len(kids) < 5000:
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

