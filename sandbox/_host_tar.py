"""The archive copy in sends: a host file or tree as a tar, built without following anything.

What it holds, and why:

- **Nothing is followed.** The tree is walked with ``lstat`` and ``scandir`` entries that do not
  follow links; a symlink (the source itself, or one inside it, to anywhere) is stored as a
  link, its target as text. No file outside the source is ever opened.
- **No host owner.** Every member has uid and gid 0 and no user or group name. The sandbox user
  unpacks the archive and owns what it makes: a non-root user cannot give files away, and a root
  one makes them root's, its own. Host ids and names never reach the sandbox.
- **Whole-second mtimes, as ``docker cp``.** An ordinary member then needs no PAX record (a
  float mtime costs ``tarfile.add`` one per member): the archive is half the size and takes less
  than half the CPU. PAX records stay where they are needed (long or non-ASCII names, big
  files).
- Hard links inside the source stay hard links; FIFOs and devices are stored as ``tarfile``
  stores them; sockets are left out (a tar cannot hold one).
"""

from __future__ import annotations

import errno
import os
import stat
import tarfile
from collections.abc import Callable
from typing import IO

__all__ = ["write_host_tar"]


def write_host_tar(src: str, arcname: str, out: IO[bytes]) -> None:
    """Write the tar of ``src`` (a file, link or tree), its top member named ``arcname``.

    Every file and directory is opened relative to its parent's descriptor and never through
    a link, so a tree changed while it is read (a directory swapped for a link) still yields
    nothing from outside it.

    Raises:
        OSError: A file of the source could not be read, or changed kind while read.
    """
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        _Walk(tf).add(None, src, arcname)


#: Opening a file that turned into a FIFO must not wait for a writer; no descriptor leaks.
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class _Walk:
    def __init__(self, tf: tarfile.TarFile) -> None:
        self.tf = tf
        self.links: dict[tuple[int, int], str] = {}  # (dev, inode) -> first member's name

    def add(self, parent: int | None, path: str, name: str) -> None:
        """Add ``path`` (relative to the directory descriptor ``parent``, if any)."""
        try:
            st = os.lstat(path, dir_fd=parent)
        except FileNotFoundError:
            if parent is None:
                raise
            return  # gone since its directory was listed: as if it had never been there
        info = tarfile.TarInfo(name)
        info.mode = stat.S_IMODE(st.st_mode)
        info.mtime = int(st.st_mtime)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        mode = st.st_mode
        if stat.S_ISREG(mode):
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.links:
                info.type, info.linkname = tarfile.LNKTYPE, self.links[key]
                self.tf.addfile(info)
                return
            with open(self._open(parent, path, stat.S_ISREG), "rb") as f:
                info.size = os.fstat(f.fileno()).st_size
                self.tf.addfile(info, f)
            if st.st_nlink > 1:
                self.links[key] = name
        elif stat.S_ISDIR(mode):
            info.type = tarfile.DIRTYPE
            self.tf.addfile(info)
            fd = self._open(parent, path, stat.S_ISDIR, os.O_DIRECTORY)
            try:
                with os.scandir(fd) as entries:
                    children = sorted(entry.name for entry in entries)
                for child in children:
                    self.add(fd, child, f"{name}/{child}")
            finally:
                os.close(fd)
        elif stat.S_ISLNK(mode):
            info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path, dir_fd=parent)
            self.tf.addfile(info)
        elif stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            info.type = (tarfile.FIFOTYPE if stat.S_ISFIFO(mode) else
                         tarfile.CHRTYPE if stat.S_ISCHR(mode) else tarfile.BLKTYPE)
            if not stat.S_ISFIFO(mode):
                info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
            self.tf.addfile(info)
        # Anything else (a socket) has no tar form: left out, as tarfile.add does.

    @staticmethod
    def _open(parent: int | None, path: str, kind: Callable[[int], bool], flags: int = 0) -> int:
        """Open without following a link, and check it is still of the kind ``lstat`` saw."""
        fd = os.open(path, _OPEN | flags, dir_fd=parent)
        try:
            if not kind(os.fstat(fd).st_mode):
                raise OSError(errno.ESTALE, "changed while the copy read it", path)
            if flags == 0:
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd
