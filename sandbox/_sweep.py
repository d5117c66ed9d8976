"""The marker kill sweep: a POSIX sh script that reaches every process a command started.

Each command carries a marker variable (`MARKER_VAR`) in its environment. Where the SDK cannot
kill a command's processes from outside, it runs `SWEEP_SH` as a second command (an engine
exec, a Pod exec), as the same user: it stops and kills every process whose environment holds
the marker, the command and all it started, a fork bomb included, as long as there is a free
pid for the sweep. Any backend with an exec can run it; the engine facts behind it are in
docs/engine-notes.md, section "Killing a command's process tree".
"""

from __future__ import annotations

__all__ = ["MARKER_VAR", "SWEEP_ATTEMPTS", "SWEEP_SH", "sweep_argv"]

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
