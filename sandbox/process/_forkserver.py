"""The process backend's spawner: host processes that start every command in a sandbox.

Run as its own program (``python -I -S _forkserver.py FD``, standard library only, so it
starts without the SDK's imports), once per SDK process. Each request on the SEQPACKET socket
``FD`` (JSON with the sandbox's seccomp filter, plus a socket) forks a *zygote* for one
sandbox. It sets NoNewPrivs and loads the filter at once, while bwrap is still starting the
sandbox (a load took ~3 ms here), then waits on its socket for the sandbox: its cgroup, its
namespaces (joined as nsenter does: the filter allows ``setns``) and its ids (an empty bounding
set, undumpable); it says ``joined`` once it is in. It then serves that sandbox. A command
is one ``posix_spawn`` (vfork and exec: it inherits all of that) with its stdio, working
directory and a new session; with rlimits, a fork that sets them first (they would limit the
zygote too). The zygote reports ``pid`` (with a pidfd), ``exec`` (0, or the errno of the
``step`` that failed; one message with the pid when posix_spawn ran it) and ``status`` (the
raw wait status; in that same message too when the command had ended by then).

Why not ``setpriv`` + ``nsenter`` per command: two more execs of dynamically linked programs
cost about 2.5 ms of a 4.3 ms round trip here, and nothing could install a seccomp filter in
the command after it joined the sandbox. The zygote is outside the sandbox's pid namespace
(nothing inside can name it to signal it) and undumpable (nothing with its uid can trace it or
write its memory).
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import fcntl
import gc
import json
import mmap
import os
import resource
import select
import signal
import socket
import sys
import termios
import warnings  # noqa: F401 - os.execvpe imports it lazily: never from a sandbox's files
from collections.abc import Mapping, Sequence
from typing import Any

MAX_FDS = 16
#: The longest message sent as itself; a longer one (a request with a large environment) goes
#: in a memfd: a SEQPACKET message must fit the socket's send buffer (about 208 KiB here).
INLINE_MAX = 64 << 10
#: What is sent in place of a message that went in a memfd (no JSON starts so).
IN_MEMFD = b"@"
#: The longest message read from a memfd (the kernel's own bound on argv and environment is
#: a quarter of the stack limit).
MAX_MEMFD_MESSAGE = 64 << 20
_FD_SPACE = socket.CMSG_SPACE(MAX_FDS * array.array("i").itemsize)
# Plain ints: or-ing the socket module's IntFlag members runs enum code on every message.
_RECV_FLAGS = int(socket.MSG_CMSG_CLOEXEC)
_SEND_FLAGS = int(socket.MSG_NOSIGNAL)
_decode = json.JSONDecoder().decode  # what json.loads does after its checks (per message)
_NS_FLAGS = {"user": 0x10000000, "mnt": 0x00020000, "pid": 0x20000000, "ipc": 0x08000000,
             "uts": 0x04000000, "cgroup": 0x02000000, "net": 0x40000000}
_MS_REC = 0x4000
_MS_PRIVATE = 1 << 18
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_libc = ctypes.CDLL(None, use_errno=True)
#: The signals a disposition can be set for. A command starts with each at its default, as
#: on Docker; posix_spawn is told so (`_Zygote.fast`): glibc's child then sets each once,
#: where by itself it reads every signal's disposition and sets it again (about 60 fewer
#: syscalls per command while the zygote waits in vfork).
_CATCHABLE = frozenset(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
_RESET_ALWAYS = frozenset({signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                           signal.SIGCHLD})


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def install_filter(program: bytes) -> None:
    """Set NoNewPrivs, then the classic-BPF seccomp ``program`` (8 bytes per instruction;
    empty: no filter). Raises OSError (EINVAL for a malformed program)."""
    count, rest = divmod(len(program), 8)
    if rest or count > 4096:  # BPF_MAXINSNS
        raise OSError(22, f"not a program of 1 to 4096 BPF instructions: {program!r:.40}")
    _check(_libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if program:
        buf = ctypes.create_string_buffer(program, len(program))
        prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
        _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0),
               "prctl(SECCOMP)")


def send_message(sock: socket.socket, message: Mapping[str, Any],
                 fds: Sequence[int] = ()) -> None:
    """One message of the protocol: JSON, plus ``fds`` passed along (SCM_RIGHTS). JSON longer
    than `INLINE_MAX` goes in a memfd passed last, the message itself being `IN_MEMFD`."""
    data = json.dumps(message).encode()
    if len(data) > INLINE_MAX:
        memfd = os.memfd_create("sandbox-request", os.MFD_CLOEXEC)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(memfd, view):]
            sock.sendmsg([IN_MEMFD], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                       array.array("i", [*fds, memfd]))], _SEND_FLAGS)
        finally:
            os.close(memfd)
        return
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))] if fds else []
    sock.sendmsg([data], ancillary, _SEND_FLAGS)


def parse_message(data: bytes, fds: list[int]) -> Any:
    """The JSON of a received message; one sent in a memfd is read from it (its descriptor,
    the last of ``fds``, is taken off the list and closed)."""
    if data[:1] != IN_MEMFD:
        return _decode(data.decode())
    if not fds:
        raise ValueError("a message in a memfd came without its memfd")
    memfd = fds.pop()
    try:
        size = os.fstat(memfd).st_size
        if size > MAX_MEMFD_MESSAGE:
            raise ValueError(f"a message of {size} bytes (at most {MAX_MEMFD_MESSAGE})")
        chunks, done = [], 0
        while done < size:
            chunk = os.pread(memfd, size - done, done)
            if not chunk:
                raise ValueError("a message's memfd ended early")
            chunks.append(chunk)
            done += len(chunk)
        return json.loads(b"".join(chunks))
    finally:
        os.close(memfd)


def receive_message(sock: socket.socket, size: int = 1 << 20,
                    flags: int = 0) -> tuple[bytes, list[int]]:
    """One message and the descriptors it passed (close-on-exec); b"" at the end."""
    data, ancillary, _, _ = sock.recvmsg(size, _FD_SPACE, _RECV_FLAGS | flags)
    return data, _fds_of(ancillary)


def _fds_of(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
            fds.extend(got)
    return fds


def close_all(fds: list[int]) -> None:
    """Close every descriptor of ``fds`` and empty it (closing it again closes none)."""
    for fd in fds:
        os.close(fd)
    fds.clear()


def _command(req: dict[str, Any], fds: list[int], errpipe: int) -> None:
    """In a forked command (the slow path, for rlimits or a terminal): take its stdio,
    working directory, controlling terminal and rlimits, exec (never returns). A failure is
    written to ``errpipe`` as ``"<errno> <step>"``; the step ``exec`` means the program
    itself could not be run."""
    step = "setsid"
    try:
        os.setsid()
        if req.get("tty"):  # the pseudo-terminal becomes the session's controlling terminal
            step = "tty"
            fcntl.ioctl(fds[0], termios.TIOCSCTTY, 0)
        step = "stdio"
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target, inheritable=True)  # received close-on-exec: the rest closes
        step = "chdir"
        os.fchdir(fds[3])
        step = "rlimits"
        for which, soft, hard in req.get("rlimits") or ():
            resource.setrlimit(which, (soft, hard))
        step = "exec"
        os.execvpe(req["argv"][0], req["argv"], _environment(req))
    except OSError as exc:
        os.write(errpipe, f"{exc.errno or 0} {step}".encode())
    except BaseException:
        os.write(errpipe, f"0 {step}".encode())
    os._exit(127)


def _environment(req: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in req["env"])


def _become(req: dict[str, Any]) -> None:
    """Make the zygote what every command starts as: the sandbox's ids, no capability in any
    set (the bounding set only now: joining a user namespace fills it again; and setresuid
    clears nothing when uid 0 is not mapped there, so capset does), undumpable."""
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break
    if req.get("uid") is not None:
        os.setresgid(req["gid"], req["gid"], req["gid"])
        os.setresuid(req["uid"], req["uid"], req["uid"])
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()  # all zero: nothing effective, permitted or inheritable
    _check(_libc.capset(ctypes.byref(header), data), "capset")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "prctl(AMBIENT)")
    _check(_libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0), "prctl(DUMPABLE)")


def _join(namespaces: list[tuple[str, int]]) -> None:
    """Enter every namespace, as nsenter does: the others first (root may, from outside),
    then the user namespace, then whatever needed its capabilities (unprivileged callers)."""
    later = []
    for name, fd in namespaces:
        if name != "user" and _libc.setns(fd, _NS_FLAGS[name]) != 0:
            later.append((name, fd))
    for name, fd in [*(item for item in namespaces if item[0] == "user"), *later]:
        _check(_libc.setns(fd, _NS_FLAGS[name]), f"setns({name})")
    for _, fd in namespaces:
        os.close(fd)


class _Zygote:
    """Serves one sandbox: forks its commands and reports on them (see the module doc)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.poll = select.poll()
        self.poll.register(sock, select.POLLIN)
        self.errpipes: dict[int, tuple[Any, int]] = {}  # fd -> (request id, pid)
        self.pidfds: dict[int, tuple[Any, int, int]] = {}  # pidfd -> (id, pid, errpipe)
        # One buffer for every request: a fresh 1 MiB one each time (recvmsg's) cost an
        # mmap, its page faults, an mremap and a munmap per command. Anonymous memory: only
        # the pages a request reached are ever resident.
        self.buffer = mmap.mmap(-1, INLINE_MAX)
        self.path = ""  # the PATH posix_spawnp searches (our own environment's)

    def spawn(self, req: dict[str, Any], fds: list[int]) -> None:
        ident = req.get("id")
        read_end = -1
        try:
            if req.get("rlimits") or req.get("tty"):
                read_end, write_end = os.pipe2(os.O_CLOEXEC)
                pid = os.fork()
                if pid == 0:
                    os.close(read_end)
                    self.sock.close()
                    _command(req, fds, write_end)
                os.close(write_end)
            else:
                pid = self.fast(req, fds)
            # The command has its own: ours are closed before anything is reported. A write
            # end of its pipes still open here would hide their end of file from the SDK,
            # which reads them when the end comes with the pid (it would watch them on its
            # loop instead: two more wake-ups per command).
            close_all(fds)
            pidfd = os.pidfd_open(pid)
        except OSError as exc:  # posix_spawnp could not exec: no pid, the request ends here
            send_message(self.sock, {"id": ident, "exec": exc.errno or 0, "step": "exec",
                              "final": True})
            return
        except Exception as exc:
            send_message(self.sock, {"id": ident, "error": repr(exc)})
            return
        if read_end >= 0:
            send_message(self.sock, {"id": ident, "pid": pid}, [pidfd])
            self.errpipes[read_end] = (ident, pid)
            self.poll.register(read_end, select.POLLIN)
        else:  # posix_spawn returned: the program runs; one message says both
            # A short command has often ended by the time posix_spawn returns here (the vfork
            # parent is woken by the exec, then waits for a CPU the command holds): then the
            # same message says how it ended, saving a second send, a poll of its pidfd, and
            # the SDK's read and parse of one more message.
            try:
                got, status = os.waitpid(pid, os.WNOHANG)
            except OSError:  # never expected: then its pidfd tells, as for any other
                got = 0
            if got:
                self.report(ident, b'"pid": %d, "exec": 0, "status": %d}' % (pid, status),
                            {"pid": pid, "exec": 0, "status": status}, pidfd)
                os.close(pidfd)
                return
            self.report(ident, b'"pid": %d, "exec": 0}' % pid, {"pid": pid, "exec": 0}, pidfd)
        self.pidfds[pidfd] = (ident, pid, read_end)
        self.poll.register(pidfd, select.POLLIN)

    def fast(self, req: dict[str, Any], fds: list[int]) -> int:
        """posix_spawn (vfork and exec, no Python in the child): everything else is already
        the zygote's own state; the working directory is set here and inherited."""
        env = _environment(req)
        path = env.get("PATH", "")
        if path != self.path:  # posix_spawnp searches the caller's PATH
            os.environ["PATH"] = self.path = path
        os.fchdir(fds[3])
        return os.posix_spawnp(
            req["argv"][0], req["argv"], env, setsid=True, setsigdef=_CATCHABLE,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(fds[:3])])

    def report(self, ident: Any, rest: bytes, message: dict[str, Any], fd: int = -1) -> None:
        """Send ``message`` for request ``ident``: the JSON ``{"id": ident, ...}`` whose
        members after the id are ``rest`` (formatted directly when the id is an int, as the
        SDK's are: json.dumps cost more than the rest of a status report)."""
        if type(ident) is int:
            data = b'{"id": %d, ' % ident + rest
            self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                        array.array("i", (fd,)))] if fd >= 0 else [],
                              _SEND_FLAGS)
        else:
            send_message(self.sock, {"id": ident, **message}, [fd] if fd >= 0 else [])

    def started(self, fd: int) -> None:
        ident, _ = self.errpipes.pop(fd)
        self.poll.unregister(fd)
        failed = os.read(fd, 64).decode(errors="replace").split(" ", 1)
        os.close(fd)
        if len(failed) == 2 and failed[0].isdigit():
            send_message(self.sock, {"id": ident, "exec": int(failed[0]), "step": failed[1]})
        else:
            send_message(self.sock, {"id": ident, "exec": 0})

    def ended(self, pidfd: int) -> None:
        ident, pid, errpipe = self.pidfds[pidfd]
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == 0:
            return
        if errpipe in self.errpipes:
            self.started(errpipe)  # the exec's outcome is reported before the end
        del self.pidfds[pidfd]
        self.poll.unregister(pidfd)
        os.close(pidfd)
        self.report(ident, b'"status": %d}' % status, {"status": status})

    def serve(self) -> None:
        sock, me, buffer = self.sock, self.sock.fileno(), self.buffer
        pidfds, errpipes = self.pidfds, self.errpipes
        while True:
            ready = self.poll.poll()
            if len(ready) > 1:  # requests and exec outcomes before ends
                ready.sort(key=lambda e: e[0] in pidfds)
            for fd, _ in ready:
                if fd == me:
                    size, ancillary, _, _ = sock.recvmsg_into(
                        [buffer], _FD_SPACE, _RECV_FLAGS)
                    fds = _fds_of(ancillary) if ancillary else []
                    if not size:
                        return
                    try:
                        self.spawn(parse_message(buffer[:size], fds), fds)
                    except Exception as exc:
                        send_message(sock, {"id": None, "error": repr(exc)})
                    close_all(fds)
                elif fd in errpipes:
                    self.started(fd)
                elif fd in pidfds:
                    self.ended(fd)


def _holder(spec: dict[str, Any], fds: list[int]) -> None:
    """In the forked holder: its cgroup, an overlay root in a mount namespace of its own (when
    asked), rlimits, a session, the descriptors bwrap's command line names (stdio, then 3, 4,
    ...), the holder's host ids, then exec bwrap (never returns)."""
    try:
        for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):  # ignored by the server
            signal.signal(sig, signal.SIG_DFL)
        for path in spec.get("cgroup_procs") or ():
            with open(path, "w") as f:
                f.write("0")
        if overlay := spec.get("overlay"):
            _check(_libc.unshare(_NS_FLAGS["mnt"]), "unshare(mount)")
            _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None),
                   "making / private")
            _check(_libc.mount(b"sandbox-overlay", overlay["merged"].encode(), b"overlay", 0,
                               overlay["options"].encode()), "mounting the overlay root")
        os.setsid()
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, len(fds)) for fd in fds]
        for target, fd in enumerate(high):  # above every target first, so none is clobbered
            os.dup2(fd, target, inheritable=True)
        for which, soft, hard in spec.get("rlimits") or ():  # after: NOFILE may be small
            resource.setrlimit(which, (soft, hard))
        if ids := spec.get("ids"):
            os.setgroups([])
            os.setresgid(ids[1], ids[1], ids[1])
            os.setresuid(ids[0], ids[0], ids[0])
        os.execve(spec["argv"][0], spec["argv"], _environment(spec))
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(fds[2], f"the sandbox's holder could not start: {exc}\n".encode())
    os._exit(127)


def _zygote(req: dict[str, Any], fds: list[int]) -> None:
    """In the forked zygote: take the filter now (it loads while bwrap starts the sandbox),
    wait for the sandbox's namespaces, enter them, then serve it (never returns)."""
    sock = socket.socket(fileno=fds[0])
    try:
        # What every command starts with: no signal ignored or handled. Ignoring survives
        # fork and exec, so a signal the SDK's own process ignores (nohup's SIGHUP, say)
        # would reach every command through the fork server; on Docker none does.
        for sig in _CATCHABLE:
            if sig in _RESET_ALWAYS or signal.getsignal(sig) is not signal.SIG_DFL:
                signal.signal(sig, signal.SIG_DFL)
        for path in req.get("cgroup_procs") or ():  # now, while bwrap starts
            with open(path, "w") as f:
                f.write("0")
        install_filter(bytes.fromhex(req.get("filter") or ""))
        data, passed = receive_message(sock)
        if not data:
            os._exit(0)
        join = dict(parse_message(data, passed))
        if join.get("uid") is not None:  # as host root still: the namespace denies it later
            os.setgroups([])
        for path in join.get("cgroup_procs") or ():
            with open(path, "w") as f:
                f.write("0")
        _join(list(zip(join["ns"], passed, strict=True)))
        _become(join)
        # Last: in the sandbox's user namespace, RLIMIT_NPROC counts that sandbox's processes.
        for which, soft, hard in join.get("rlimits") or ():
            resource.setrlimit(which, (soft, hard))
        send_message(sock, {"joined": True})
    except Exception as exc:
        # The SDK may have closed its end already (the sandbox removed while this zygote
        # joined it): then nobody is told, and no traceback reaches the SDK's stderr.
        with contextlib.suppress(OSError):
            send_message(sock, {"id": None, "error": f"entering the sandbox failed: {exc}"})
        os._exit(1)
    try:
        _Zygote(sock).serve()
    finally:
        os._exit(0)


def serve(fd: int) -> None:
    """Fork a zygote or a holder per request on ``fd`` until the SDK closes its end.

    Holders stay this (root) process's children: bwrap's --die-with-parent is a parent-death
    signal, which a parent that changed its ids (as a zygote does) may not send (measured).
    A holder's reply socket carries its pid and its end; when the SDK closes that socket
    first (its sandbox was given up, perhaps before the pid came), the holder is killed.
    Zygotes are reaped as they end.
    """
    sock = socket.socket(fileno=fd)
    _check(_libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), "prctl(CHILD_SUBREAPER)")
    gc.disable()  # no cycles are made here; a collection would touch (copy) forked pages
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    children: dict[int, tuple[int, socket.socket | None]] = {}  # pidfd -> (pid, reply)
    replies: dict[int, int] = {}  # reply socket fd -> the holder's pidfd
    while True:
        ended = False
        for ready, _ in poll.poll():
            if ready in replies:  # the SDK closed it (it never writes): stop that holder
                pidfd = replies.pop(ready)
                poll.unregister(ready)
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                pid, reply = children[pidfd]
                if reply is not None:
                    reply.close()
                children[pidfd] = (pid, None)
            elif ready in children:
                pid, reply = children.pop(ready)
                poll.unregister(ready)
                os.close(ready)
                _, status = os.waitpid(pid, 0)
                if reply is not None:
                    replies.pop(reply.fileno(), None)
                    poll.unregister(reply)
                    with contextlib.suppress(OSError):
                        send_message(reply, {"id": 0, "status": status})
                    reply.close()
                ended = True
            elif ready == sock.fileno():
                data, fds = receive_message(sock)
                if not data:
                    return
                _start(_request_of(data, fds), fds, sock, poll, children, replies)
                for passed in fds:
                    os.close(passed)
        if ended:  # once per wake-up, not per end: hundreds of sandboxes close at once
            _sweep_orphans({known for known, _ in children.values()})


def _sweep_orphans(known: set[int]) -> None:
    """Kill and reap every child of ours that is no holder or zygote we started: processes
    orphaned below them (we are their subreaper), such as a sandbox's first process whose
    bwrap was killed before it could set its parent-death signal."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children") as f:
            orphans = {int(pid) for pid in f.read().split()} - known
    except OSError:
        return
    for pid in orphans:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)


def _request_of(data: bytes, fds: list[int]) -> dict[str, Any]:
    """A request's JSON object ({} when it is none); see `parse_message`."""
    try:
        return dict(parse_message(data, fds))
    except (OSError, ValueError, TypeError):
        return {}


def _start(req: dict[str, Any], fds: list[int], sock: socket.socket, poll: select.poll,
           children: dict[int, tuple[int, socket.socket | None]],
           replies: dict[int, int]) -> None:
    """Fork the holder or zygote ``req`` asks for and track it (see `serve`)."""
    if not req or not fds:
        return  # its socket closes unanswered: that says it
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:
        sock.close()
        for pidfd, (_, other) in children.items():
            os.close(pidfd)
            if other is not None:
                other.close()
        if req.get("holder"):
            _holder(req["holder"], fds[1:])
        _zygote(req, fds)
    pidfd = os.pidfd_open(pid)
    reply = None
    if req.get("holder"):
        reply = socket.socket(fileno=os.dup(fds[0]))
        try:
            send_message(reply, {"id": 0, "pid": pid}, [pidfd])
            replies[reply.fileno()] = pidfd
            poll.register(reply, select.POLLIN)
        except OSError:  # the SDK gave it up already: stop it now, then reap it
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            reply.close()
            reply = None
    children[pidfd] = (pid, reply)
    poll.register(pidfd, select.POLLIN)

if __name__ == "__main__":
    serve(int(sys.argv[1]))
