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
from ._constants import ROOT_PATH
from ._errors import SandboxError
from ._policy import is_root

__all__ = ["GUARDED", "GUARD_PROBE", "ShellCopy", "guarded_shell", "shell_argv"]

log = logging.getLogger("sandbox.session")

# POSIX sh, run as root where the backend can (else as the sandbox user): copy bash (else
# /bin/sh, following its link: busybox picks the applet by name) to a fresh directory, mode
# 0111 in 0711, where a program may run; print its path. Its own PATH: the image's may hold a
# directory the user can write, and what is found there would run as root (so would a file
# BASH_ENV names, once the copy of bash is tried; CDPATH could move a relative cd). As root it
# takes only a base whose path nobody else can change: every directory along it (symlinks
# resolved) owned by root and sticky or writable by root alone. A base its owner (or a group,
# or anyone) may write without the sticky bit would let them rename root's directory and put
# their own in its place, a shell of theirs that every later session of the sandbox runs (the
# path is kept per sandbox). As the sandbox user it changes nothing: that copy is the user's
# anyway, and never said to be guarded. A bash run as ``sh`` imports the environment's
# exported functions (``BASH_FUNC_cp%%``, even ``[``): every name the script calls is unset
# first (``unset`` is a special builtin, found before functions there). The copy is tried on
# an empty input, running no command: a bash copy imports functions (``:``) too.
_PREPARE: Final = f"PATH={ROOT_PATH}" + r"""
unset -f ls command cd pwd id mktemp cp chmod printf rm test '[' 2>/dev/null
unset BASH_ENV ENV CDPATH
set -f
safe() {
  p=$1
  while :; do
    set -- $(ls -ldn "$p" 2>/dev/null)
    case ${1:-} in d????????[tT]*|d????[!w]??[!w]?|d????[!w]??[!w]?.) ;; *) return 1;; esac
    [ "${3:-}" = 0 ] || return 1
    [ "$p" = / ] && return 0
    p=${p%/*}; p=${p:-/}
  done
}
src=$(command -v bash 2>/dev/null) || src=/bin/sh
case $src in /*) ;; *) src=/bin/sh;; esac
name=${src##*/}
me=$(id -u 2>/dev/null)
for base in /dev "${TMPDIR:-/tmp}" /tmp /var/tmp; do
  base=$(cd -P "$base" 2>/dev/null && pwd -P) || continue
  [ "${me:-0}" != 0 ] || safe "$base" || continue
  d=$(mktemp -d "$base/.sandbox-session-XXXXXXXX" 2>/dev/null) || continue
  if cp "$src" "$d/$name" 2>/dev/null && chmod 0111 "$d/$name" && chmod 0711 "$d" &&
     "$d/$name" </dev/null >/dev/null 2>&1; then
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
    # The sandbox user by name, never "" (the backend's default: on Docker the container's
    # User, root now): a copy made as root but said to be the user's would outlive its
    # shell, the probe's ``rm -rf`` as the user refused.
    for user in ("0:0", backend.user):
        spec = ProcessSpec(argv=("/bin/sh", "-c", _PREPARE, "sandbox-session-prepare"),
                           user=user, workdir="/", max_output_bytes=1 << 12, time_limit=60.0)
        try:
            result = await backend.run_process(spec)
        except SandboxError:  # e.g. a backend that runs every command as its one user
            continue
        path = result.stdout.strip()
        if result.exit_code == 0 and path.startswith("/") and "\n" not in path:
            by_root = bool(user) and is_root(user)
            if by_root:
                _copies[owner] = path
            return ShellCopy(path, by_root=by_root)
    log.warning("no unreadable copy of the shell could be made in this sandbox; its "
                "sessions run a shell other processes of the sandbox user can reach")
    return ShellCopy("", by_root=False)


def shell_argv(path: str) -> tuple[str, ...]:
    """How to start the copy at ``path``: bash without start-up files, ``BASH_ENV``'s
    included, exported functions and ``SHELLOPTS`` (``--posix -p``, left again at once:
    ``POSIX_OFF``), or the POSIX sh."""
    if path.rsplit("/", 1)[-1] == "bash":
        return (path, "--posix", "--noprofile", "--norc", "-p")
    return (path,)
