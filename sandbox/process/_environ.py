"""Read a sandbox process's environment from the host, even one whose ``/proc`` file is closed.

The kill sweep (`_tree`) finds a command's processes by a marker in their environment. A
process that runs a program its user cannot read (the session's guarded shell, and every
process it forks, or busybox applets it starts again through ``/proc/self/exe``) is not
dumpable, and the kernel then makes its ``/proc/<pid>/environ`` (mode 0400) owned by root of
the process's user namespace. The sandbox's namespace maps one uid, not 0, so that owner is
the host's root: an SDK run as root reads the file (CAP_DAC_OVERRIDE), one run as another user
is refused (EACCES), never finds those processes, and a session command's timeout killed
nothing but replaced the shell.

That SDK owns the sandbox's user namespace, so the kernel lets it read the memory of the
sandbox's processes (``ptrace_may_access``: a namespace's owner holds CAP_SYS_PTRACE in it):
the environment is read from ``env_start``..``env_end`` (fields 50 and 51 of
``/proc/<pid>/stat``, which shows them to that reader alone) with ``process_vm_readv``, the
same bytes the ``/proc`` file gives. A process that ran a program its namespace cannot map
(a root-owned unreadable file) is closed to this too: its namespace link is then closed
as well, so the sweep never counts it as the sandbox's (`_tree.members`).
"""

from __future__ import annotations

import ctypes

from .._proc_environ import MAX_ENVIRON, read_environ_file

__all__ = ["read_environ"]



class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_vm_readv = _libc.process_vm_readv
_vm_readv.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_ulong,
                      ctypes.POINTER(_IoVec), ctypes.c_ulong, ctypes.c_ulong]
_vm_readv.restype = ctypes.c_ssize_t


def read_environ(pid: int) -> bytes | None:
    """The environment block of process ``pid`` (NUL-separated entries), or None when it
    cannot be read (gone, or closed to this process by /proc and by ptrace alike)."""
    try:
        return read_environ_file(f"/proc/{pid}/environ")
    except PermissionError:
        return _from_memory(pid)
    except OSError:
        return None


def _from_memory(pid: int) -> bytes | None:
    """The environment read from the process's memory, where its /proc file is closed."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # fields 50, 51: env_start, env_end
    except (OSError, IndexError, ValueError):
        return None
    if not 0 < start < end:  # 0: not shown to this reader (no ptrace access), or no memory
        return None
    size = min(end - start, MAX_ENVIRON)
    buf = ctypes.create_string_buffer(size)
    local = _IoVec(ctypes.cast(buf, ctypes.c_void_p), size)
    remote = _IoVec(start, size)
    got = _vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    if got < 0:  # ESRCH (gone), EPERM (closed to ptrace too), EFAULT (memory unmapped)
        return None
    return buf.raw[:got]
