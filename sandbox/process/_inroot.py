"""Open paths inside a process sandbox's root, never following a link out of it.

`open_in_root` opens a directory below the sandbox's root with ``openat2(RESOLVE_IN_ROOT)``:
``..`` and absolute symlinks stay inside that root, so a link planted in the sandbox cannot
lead out.
"""

from __future__ import annotations

import ctypes
import errno
import os

__all__ = ["missing", "open_in_root"]

_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_SYS_OPENAT2 = 437  # the same number on every architecture (the generic syscall table)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]


def open_in_root(root_fd: int, path: str) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` as seen from the root ``root_fd``.

    Raises:
        OSError: It does not exist (ENOENT) or is not a directory (ENOTDIR).
    """
    how = _OpenHow(os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, 0,
                   _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)
    fd = _syscall(_SYS_OPENAT2, ctypes.c_int(root_fd), ctypes.c_char_p(path.encode()),
                  ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)}: {path}")
    return int(fd)


def missing(exc: OSError) -> bool:
    """True when ``exc`` says a path or one of its parents does not exist."""
    return exc.errno in (errno.ENOENT, errno.ENOTDIR)
