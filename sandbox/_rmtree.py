"""Remove a directory tree that sandbox code wrote: any depth, width or modes, safely.

``shutil.rmtree`` recurses (a tree 1,500 levels deep raised `RecursionError` and stranded
506 MB) and stops at the first entry it cannot remove. `remove_tree` walks with directory
descriptors instead: one at a time open (it climbs back up by ``..``, checking it lands where it
came from), names relative to them (no path ever reaches PATH_MAX), never following a symlink
and never entering another filesystem. A directory left without permissions (mode 000, or no
write bit) is given back ``0700`` first. What cannot go (EPERM: an immutable or append-only
file, a mount point) is skipped and reported; everything else still goes, and ``last`` (the
owner record gc needs to collect the rest later) is removed only when nothing else is left.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

import attrs

__all__ = ["remove_tree"]

#: Subdirectories remembered per level between scans: bounds memory on a wide tree.
BATCH = 4096
#: Problems named one by one in a report; the rest are counted.
SHOWN = 5
#: Descriptors opened here never follow a symlink and never block on a FIFO.
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


@attrs.define
class _Level:
    """A directory on the way down: its name in its parent, identity, what is left to do."""

    name: str
    ino: int
    pending: list[str] = attrs.field(factory=list)
    stuck: set[str] = attrs.field(factory=set)  # entries that could not go: skipped on rescan


class _Walk:
    """One removal: the current directory's descriptor, the levels above it, the problems."""

    def __init__(self, fd: int, top: str) -> None:
        info = os.fstat(fd)
        self.fd, self.dev, self.top = fd, info.st_dev, top
        self.levels = [_Level("", info.st_ino)]
        self.problems: list[str] = []
        self.count = 0

    def where(self, name: str = "") -> str:
        parts = [lv.name for lv in self.levels[1:]] + ([name] if name else [])
        if len(parts) > 8:  # a message, not a path to use: keep it readable
            parts = [*parts[:3], f"...({len(parts) - 6} more levels)...", *parts[-3:]]
        return "/".join([self.top, *parts])

    def fail(self, name: str, why: str) -> None:
        self.levels[-1].stuck.add(name)
        self.count += 1
        if len(self.problems) < SHOWN:
            self.problems.append(f"{self.where(name)}: {why}")

    def run(self) -> None:
        while True:
            level = self.levels[-1]
            if not level.pending:
                level.pending = self._scan(level)
            if level.pending:
                self._descend(level.pending.pop())
            elif len(self.levels) == 1 or not self._ascend():
                return

    def _scan(self, level: _Level) -> list[str]:
        """Unlink what is not a directory; up to `BATCH` subdirectories still to enter."""
        found: list[str] = []
        os.lseek(self.fd, 0, os.SEEK_SET)
        with os.scandir(self.fd) as entries:
            for entry in entries:
                if entry.name in level.stuck:
                    continue
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if not self._rmdir_empty(entry.name):
                        found.append(entry.name)
                    if len(found) >= BATCH:
                        break
                elif self._unlink(entry.name):
                    found.append(entry.name)  # a directory after all
        return found

    def _rmdir_empty(self, name: str) -> bool:
        """Remove ``name`` at once if it is an empty directory: one call instead of entering
        and leaving it (most directories of a sandbox's state are empty). False when that
        did not do it (not empty, no permission, a mount point, ...): it is entered then,
        and whatever stops it is met and reported there."""
        try:
            os.rmdir(name, dir_fd=self.fd)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True

    def _unlink(self, name: str) -> bool:
        """Unlink a non-directory; True if it turned out to be a directory."""
        try:
            _retry_writable(self.fd, lambda: os.unlink(name, dir_fd=self.fd))
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            return True
        except OSError as exc:
            self.fail(name, _why(exc))
        return False

    def _descend(self, name: str) -> None:
        try:
            child = _open_dir(self.fd, name)
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                self._unlink(name)  # replaced by a file or symlink meanwhile
            else:
                self.fail(name, _why(exc))
            return
        info = _usable(child)
        if info.st_dev != self.dev:
            os.close(child)
            self.fail(name, "a mount point (another filesystem): not entered")
            return
        os.close(self.fd)
        self.fd = child
        self.levels.append(_Level(name, info.st_ino))

    def _ascend(self) -> bool:
        """Back to the parent (checked to be the one we came from), removing the child."""
        done = self.levels.pop()
        try:
            parent = os.open("..", _DIR, dir_fd=self.fd)
        except OSError as exc:
            self.levels.append(done)
            self.fail("..", f"{_why(exc)}; stopped")
            return False
        info = os.fstat(parent)
        if (info.st_dev, info.st_ino) != (self.dev, self.levels[-1].ino):
            os.close(parent)
            self.levels.append(done)
            self.fail("..", "the tree was moved while it was being removed; stopped")
            return False
        os.close(self.fd)
        self.fd = parent
        if done.stuck:
            self.levels[-1].stuck.add(done.name)  # its problems are reported already
            return True
        try:
            _retry_writable(parent, lambda: os.rmdir(done.name, dir_fd=parent))
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.fail(done.name, _why(exc))
        return True


def _why(exc: OSError) -> str:
    if exc.errno == errno.EPERM:
        return "operation not permitted (immutable or append-only?)"
    return exc.strerror or str(exc)


def _retry_writable(dir_fd: int, action: Callable[[], None]) -> None:
    """Run ``action``; on EACCES make the directory writable for us (ours, or we are root)
    and run it once more."""
    try:
        action()
    except PermissionError as exc:
        if exc.errno != errno.EACCES:
            raise
        with contextlib.suppress(OSError):
            os.fchmod(dir_fd, 0o700)
        action()


def _usable(fd: int) -> os.stat_result:
    """Give an open directory of ours read, write and search permission (0700) if it lacks
    any: it is emptied, entered and left by ``..``. Its stat."""
    info = os.fstat(fd)
    if info.st_mode & 0o700 != 0o700 and info.st_uid == os.geteuid():
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o700)
    return info


def _open_dir(dir_fd: int, name: str) -> int:
    """Open the directory ``name`` without following a symlink; one without read or search
    permission for us is made ``0700`` first (through an O_PATH descriptor, never by name)."""
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except PermissionError as exc:
        if exc.errno != errno.EACCES:
            raise
    path_fd = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                      dir_fd=dir_fd)
    try:
        os.chmod(f"/proc/self/fd/{path_fd}", 0o700)  # fchmod refuses an O_PATH descriptor
    finally:
        os.close(path_fd)
    return os.open(name, _DIR, dir_fd=dir_fd)


def remove_tree(path: Path, *, last: str = "") -> list[str]:
    """Remove the directory ``path`` and all it holds; what is left, one line each.

    ``last`` names an entry of ``path`` removed only after every other one, and kept when
    anything else is left (so what is left stays collectable by whoever reads it). Never
    raises for what it meets in the tree: each problem is a line of the result ([] when
    ``path`` is gone, or was never there).
    """
    try:
        parent = os.open(path.parent, _DIR)
    except FileNotFoundError:
        return []
    try:
        return _remove_in(parent, path.name, str(path), last)
    except OSError as exc:
        return [f"{path}: {_why(exc)}"]
    finally:
        os.close(parent)


def _remove_in(parent: int, name: str, shown: str, last: str) -> list[str]:
    try:
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(name, dir_fd=parent)
        return []
    top = _open_dir(parent, name)
    _usable(top)
    walk = _Walk(top, shown)
    if last:
        walk.levels[0].stuck.add(last)
    try:
        walk.run()
        if walk.count:
            more = walk.count - len(walk.problems)
            return [*walk.problems, *([f"and {more} more entries"] if more > 0 else [])]
        if last:  # walk.fd is the top directory again
            with contextlib.suppress(FileNotFoundError):
                _retry_writable(walk.fd, lambda: os.unlink(last, dir_fd=walk.fd))
    finally:
        os.close(walk.fd)
    _retry_writable(parent, lambda: os.rmdir(name, dir_fd=parent))
    return []
