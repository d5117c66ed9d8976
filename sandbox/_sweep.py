"""The marker kill sweep: a POSIX sh script that reaches every process a command started.

Each command carries a marker variable (`MARKER_VAR`) in its environment. Where the SDK cannot
kill a command's processes from outside, it runs `SWEEP_SH` as a second command (an engine
exec, a Pod exec), as the same user: it stops and kills every process whose environment holds
the marker, the command and all it started, a fork bomb included, as long as there is a free
pid for the sweep. A session's command is swept by `SHELL_SWEEP_SH`, which spares its shell.
Any backend with an exec can run it; the engine facts behind it are in
docs/engine-notes.md, section "Killing a command's process tree".
"""

from __future__ import annotations

__all__ = [
    "MARKER_VAR", "SHELL_SWEEP_SH", "SWEEP_ATTEMPTS", "SWEEP_SH", "shell_sweep_argv",
    "sweep_argv",
]

MARKER_VAR = "SANDBOX_EXEC_ID"

#: A sweep that could not finish (it could not fork, or found survivors) is run again.
SWEEP_ATTEMPTS = 5

# POSIX sh (busybox ash, dash, bash): STOP then KILL every process whose environment holds the
# marker until none is left. STOP first so a fork loop cannot outrun the sweep.
SWEEP_SH = r"""m="$1"; sig="$2"; i=0
while [ $i -lt 100 ]; do
  pids=""; unsure=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    [ -r "$d/environ" ] || continue
    # A failed read of a readable, still-present process is a failed fork (a fork bomb at
    # the pids limit), not proof of absence: look again rather than report success.
    e=$(tr '\0' '\n' < "$d/environ" 2>/dev/null) || { [ -e "$d" ] && unsure=1; continue; }
    case "$e" in
      *"$m"*) pids="$pids $p"
        # Stop and kill the whole process group at once with builtins (no fork needed), so a
        # fork bomb in it cannot outrun the sweep. runc makes each exec its own group leader.
        if [ "$sig" = KILL ] && read -r st < "$d/stat" 2>/dev/null; then
          set -- ${st##*) }
          if [ "${3:-1}" -gt 1 ] && [ "$3" != "$$" ]; then
            kill -STOP -"$3" 2>/dev/null; kill -KILL -"$3" 2>/dev/null
          fi
        fi;;
    esac
  done
  [ -z "$pids" ] && [ -z "$unsure" ] && exit 0
  if [ -n "$pids" ]; then
    if [ "$sig" = KILL ]; then kill -STOP $pids 2>/dev/null; fi
    kill -"$sig" $pids 2>/dev/null
  fi
  [ "$sig" = KILL ] || exit 0
  i=$((i+1)); sleep 0.02
done
exit 1"""


def sweep_argv(marker: str, signal: str) -> list[str]:
    """The argv that sends ``signal`` (a name: ``"KILL"``, ``"TERM"``) to every process whose
    environment holds ``marker``; with KILL it repeats until none is left (exit 0) or gives
    up (exit 1)."""
    return ["/bin/sh", "-c", SWEEP_SH, "sandbox-kill", f"{MARKER_VAR}={marker}", signal]


# For a session's shell (`_session`). POSIX sh: STOP then KILL every process whose environment
# holds the marker ($1), until none is left. Unlike the exec sweep it never kills a process
# group: the shell shares the group of the commands it runs, and must live on. A shell from an
# unreadable copy is non-dumpable, and so are its children that run no readable program (busybox
# runs its applets from /proc/self/exe): their environment is closed, so one that descends from
# the shell ($2) is taken too. With $1 empty: the shell's process group and all it started, and
# the shell itself if $3 says it still runs (a pid in use as a group id is never reused; the
# shell's own may be). $4, the shell's pid however it runs: the processes on the parent chain
# from a marked process up to it are taken too, the command's subshells that exec nothing
# and so show the shell's environment, not the marker (`_below_shell`).
SHELL_SWEEP_SH = r"""m="$1"; shell="$2"; alive="$3"; top="${4:-}"; i=0
while [ $i -lt 100 ]; do
  pids=""
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$$" ] && continue
    read -r st < "$d/stat" 2>/dev/null || continue
    set -- ${st##*) }
    if [ -z "$m" ] && { [ "$p$alive" = "${shell}1" ] || [ "$3" = "$shell" ]; }; then
      pids="$pids $p"; continue
    fi
    [ "$p" = "$shell" ] && continue
    if [ -n "$m" ] && e=$(tr '\0' '\n' < "$d/environ" 2>/dev/null); then
      case "$e" in *"$m"*) pids="$pids $p"; q=$2; n=0; c=""
        while [ -n "$top" ] && [ $n -lt 64 ] && [ "$q" -gt 1 ] 2>/dev/null; do
          [ "$q" = "$top" ] && { pids="$pids$c"; break; }
          c="$c $q"
          read -r st < "/proc/$q/stat" 2>/dev/null || break
          set -- ${st##*) }; q=$2; n=$((n+1))
        done;;
      esac
      continue
    fi
    q=$2; n=0
    while [ -n "$shell" ] && [ $n -lt 64 ] && [ "$q" -gt 1 ] 2>/dev/null; do
      [ "$q" = "$shell" ] && { pids="$pids $p"; break; }
      read -r st < "/proc/$q/stat" 2>/dev/null || break
      set -- ${st##*) }; q=$2; n=$((n+1))
    done
  done
  [ -z "$pids" ] && exit 0
  kill -STOP $pids 2>/dev/null; kill -KILL $pids 2>/dev/null
  i=$((i+1)); sleep 0.02
done
exit 1"""


def shell_sweep_argv(entry: str, shell_pid: str, alive: str, label: str,
                     top: int = 0) -> list[str]:
    """The argv that kills what a session's command started (``entry``: its "NAME=value"
    marker) without the shell ``shell_pid``, and the subshells between its processes and the
    shell ``top`` (its pid, copy or not); with ``entry`` empty, the shell's whole group (and
    the shell itself when ``alive`` is "1")."""
    return ["/bin/sh", "-c", SHELL_SWEEP_SH, label, entry, shell_pid, alive,
            str(top) if top > 0 else ""]
