"""The zygote's report of a command started by posix_spawn: by the time it is sent, the
zygote holds none of the command's descriptors any more. The SDK reads the output pipes
when the end comes with the pid; a write end still open in the zygote then would hide their
end of file, and the SDK would watch them on the loop instead (two more wake-ups)."""

from __future__ import annotations

import os
import socket
from typing import Any

from sandbox.process._forkserver import _Zygote


def write_ends() -> set[str]:
    """What every descriptor of ours open for writing only refers to (a pipe's write end)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            with open(f"/proc/self/fdinfo/{fd}") as f:
                flags = int(f.read().split("flags:")[1].split()[0], 8)
            if flags & 0o3 == os.O_WRONLY:
                found.add(os.readlink(f"/proc/self/fd/{fd}"))
        except (OSError, IndexError):
            pass
    return found


class RecordingSocket:
    """The zygote's socket, noting which of ``watched`` pipes it still holds at each send."""

    def __init__(self, real: socket.socket, watched: set[str]) -> None:
        self.real = real
        self.watched = watched
        self.held_at_send: list[set[str]] = []

    def fileno(self) -> int:
        return self.real.fileno()

    def sendmsg(self, *args: Any) -> int:
        self.held_at_send.append(write_ends() & self.watched)
        return self.real.sendmsg(*args)


def test_the_report_goes_out_after_the_command_s_descriptors_are_closed() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    names = {os.readlink(f"/proc/self/fd/{out_w}"), os.readlink(f"/proc/self/fd/{err_w}")}
    passed = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), out_w, err_w,
              os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)]
    recorder = RecordingSocket(theirs, names)
    zygote = _Zygote(recorder)  # type: ignore[arg-type]
    try:
        zygote.spawn({"id": 1, "argv": ["true"], "env": [f"PATH={os.environ['PATH']}"],
                      "rlimits": [], "tty": False}, passed)
        assert recorder.held_at_send, "no report was sent"
        assert recorder.held_at_send[0] == set()  # the pid report: the pipes' ends closed
        assert passed == []  # closed and forgotten: the serve loop closes none twice
        data = ours.recv(4096)
        assert b'"pid": ' in data
        # Only the command held the write ends: its end is the pipes' end of file.
        assert os.read(out_r, 10) == b""
        assert os.read(err_r, 10) == b""
    finally:
        for pidfd in list(zygote.pidfds):
            _, pid, _ = zygote.pidfds.pop(pidfd)
            os.waitpid(pid, 0)
            os.close(pidfd)
        for fd in [*passed, out_r, err_r]:
            os.close(fd)
        ours.close()
        theirs.close()
        zygote.buffer.close()
