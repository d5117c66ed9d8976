"""Reset a used sandbox for its next user, or say why it cannot be (then it is destroyed).

What a pool with ``max_uses > 1`` guarantees the next user, checked, not hoped:

* no process of the sandbox user is left (SIGKILL to all of them until none answers);
* the sandbox's own filesystem differs from its image exactly as it did when the sandbox
  was new: every file or directory the user added is removed, and a sandbox in which an
  image file was changed or deleted (which cannot be undone) is not reused at all; the
  engine's own change list (``Backend.filesystem_changes``) is the judge, not a tool that
  runs inside the sandbox;
* ``/dev/shm`` (a tmpfs the change list cannot see) is empty, and no System V IPC object
  is left;
* the working directory and environment are those the sandbox had when new.

What it cannot see, and so is refused for reuse up front (`check_reusable`): tmpfs mounts,
a read-only root (its writable places are tmpfs), a bind-mounted repository (shared with
the host by design) and a root sandbox user (root's leftovers are not the user's to kill).
A directory the user changed keeps its new mtime (and mode, if the user owns it).
"""

from __future__ import annotations

import posixpath

import attrs

from ._backend import ProcessSpec
from ._errors import ConfigError
from ._models import SandboxConfig
from ._policy import is_root
from ._sandbox import Sandbox

__all__ = ["Baseline", "check_reusable", "record_baseline", "reset"]

#: More top-level leftovers than this and the sandbox is replaced rather than wiped.
MAX_WIPE_PATHS = 1000

#: Run as the sandbox user with the paths to remove, "--", then the changed paths to check.
#: kill(-1) reports success while root's processes exist (EPERM is not counted), so the user's
#: own processes are counted in /proc (a process's directory belongs to its user) until none
#: is left. Only shell built-ins and kill, chmod, rm and sleep (root-owned tools the user cannot
#: replace without the engine's change list showing it) run. Prints "dirty <what>" for what
#: it could not clear, "file <path>" for a changed path that is not a directory, then "done".
_WIPE = r'''
i=0
while :; do
  kill -9 -1 2>/dev/null
  left=0
  for d in /proc/[0-9]*; do
    [ "${d#/proc/}" = "$$" ] && continue
    [ -O "$d" ] && { left=1; break; }
  done
  [ "$left" = 0 ] && break
  i=$((i+1)); [ "$i" -gt 200 ] && { echo "dirty processes"; break; }
  sleep 0.02
done
part=wipe
for p in "$@"; do
  if [ "$part" = wipe ]; then
    if [ "$p" = "--" ]; then part=check; continue; fi
    chmod -R u+rwX -- "$p" 2>/dev/null; rm -rf -- "$p" 2>/dev/null
  else
    { [ -d "$p" ] && [ ! -L "$p" ]; } || echo "file $p"
  fi
done
for d in /dev/shm /dev/mqueue; do
  [ -d "$d" ] || continue
  for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    chmod -R u+rwX -- "$f" 2>/dev/null; rm -rf -- "$f" 2>/dev/null
    { [ -e "$f" ] || [ -L "$f" ]; } && echo "dirty $d"
  done
done
for t in shm msg sem; do
  [ -r "/proc/sysvipc/$t" ] || continue
  n=0
  while read -r _; do n=$((n+1)); done < "/proc/sysvipc/$t"
  [ "$n" -gt 1 ] && echo "dirty sysvipc-$t"
done
echo done
'''


@attrs.frozen
class Baseline:
    """A new sandbox's state, to reset to: its change list, working dir and environment."""

    changes: frozenset[tuple[str, str]]
    cwd: str
    env: tuple[tuple[str, str], ...]


def check_reusable(config: SandboxConfig) -> None:
    """Raise `ConfigError` if a reset could not prove a sandbox of ``config`` clean."""
    sec = config.security
    why = ""
    if config.repository is not None:
        why = "repository: a bind-mounted repository is shared with the host, not reset"
    elif sec.read_only_root:
        why = "security.read_only_root: its writable places are tmpfs, which a reset " \
              "cannot inspect"
    elif sec.tmpfs_paths:
        why = "security.tmpfs_paths: a tmpfs mount is invisible to the reset's check"
    elif sec.run_as_user and is_root(sec.run_as_user):
        why = "security.run_as_user: root's leftovers are not the sandbox user's to remove"
    if why:
        raise ConfigError(f"max_uses > 1 cannot be used with this config ({why})",
                          details="use max_uses=1 (a fresh sandbox per user) for it")


async def record_baseline(sb: Sandbox) -> Baseline:
    """What `reset` restores ``sb`` to; call it when ``sb`` is new."""
    changes = await sb.backend.filesystem_changes()
    return Baseline(frozenset(changes), sb.get_working_directory(),
                    tuple(sorted(sb.get_environment().items())))


def _top_level(paths: set[str]) -> list[str]:
    """The paths of ``paths`` none of whose ancestors is in it."""
    top: list[str] = []
    for path in sorted(paths):
        parent = posixpath.dirname(path)
        while parent not in ("/", "") and parent not in paths:
            parent = posixpath.dirname(parent)
        if parent in ("/", ""):
            top.append(path)
    return top


async def reset(sb: Sandbox, baseline: Baseline) -> str:
    """Bring ``sb`` back to ``baseline``: "" on success, else why it cannot be reused."""
    backend = sb.backend
    if await backend.health():
        return "it is not running"
    before = set(await backend.filesystem_changes()) - baseline.changes
    added = {path for kind, path in before if kind == "A"}
    gone = sorted(path for kind, path in before if kind == "D")
    if gone:
        return f"image files were deleted ({', '.join(gone[:3])})"
    wipe = _top_level(added)
    if len(wipe) > MAX_WIPE_PATHS:
        return f"{len(wipe)} new top-level paths; more than {MAX_WIPE_PATHS} to wipe"
    # Directories the user changed (entries added or removed) stay "changed" in the engine's
    # list after the wipe; a changed *file* is an edit of the image that cannot be undone.
    changed = sorted(path for kind, path in before if kind == "C")
    result = await backend.run_process(ProcessSpec(
        argv=["/bin/sh", "-c", _WIPE, "sandbox-reset", *wipe, "--", *changed],
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        workdir="/", user=backend.user, time_limit=60.0))
    lines = result.stdout.splitlines()
    if result.exit_code != 0 or not lines or lines[-1] != "done":
        return f"the wipe failed (exit {result.exit_code}): {result.stderr[-200:]!r}"
    dirty = [line.removeprefix("dirty ") for line in lines if line.startswith("dirty ")]
    if dirty:
        return f"could not clear: {', '.join(sorted(set(dirty)))}"
    files = [line.removeprefix("file ") for line in lines if line.startswith("file ")]
    if files:
        return f"image files were changed ({', '.join(files[:3])})"
    after = set(await backend.filesystem_changes()) - baseline.changes
    left = sorted(f"{kind} {path}" for kind, path in after
                  if kind != "C" or path not in changed)
    if left:
        return f"left after the wipe: {', '.join(left[:3])}"
    if sb.get_working_directory() != baseline.cwd:
        await sb.set_working_directory(baseline.cwd)
    env = dict(baseline.env)
    sb.set_environment({**{k: None for k in sb.get_environment() if k not in env}, **env})
    return ""

