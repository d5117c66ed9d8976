"""After a sandbox used a live ``local_path`` mount: undo what would reach past it on the host.

A live mount is the user's own directory, so what the sandbox leaves there is later run or
read by host users and tools. At cleanup (the sandbox's processes are gone by then) the SDK
walks the directory without following links and:

* strips setuid and setgid bits changed during the sandbox's life (a setuid file there would
  run with its owner's uid for any host user who starts it);
* reports symbolic links made during the sandbox's life that point outside the directory
  (``results.json -> /etc/shadow`` would be read by a host tool that opens it as root).

"During the sandbox's life" is the inode's change time, which only the kernel sets
(``utimes`` cannot move it back): a mode change or a new link after ``since`` updates it.
Everything else the sandbox wrote stays as it is: the directory is the user's.
"""

from __future__ import annotations

import os
import posixpath
import stat
import time

import attrs

__all__ = ["Finding", "scan_live_mount"]

#: Check a few seconds before the sandbox was made: inode times come from a coarse clock.
SLACK = 2.0
_SET_ID = stat.S_ISUID | stat.S_ISGID


@attrs.frozen
class Finding:
    """One thing the scan found: ``kind`` is ``setid_stripped``, ``symlink_outside`` or
    ``incomplete``; ``path`` the host path; ``detail`` the old mode or the link target."""

    kind: str
    path: str
    detail: str


def _outside(root: str, link_dir: str, target: str) -> bool:
    """Does ``target``, read at ``link_dir`` on the host, leave ``root`` (lexically)?"""
    where = posixpath.normpath(posixpath.join(link_dir, target))
    return not (where == root or where.startswith(root.rstrip("/") + "/"))


def scan_live_mount(root: str, since: float, *, budget: float = 60.0) -> list[Finding]:
    """Strip set-id bits changed after ``since`` under ``root`` and list outward links made
    after it (blocking; run it in a thread). Stops after ``budget`` seconds, saying so."""
    findings: list[Finding] = []
    root = os.path.realpath(root)
    cutoff = since - SLACK
    deadline = time.monotonic() + budget
    try:
        top = os.lstat(root)
    except OSError:
        return findings
    if not stat.S_ISDIR(top.st_mode):
        return findings
    if top.st_ctime >= cutoff and top.st_mode & _SET_ID:
        _strip(root, None)
        findings.append(Finding("setid_stripped", root, f"mode {stat.S_IMODE(top.st_mode):04o}"))
    for dirpath, dirnames, filenames, dirfd in os.fwalk(root, follow_symlinks=False):
        if time.monotonic() > deadline:
            findings.append(Finding("incomplete", dirpath, f"scan stopped after {budget:.0f} s"))
            break
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.lstat(name, dir_fd=dirfd)
                if st.st_ctime < cutoff:
                    continue
                if stat.S_ISLNK(st.st_mode):
                    target = os.readlink(name, dir_fd=dirfd)
                    if _outside(root, dirpath, target):
                        findings.append(Finding("symlink_outside", path, target))
                elif st.st_mode & _SET_ID and (stat.S_ISREG(st.st_mode)
                                               or stat.S_ISDIR(st.st_mode)):
                    _strip(name, dirfd)
                    findings.append(Finding("setid_stripped", path,
                                            f"mode {stat.S_IMODE(st.st_mode):04o}"))
            except OSError:
                continue  # gone meanwhile, or unreadable: nothing to strip there
    return findings


def _strip(name: str, dirfd: int | None) -> None:
    """Clear setuid/setgid on ``name`` without following a link put in its place."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=dirfd)
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            return
        # chmod through /proc acts on the inode the O_PATH descriptor holds, not a path.
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) & ~_SET_ID)
    finally:
        os.close(fd)
