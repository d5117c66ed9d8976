"""A writable root for a process sandbox: an overlay of the shared image over its own upper dir.

With ``security.read_only_root=False`` the root is an overlayfs whose lower layer is the
(shared, never written) root directory and whose upper and work directories are in the
sandbox's state directory, on disk: writes, deletions and renames anywhere in the root land
there, reach neither the image cache nor another sandbox, and go with the state directory.

Bubblewrap 0.8 (Debian 12's) has no ``--overlay``, so the overlay is mounted by host root in a
private mount namespace that the holder (bwrap) then lives in: bwrap binds the
merged directory at /, the host never sees the mount, and it ends with the sandbox's last
process. An unprivileged owner would have to mount it inside a user namespace of its own, which
then nests bwrap's and makes its namespaces unjoinable from outside: refused there (`problem`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .._errors import SandboxInitFailed

__all__ = ["overlay_options", "overlay_problem", "prepare_overlay"]

#: Characters overlayfs's option parser or mount(8) would read as separators.
_UNSAFE = frozenset(",:\\\n\t ")


def overlay_problem() -> str:
    """Why this process cannot give a sandbox a writable root ("" when it can)."""
    if os.getuid() != 0:
        return (f"a writable root is an overlay mounted by root, and this process runs as uid "
                f"{os.getuid()} (bubblewrap 0.8 has no --overlay, and an overlay mounted in "
                "a user namespace of our own would leave the sandbox's namespaces unjoinable)")
    return ""


def _exists(root: Path, point: str) -> bool:
    return os.path.lexists(root / point.strip("/")) if point != "/" else True


def prepare_overlay(state: Path, root: Path, points: Iterable[str]) -> Path:
    """Make the upper, work and merged directories; return the merged one.

    Mount points the sandbox needs and the image lacks are made in the upper directory, so
    bwrap need not create them in directories of the image owned by users it cannot map.
    The upper root gets the image root's owner and mode (the root stays root's, as in a
    container).
    """
    bad = sorted(_UNSAFE & set(str(root)))
    if bad:
        raise SandboxInitFailed(f"security.read_only_root: the root directory {str(root)!r} "
                                f"holds {bad[0]!r}, which overlayfs cannot take in a path",
                                details="use a root directory without it, or "
                                "read_only_root=True")
    base = state / "overlay"
    upper, work, merged = base / "upper", base / "work", base / "merged"
    for path, mode in ((base, 0o711), (upper, 0o700), (work, 0o700), (merged, 0o711)):
        path.mkdir(mode=mode)
        os.chmod(path, mode)  # whatever the umask: bwrap (host nobody) enters base and merged
    for point in points:
        if not _exists(root, point):
            (upper / point.strip("/")).mkdir(mode=0o755, parents=True, exist_ok=True)
    info = os.stat(root)
    os.chown(upper, info.st_uid, info.st_gid)
    os.chmod(upper, info.st_mode & 0o7777)
    return merged


def overlay_options(state: Path, root: Path) -> str:
    """The overlay's mount options: the image ``root`` under the sandbox's upper directory
    (mounted by the holder, in a mount namespace of its own: see `_forkserver._holder`)."""
    base = state / "overlay"
    return f"lowerdir={root},upperdir={base / 'upper'},workdir={base / 'work'}"
