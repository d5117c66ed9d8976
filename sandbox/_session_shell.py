"""A session shell that other processes of the sandbox cannot reach.

Any process of the sandbox user could open a plain shell's ``/proc/<pid>/fd/0`` (its input:
each command and its marker nonces) or ``fd/1``, and forge results. The kernel closes a
non-dumpable process's ``/proc`` entries (``fd``, ``environ``, ``mem``) and ptrace to other
processes of its uid that lack CAP_SYS_PTRACE, which a sandbox does not have. ``prctl`` would be
undone by exec, but a program started from a file its user cannot read stays non-dumpable.
So the shell is copied once per sandbox into a fresh directory, mode 0111 (owned by root where
the backend can run a command as root), and is itself the first program of its process: no
dumpable process ever holds its pipes. Whether it worked is checked by the session's probe
(`GUARD_PROBE`), never assumed: some runtimes (gVisor) refuse to run an unreadable file, and
then the session runs the plain shell and says ``guarded=False``.
"""

from __future__ import annotations

import logging
import weakref
from typing import Final

import attrs

from ._backend import Backend, ProcessSpec
from ._errors import SandboxError
from ._session_wire import quote

__all__ = ["GUARDED", "GUARD_PROBE", "ShellCopy", "close_stdio", "guarded_shell", "shell_argv"]

log = logging.getLogger("sandbox.session")

# POSIX sh: copy bash (else /bin/sh, following its link: busybox picks the applet by name) to
# a fresh directory, mode 0111 in 0711, where a program may run; print its path. Beside it,
# where it can, an unreadable ``chmod`` (a link to the copy when chmod is the same busybox, whose
# ash names an applet rather than a path).
_PREPARE: Final = r"""src=$(command -v bash 2>/dev/null) || src=/bin/sh
case $src in /*) ;; *) src=/bin/sh;; esac
name=${src##*/}
for base in /dev "${TMPDIR:-/tmp}" /tmp /var/tmp; do
  d=$(mktemp -d "$base/.sandbox-session-XXXXXXXX" 2>/dev/null) || continue
  if cp "$src" "$d/$name" 2>/dev/null && chmod 0111 "$d/$name" && {
       c=$(command -v chmod); case $c in /*) ;; *) c=/bin/chmod;; esac  # busybox: "chmod"
       if [ "$c" -ef "$src" ]; then ln "$d/$name" "$d/chmod"; else
         cp "$c" "$d/chmod" && chmod 0111 "$d/chmod"; fi || rm -f "$d/chmod"; true
     } 2>/dev/null && chmod 0711 "$d" &&
     "$d/$name" -c : </dev/null >/dev/null 2>&1; then
    printf %s "$d/$name"; exit 0
  fi
  rm -rf "$d" 2>/dev/null
done
exit 1"""

#: Appended to the session's probe: prints `GUARDED` when another process (a new sh: busybox
#: may run a subshell or ``cat`` in the shell itself) is refused the shell's environ, which
#: /proc guards as it guards ``fd``.
GUARD_PROBE: Final = (
    '; if [ -e /proc/$$/environ ] && ! /bin/sh -c ": </proc/$$/environ" 2>/dev/null; then '
    "printf :guarded; fi"
)
GUARDED: Final = ":guarded"

def close_stdio(path: str) -> str:
    """A line for a guarded shell, sent after its probe: mode 0 on the pipes behind its stdio.

    On the attach stream they are the engine's, owned by the sandbox user with mode 0600, and
    every command's child (``sleep 600 &``, a daemon) holds the stdout and stderr: any process
    of that user could reopen ``/proc/<child>/fd/1`` for reading, or have a ptraced child reopen
    its own, and take later commands' output and end markers; a descriptor leaked to a program
    (bash's fd 255 once) would have given the stdin, every command and its nonces. With mode 0
    neither reopen is allowed (that user has no CAP_DAC_OVERRIDE); open descriptors are
    unaffected. The unreadable ``chmod`` beside the shell's copy (``path``) may hold the stdin:
    it is not dumpable, as the shell. Without it the image's ``chmod`` gets only the stdout and
    stderr (its stdin is /dev/null), as every command's programs do. The line runs in the shell
    itself (not as a command, whose stdin is /dev/null); the stdout and stderr sit at 3 and 4,
    and chmod's own output goes to /dev/null.
    """
    own = path.rsplit("/", 1)[0] + "/chmod"
    fds = "/proc/self/fd/3 /proc/self/fd/4 3>&1 4>&2 >/dev/null 2>&1"
    return f"{quote(own)} 0 /proc/self/fd/0 {fds} || chmod 0 {fds} </dev/null\n"


#: Per sandbox: the path of its root-owned shell copy.
_copies: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()


@attrs.frozen
class ShellCopy:
    """An unreadable copy of the shell: its path ("" if none could be made), and whether
    root made it (then a sandbox user other than root can neither read nor replace it)."""

    path: str
    by_root: bool


async def guarded_shell(owner: object, backend: Backend, *, fresh: bool = False) -> ShellCopy:
    """An unreadable copy of the shell for a session of ``owner`` (a sandbox).

    Made as root where the backend allows it, once per sandbox (``fresh`` makes a new one:
    the last one did not give a guarded shell); else as the sandbox user, anew for each
    shell, since that user could replace a copy it owns before it runs.
    """
    if not fresh and owner in _copies:
        return ShellCopy(_copies[owner], by_root=True)
    for user in ("0:0", ""):
        spec = ProcessSpec(argv=("/bin/sh", "-c", _PREPARE, "sandbox-session-prepare"),
                           user=user, workdir="/", max_output_bytes=1 << 12, time_limit=60.0)
        try:
            result = await backend.run_process(spec)
        except SandboxError:  # e.g. a backend that runs every command as its one user
            continue
        path = result.stdout.strip()
        if result.exit_code == 0 and path.startswith("/") and "\n" not in path:
            if user:
                _copies[owner] = path
            return ShellCopy(path, by_root=bool(user))
    log.warning("no unreadable copy of the shell could be made in this sandbox; its "
                "sessions run a shell other processes of the sandbox user can reach")
    return ShellCopy("", by_root=False)


def shell_argv(path: str) -> tuple[str, ...]:
    """How to start the copy at ``path``: bash without start-up files, or the POSIX sh."""
    if path.rsplit("/", 1)[-1] == "bash":
        return (path, "--noprofile", "--norc")
    return (path,)
