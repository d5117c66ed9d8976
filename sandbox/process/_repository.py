"""A repository in a process sandbox: the Docker backend's `Workspace`, bound by bubblewrap.

The same three modes as on Docker (`sandbox._workspace`), from the same code: a ``local_path``
without filters is bound live at ``mount_point`` (read-only when ``read_only``); a read-only
clone or filtered copy is made on the host and bound read-only; a writable clone or filtered
copy is copied into the sandbox's own filesystem as its user, after start. The clone is made by
host git (the sandbox may have no network), in a temporary directory that cleanup removes, and
git's settings (``git_config``, ``safe.directory``) and ``GIT_CONFIG_GLOBAL`` are set as on
Docker. Here the sandbox's one user is host nobody (or the SDK's user, unprivileged), so:

* a live ``local_path`` is written as that host user: it must be able to enter (and, writable,
  write) the directory; a writable one it cannot write is refused at initialize, naming the
  ways out (a copy, ``read_only``, or giving that user write access);
* ``owner`` and ``group`` are refused (`_plan`): one user exists in the sandbox's namespace.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import attrs

from .._errors import SandboxInitFailed
from .._workspace import Mode, Workspace

__all__ = ["RepoBind", "prepare_repository"]


@attrs.frozen
class RepoBind:
    """A host directory bubblewrap binds into the sandbox."""

    source: Path
    target: str
    read_only: bool


async def prepare_repository(workspace: Workspace, *, host_user: str) -> RepoBind | None:
    """Fetch or check ``workspace``'s repository on the host; the bind it needs, if any.

    ``host_user`` ("uid:gid", or "" to keep the SDK's) gets the root of a read-only copy, so
    the sandbox's user can enter it.
    """
    await workspace.prepare({}, sandbox_user=host_user)  # the Docker body is not used here
    repo = workspace.repo
    if repo is None or workspace.mount_source is None:
        return None
    if workspace.mode is Mode.LIVE and not repo.read_only and \
            not _writable(workspace.mount_source, host_user):
        raise SandboxInitFailed(
            f"repository local_path {repo.local_path!r} is not writable by the host user the "
            f"process sandbox runs as ({host_user or os.getuid()}), so the agent's first edit "
            "would fail", details="choose one: a copy the sandbox owns, include_files=['**'] "
                                  "(take results back with copy_files), or read_only=True, or "
                                  "give that host user write access to the directory")
    return RepoBind(workspace.mount_source, repo.mount_point, repo.read_only)


def _writable(path: Path, host_user: str) -> bool:
    """Can ``host_user`` ("uid:gid"; "" for this process) write into ``path``?"""
    if not host_user:
        return os.access(path, os.W_OK | os.X_OK)
    uid, _, gid = host_user.partition(":")
    st = path.stat()
    if st.st_uid == int(uid):
        bits = stat.S_IWUSR | stat.S_IXUSR
    elif st.st_gid == int(gid):
        bits = stat.S_IWGRP | stat.S_IXGRP
    else:
        bits = stat.S_IWOTH | stat.S_IXOTH
    return st.st_mode & bits == bits
