"""Reset a used sandbox for its next user, or say why it cannot be (then it is destroyed).

A reset must leave the next user what a fresh sandbox would; what it cannot verify from
outside the sandbox, it does not reuse. What a pool with ``max_uses > 1`` guarantees:

* no process is left but the container's own init, whatever its uid: the backend's
  `HostInspector` freezes the sandbox's cgroup, kills every other process from the host and
  checks that none is left (no tool inside the sandbox is asked);
* a sandbox in which anything ran as another user than the sandbox user's own uid, gid and
  groups is not reused at all: a command planned with another ``user`` (``allow_write=False``
  runs as nobody), or any process seen with other ids (compared as the kernel's numbers, not
  as the text of ``Command.user``). Such a process may have planted what outlives it;
* the directories the sandbox user could change (those it owns or may write) have the mode,
  owner, extended attributes and POSIX ACLs they had when the sandbox was new, and the files
  the set-up made are untouched (ctime), else it is not reused;
* the sandbox's own filesystem differs from its image exactly as it did when the sandbox was
  new: every file or directory the user added is removed, and a sandbox in which an image
  file was changed or deleted (which cannot be undone) is not reused; the engine's own change
  list (``Backend.filesystem_changes``) is the judge;
* ``/dev/shm`` (a tmpfs the change list cannot see) is empty, and no System V IPC object
  is left;
* the working directory and environment are those the sandbox had when new.

A sandbox the backend cannot show from outside (no `HostInspector`: the SDK is not root on
the engine's host, a remote engine, gVisor, another backend) is never reused: the pool
replaces it after each user, as with ``max_uses=1``. Configs whose state the check cannot
see are refused up front (`check_reusable`): tmpfs mounts, a read-only root (its writable
places are tmpfs), a bind-mounted repository (shared with the host by design), MCP servers
(they run for the sandbox's life), a root sandbox user and a seccomp profile other than the
engine's default (keyctl: the user's kernel keyring is not the reset's to clear). A
directory the user changed keeps its new mtime.
"""

from __future__ import annotations

import posixpath
import stat
from collections.abc import Mapping

import anyio
import attrs

from ._backend import (
    ProcessSpec,
    SupportsFilesystemChanges,
    SupportsHealth,
    SupportsHostInspector,
    backend_name,
    supports,
)
from ._constants import ROOT_PATH
from ._errors import ConfigError
from ._hostview import HostInspector, Identity, Meta, identity_of_status
from ._models import SandboxConfig
from ._policy import is_root
from ._registry import BACKENDS, backend_class
from ._sandbox import Sandbox

__all__ = ["Baseline", "check_reusable", "record_baseline", "reset"]

#: More top-level leftovers than this and the sandbox is replaced rather than wiped.
MAX_WIPE_PATHS = 1000

#: What the reset's tools (found through `ROOT_PATH`: not /usr/local, which images often
#: open up) are found through; the user must not be able to change any of it.
_TOOL_DIRS = ("/", "/usr", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

#: Run as the sandbox user, on a new sandbox: its own ids, as the kernel holds them.
_WHOAMI = r'''while IFS= read -r line; do
  case "$line" in Uid:*|Gid:*|Groups:*) printf '%s\n' "$line";; esac
done < /proc/self/status'''

#: Run as the sandbox user, after every other process is gone, with the paths to remove,
#: "--", then the changed paths to check. Only shell built-ins and chmod and rm (root-owned
#: tools the user cannot replace without the engine's change list showing it) run. Prints
#: "dirty <what>" for what it could not clear, "file <path>" for a changed path that is not
#: a directory, then "done".
_WIPE = r'''
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


@attrs.frozen(kw_only=True)
class Baseline:
    """A new sandbox's state, to reset to, and how to see it from outside.

    Attributes:
        changes: The engine's change list when new.
        cwd: The working directory when new.
        env: The environment when new.
        user: The sandbox user, as commands name it ("uid:gid").
        unverifiable: Why a reset cannot verify this sandbox ("" if it can): it is then
            never reused.
        identity: The kernel's ids of a process run as the sandbox user.
        inspector: The sandbox seen from outside.
        metadata: The paths compared at each reset, with their metadata when new.
    """

    changes: frozenset[tuple[str, str]]
    cwd: str
    env: tuple[tuple[str, str], ...]
    user: str
    unverifiable: str = ""
    identity: Identity | None = None
    inspector: HostInspector | None = attrs.field(default=None, eq=False)
    metadata: Mapping[str, Meta | None] = attrs.field(factory=dict, eq=False)


def check_reusable(config: SandboxConfig) -> None:
    """Raise `ConfigError` if a reset could not prove a sandbox of ``config`` clean."""
    sec = config.security
    why = ""
    cls = backend_class(config.type) if config.type in BACKENDS else None
    if cls is None:
        why = f"type={config.type!r}: no registered backend serves it, so nothing can prove " \
              "its reset"
    elif not (supports(cls, SupportsFilesystemChanges) and supports(cls, SupportsHostInspector)):
        why = f"type={config.type!r}: a reset needs the backend's list of changes to the " \
              "image and a view from outside, which it has not"
    elif config.type == "vm" or config.runtime.startswith("runsc"):
        why = f"type={config.type!r}, runtime={config.runtime!r}: the reset checks the " \
              "sandbox's processes from the host, and a gVisor or VM sandbox's run in a " \
              "kernel of their own, out of its view"
    elif config.repository is not None:
        why = "repository: a bind-mounted repository is shared with the host, not reset"
    elif sec.read_only_root:
        why = "security.read_only_root: its writable places are tmpfs, which a reset " \
              "cannot inspect"
    elif sec.tmpfs_paths:
        why = "security.tmpfs_paths: a tmpfs mount is invisible to the reset's check"
    elif sec.run_as_user and is_root(sec.run_as_user):
        why = "security.run_as_user: root's leftovers are not the sandbox user's to remove"
    elif sec.seccomp_profile:
        why = "security.seccomp_profile: a profile other than the engine's default may allow " \
              "keyctl, and the sandbox user's kernel keyring outlives a reset"
    elif config.mcp_servers:
        why = "mcp_servers: they run for the sandbox's life, and one user could leave them " \
              "compromised for the next"
    if why:
        raise ConfigError(f"max_uses > 1 cannot be used with this config ({why})",
                          details="use max_uses=1 (a fresh sandbox per user) for it")


async def record_baseline(sb: Sandbox) -> Baseline:
    """What `reset` restores ``sb`` to; call it when ``sb`` is new (nothing else ran)."""
    backend = sb.backend
    base = Baseline(changes=frozenset(), cwd=sb.get_working_directory(),
                    env=tuple(sorted(sb.get_environment().items())), user=backend.user)
    if not isinstance(backend, SupportsFilesystemChanges):
        return attrs.evolve(base, unverifiable=f"{backend_name(backend)} keeps no image to "
                                               "compare it with")
    changes: list[tuple[str, str]] = []

    async def list_changes() -> None:
        changes.extend(await backend.filesystem_changes())

    async with anyio.create_task_group() as tg:  # the engine's diff is the slow part
        tg.start_soon(list_changes)
        seen = await _look_from_outside(sb)
    base = attrs.evolve(base, changes=frozenset(changes))
    if isinstance(seen, str):
        return attrs.evolve(base, unverifiable=seen)
    inspector, identity = seen

    def scan() -> tuple[str, dict[str, Meta | None]]:
        paths = set(inspector.changeable_dirs(identity)) | {path for _, path in changes}
        return _unsafe_tool_dirs(inspector.metadata(_TOOL_DIRS)), \
            inspector.metadata(sorted(paths))

    try:
        unsafe, metadata = await anyio.to_thread.run_sync(scan)
    except OSError as exc:  # its root went away under the host's look
        return attrs.evolve(base, unverifiable=f"it could not be seen from the host: {exc}")
    if unsafe:
        return attrs.evolve(base, unverifiable=unsafe)
    return attrs.evolve(base, identity=identity, inspector=inspector, metadata=metadata)


def _unsafe_tool_dirs(seen: Mapping[str, Meta | None]) -> str:
    """Why the reset's tools (chmod, rm, found through `ROOT_PATH`) cannot be trusted, or "".

    Each directory on the way must be root's and writable by no one else; a symbolic link
    is root's in such a directory, so it is the image's."""
    for path, meta in seen.items():
        if meta is None:
            continue
        if meta.uid != 0 or (meta.kind != stat.S_IFLNK and meta.mode & 0o022):
            return f"{path}, where the reset finds its tools, is not root's alone " \
                   f"(uid {meta.uid}, mode {meta.mode:o})"
    return ""


async def _look_from_outside(sb: Sandbox) -> tuple[HostInspector, Identity] | str:
    """The backend's view of ``sb`` from outside and the sandbox user's ids, or why a reset
    cannot verify ``sb``."""
    backend = sb.backend
    if not isinstance(backend, SupportsHostInspector):
        return "its backend cannot show it from outside"
    found = await backend.host_inspector()
    if isinstance(found, str):
        return found
    result = await backend.run_process(ProcessSpec(
        argv=["/bin/sh", "-c", _WHOAMI], env={"PATH": ROOT_PATH}, workdir="/", user=backend.user,
        time_limit=30.0))
    try:
        identity = identity_of_status(result.stdout)
    except ValueError:
        return f"the sandbox user's ids could not be read (exit {result.exit_code})"
    if identity.is_root:
        return f"the sandbox user is root ({identity})"
    return found, identity


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


def _differs(before: Meta | None, now: Meta | None) -> str:
    """What changed between two readings of a path ("" if nothing)."""
    if before == now:
        return ""
    if before is None or now is None:
        return "appeared" if before is None else "gone, or replaced by a symbolic link"
    for field in ("kind", "mode", "uid", "gid", "xattrs", "ctime_ns", "size"):
        if getattr(before, field) != getattr(now, field):
            if field == "mode":
                return f"mode {before.mode:o} -> {now.mode:o}"
            if field == "xattrs":
                names = sorted({n for n, _ in before.xattrs} ^ {n for n, _ in now.xattrs})
                return f"extended attributes or ACLs changed ({', '.join(names) or 'values'})"
            return f"{field} changed"
    return "changed"


async def reset(sb: Sandbox, baseline: Baseline) -> str:
    """Bring ``sb`` back to ``baseline``: "" on success, else why it cannot be reused."""
    try:
        return await _reset(sb, baseline)
    except OSError as exc:  # its processes or root went away under the host's look
        return f"it could not be seen from the host: {exc}"


async def _reset(sb: Sandbox, baseline: Baseline) -> str:
    backend = sb.backend
    if isinstance(backend, SupportsHealth) and await backend.health():
        return "it is not running"
    if baseline.unverifiable:
        return f"a reset cannot verify it: {baseline.unverifiable}"
    if not isinstance(backend, SupportsFilesystemChanges):
        return f"{backend_name(backend)} keeps no image to compare it with"
    inspector, identity = baseline.inspector, baseline.identity
    assert inspector is not None and identity is not None
    others = sorted(u for u in sb.command_users() if u != baseline.user)
    if others:
        return f"a command ran as another user ({', '.join(map(repr, others))})"
    why = await anyio.to_thread.run_sync(inspector.kill_all, identity)
    if why:
        return why
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
        env={"PATH": ROOT_PATH}, workdir="/", user=baseline.user, time_limit=60.0))
    lines = result.stdout.splitlines()
    if result.exit_code != 0 or not lines or lines[-1] != "done":
        return f"the wipe failed (exit {result.exit_code}): {result.stderr[-200:]!r}"
    dirty = [line.removeprefix("dirty ") for line in lines if line.startswith("dirty ")]
    if dirty:
        return f"could not clear: {', '.join(sorted(set(dirty)))}"
    files = [line.removeprefix("file ") for line in lines if line.startswith("file ")]
    if files:
        return f"image files were changed ({', '.join(files[:3])})"
    why = await anyio.to_thread.run_sync(inspector.wait_none_left)
    if why:
        return why
    now = await anyio.to_thread.run_sync(inspector.metadata, list(baseline.metadata))
    for path, meta in baseline.metadata.items():
        what = _differs(meta, now.get(path))
        if what:
            return f"{path} differs from when the sandbox was new: {what}"
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
