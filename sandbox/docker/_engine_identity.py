"""Which daemon process answers the engine's local unix socket (`identify`), so kept engine
facts can be trusted for as long as the same process answers (`_facts_cache`).

A connection to a unix socket carries, in the kernel, the credentials of the process that
called ``listen()`` on it (``SO_PEERCRED``). dockerd binds its own socket (it unlinks the old
path and binds anew each start), so the listener's pid together with its start time
(``/proc/<pid>/stat``, clock ticks since boot) and the boot's id names one daemon process
instance: a restarted daemon is another instance, whatever its configuration.

That holds only where the listener's creator is the daemon that serves. It is not trusted
(`identify` answers None, and the facts fall back to the time window) when:

- the address is not ``unix://`` (tcp, ssh: no peer process to name);
- the peer is pid 1 or not a process named ``dockerd``: a socket made by a supervisor and
  passed on (systemd's ``docker.socket`` with ``dockerd -H fd://`` gives pid 1, or the user
  manager's pid; the supervisor keeps the socket across daemon restarts), or a proxy in front
  of an engine elsewhere (Docker Desktop, Colima, an ssh forward), whose restarts say nothing
  of the engine's;
- ``/proc`` is another pid namespace's than this process's (``/proc/self`` does not name
  our pid): the peer's pid would name some other process there;
- the peer is in a pid namespace this process cannot see (``SO_PEERCRED`` gives pid 0: the
  socket mounted into a container) or its ``/proc`` entry cannot be read (``hidepid``);
- the connect does not complete at once (a full accept backlog: nothing is waited for).

Rootless Docker under rootlesskit is trusted like rootful Docker when its dockerd is visible
here: the API socket is bound by dockerd itself (rootlesskit forwards ports, not this socket),
so a restart binds a new one.

Two facts the engine reports change without a restart or reload, and are part of the
identity too: its CPU count (dockerd counts its own CPU affinity, so the affinity of its pid
is read) and the host's memory (``sysconf``, the same kernel as the peer's).

Security: the identity only decides whether facts the SDK itself read from the engine are
read again; a wrong "same" could only plan a sandbox from the previous daemon's facts (runc
pinned, the API version checked). Every input is the kernel's: the peer's credentials, its
``/proc`` stat line, the boot id. The name checked is one the listener gives itself, and the
listener on the engine's socket is the engine (or whoever controls the engine anyway); no
sandbox can listen on that socket, and nothing from inside a sandbox is read.
"""

from __future__ import annotations

import functools
import os
import socket
import struct

import attrs

__all__ = ["EngineInstance", "identify"]

_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@attrs.frozen
class EngineInstance:
    """One daemon process instance, and the host size it reports (see above)."""

    boot_id: bytes
    pid: int
    uid: int
    start_time: int  # clock ticks after boot
    cpus: int
    memory_pages: int


@functools.cache
def _proc_is_ours() -> bool:
    """Whether ``/proc`` shows this process's pid namespace (``/proc/self`` names our pid):
    ``SO_PEERCRED`` gives the peer's pid in ours, and under another namespace's ``/proc`` (a
    ``unshare -p`` without its own mount, the host's mounted into a container) that pid
    would name some other process."""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def identify(address: str) -> EngineInstance | None:
    """The daemon instance listening at ``address`` (``unix:///path``), or None where that
    cannot be told or would not name the serving daemon (see above).

    Costs one connect (closed at once: the daemon accepts it and reads end-of-file) and three
    small reads of ``/proc``; nothing waits.
    """
    if not address.startswith("unix://") or not _proc_is_ours():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
    try:
        sock.connect(address.removeprefix("unix://"))
        pid, uid, _gid = _PEERCRED.unpack(
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    except OSError:
        return None
    finally:
        sock.close()
    if pid <= 1:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat_file:
            stat = stat_file.read()
        with open(_BOOT_ID, "rb") as boot_file:
            boot_id = boot_file.read().strip()
        cpus = len(os.sched_getaffinity(pid))
    except OSError:
        return None
    name_ends = stat.rfind(b")")
    if stat[stat.find(b"(") + 1:name_ends] != b"dockerd":
        return None
    fields = stat[name_ends + 2:].split()  # from field 3 (state) on
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    return EngineInstance(boot_id, pid, uid, int(fields[19]), cpus,
                          os.sysconf("SC_PHYS_PAGES"))
