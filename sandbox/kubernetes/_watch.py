"""The death watch of a session's shell on Kubernetes: a shell killed outright (``kill -9 $$``,
the OOM killer) while a process it left (``sleep 600 &``) holds its output ends the session's
command at once, as on Docker, instead of at its time limit or never.

Why it is needed: the runtime (containerd's CRI, every release) reports an exec's end, the
error channel's ``Status``, only once its copy of the process's stdout and stderr ends, and
that copy ends only when every holder of the pipes closed them. A background job of the shell
holds them for as long as it runs, so the dead shell is not seen: the command waited for its
time limit (then reported a "loop in the shell itself") or, with no limit, for ever. Docker
ends an exec's output 2 s after its process exits; the process backend sees the exit itself.
A shell that exits (``exit``) is seen already: its exit trap prints a marker.

How: the exec wrapper starts this script (for a session's shell only, `ProcessSpec.sealed`)
before it ``exec``s the shell, so the watch is the shell's child, with /dev/null for stdio (it
holds none of the shell's channels, which stay the shell's alone) and the wrapper's
environment (the exec's marker, none of the command's variables). It looks at its own parent
once a second with builtins; when it was reparented, the shell is dead, and it kills what the
shell left, as the session would once it saw the end (`Session._stop`, then the exec's kill
sweep): every process of the shell's process group (runc makes an exec its own group) and
every process whose environment holds the exec's marker. The output then ends, the runtime
reports the shell's status (137 for SIGKILL), and the session ends the command with it.

A watch that sees another parent at its first look (the shell went first) exits doing
nothing. Killing the watch (it is a process of the sandbox user) only brings the old
behaviour back: the command ends at its time limit.
"""

from __future__ import annotations

from typing import Final

__all__ = ["WATCH_SH"]

#: POSIX sh; $1: the shell's pid (its parent, and its process group), $2: the exec's marker
#: as "NAME=value". Builtins but ``sleep`` and ``tr``, which the kill sweeps use too.
WATCH_SH: Final = r"""p=$1; m=$2; IFS=" "
up() { read -r st < /proc/$$/stat && set -- ${st##*) } && [ "$2" = "$p" ]; }
up || exit 0
while up; do sleep 1 || exit 0; done
i=0
while [ $i -lt 50 ]; do
  pids=""
  for d in /proc/[0-9]*; do
    q=${d#/proc/}
    [ "$q" = "$$" ] && continue
    read -r st < "$d/stat" 2>/dev/null || continue
    set -- ${st##*) }
    [ "$3" = "$p" ] && { pids="$pids $q"; continue; }
    e=$(tr '\0' '\n' < "$d/environ" 2>/dev/null) || continue
    case "$e" in *"$m"*) pids="$pids $q";; esac
  done
  [ -z "$pids" ] && exit 0
  kill -STOP $pids 2>/dev/null; kill -KILL $pids 2>/dev/null
  i=$((i+1)); sleep 0.02
done"""
