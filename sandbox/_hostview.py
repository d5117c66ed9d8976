"""What a pool's reset learns about a sandbox from outside it: who a process runs as, and a
path's metadata; and what a backend offers to see them (`HostInspector`).

Neutral: the Docker backend implements `HostInspector` from the host (``docker/_hostview``);
a backend that cannot offer one gets no reuse between users.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from typing import Protocol

import attrs

__all__ = ["HostInspector", "Identity", "Meta", "identity_of_status"]


@attrs.frozen
class Identity:
    """A process's user and groups as the kernel holds them (from ``/proc/<pid>/status``):
    real, effective, saved and filesystem uid and gid, and the supplementary groups."""

    uids: tuple[int, ...]
    gids: tuple[int, ...]
    groups: frozenset[int]

    @property
    def is_root(self) -> bool:
        """True when any of its uids or gids is 0."""
        return 0 in self.uids or 0 in self.gids

    def __str__(self) -> str:
        uids, gids = set(self.uids), set(self.gids)
        text = f"uid {'/'.join(map(str, sorted(uids)))} gid {'/'.join(map(str, sorted(gids)))}"
        extra = self.groups - gids
        return f"{text} groups {','.join(map(str, sorted(extra)))}" if extra else text

    def may_change(self, uid: int, gid: int, mode: int) -> bool:
        """Whether this identity (not root, no capabilities) could change the mode, ACLs or
        user xattrs of a directory owned by ``uid``:``gid`` with ``mode``: it owns it, or it
        may write it (user xattrs need write access, and ownership under the sticky bit)."""
        me = self.uids[1]
        if uid == me:
            return True
        if mode & stat.S_ISVTX:
            return False
        return bool(mode & 0o002) or (
            bool(mode & 0o020) and (gid in self.gids or gid in self.groups))


def identity_of_status(text: str) -> Identity:
    """The `Identity` in the text of a ``/proc/<pid>/status`` file.

    Raises:
        ValueError: The Uid, Gid or Groups line is missing or malformed.
    """
    fields: dict[str, list[int]] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("Uid", "Gid", "Groups"):
            fields[key] = [int(v) for v in value.split()]
    if len(fields.get("Uid", ())) != 4 or len(fields.get("Gid", ())) != 4 or \
            "Groups" not in fields:
        raise ValueError("no Uid, Gid and Groups lines")
    return Identity(tuple(fields["Uid"]), tuple(fields["Gid"]), frozenset(fields["Groups"]))


@attrs.frozen
class Meta:
    """A path's metadata as the reset compares it: type, mode, owner, and for a directory its
    extended attributes (POSIX ACLs are ``system.posix_acl_*`` ones); for anything else its
    ctime and size (ctime moves on any change of content, mode, owner or xattr)."""

    kind: int
    mode: int
    uid: int
    gid: int
    xattrs: tuple[tuple[str, bytes], ...] = ()
    ctime_ns: int = 0
    size: int = 0


class HostInspector(Protocol):
    """A sandbox seen from outside it; every method blocks (call it in a worker thread)."""

    def kill_all(self, identity: Identity) -> str:
        """Kill every process but the sandbox's own init, whatever its uid: "" when none is
        left, else why the sandbox cannot be reused (one ran as another identity)."""
        ...

    def wait_none_left(self) -> str:
        """"" once only the sandbox's own init is left, else what survived."""
        ...

    def metadata(self, paths: Iterable[str]) -> dict[str, Meta | None]:
        """Each path's `Meta` (None: gone, or reached only through a symbolic link)."""
        ...

    def changeable_dirs(self, identity: Identity) -> list[str]:
        """Directories whose mode, owner, xattrs or ACLs ``identity`` could change."""
        ...
