"""Attacks on the default limits (issue 25), run by python3 inside a sandbox; each bounded, so
that on a sandbox without limits it cannot exhaust the host: at most 2,000 processes, 2,000
open files, and one allocation of the default memory limit plus 512 MiB."""

from __future__ import annotations

from sandbox._limits import default_memory_limit, host_size
from tests.integration._scripts import fork_until_refused

EAGAIN, EMFILE = 11, 24
ATTEMPTS = 2000

#: Forks children that wait, until a fork fails or 2,000 succeeded; kills and reaps them all,
#: then prints "<children> <errno of the failed fork, or 0>".
FORK_BOMB = fork_until_refused(ATTEMPTS)

#: Tries to raise its open-file limit, then opens files until refused or 2,000 are open;
#: prints "<raised: 1/0> <soft> <hard> <files opened> <errno or 0>".
OPEN_FILES = f"""
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (4 * {ATTEMPTS}, 4 * {ATTEMPTS}))
    raised = 1
except (ValueError, OSError):
    raised = 0
files, err = [], 0
try:
    while len(files) < {ATTEMPTS}:
        files.append(open("/dev/null"))
except OSError as exc:
    err = exc.errno
print(raised, soft, hard, len(files), err)
"""


def memory_hog(mem_total: int | None = None) -> str:
    """A script touching every page of the default memory limit plus 512 MiB (sized from
    ``mem_total``, this host's by default); prints "survived" if it could."""
    limit = default_memory_limit(host_size()[1] if mem_total is None else mem_total)
    return f"b = bytearray({limit + (512 << 20)}); print('survived')"
