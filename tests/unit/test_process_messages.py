"""The spawner protocol's messages: a long one travels in a memfd and arrives whole, with the
descriptors passed beside it in order, and nothing of it stays open."""

from __future__ import annotations

import os
import socket

import pytest

from sandbox.process._forkserver import (
    IN_MEMFD,
    INLINE_MAX,
    parse_message,
    receive_message,
    send_message,
)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("size", [10, INLINE_MAX - 100, INLINE_MAX + 1, 600_000])
def test_a_message_of_any_size_arrives_whole_with_its_descriptors(size: int) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    r, w = os.pipe()
    try:
        before = open_fds()
        send_message(ours, {"id": 7, "env": "x" * size}, [w])
        data, fds = receive_message(theirs)
        assert (data[:1] == IN_MEMFD) == (size > INLINE_MAX)
        message = parse_message(data, fds)
        assert message == {"id": 7, "env": "x" * size}
        assert len(fds) == 1  # the memfd was taken off the list; the pipe's end is left
        os.write(fds[0], b"!")
        assert os.read(r, 1) == b"!"
        os.close(fds[0])
        assert open_fds() == before  # no memfd left open on either side
    finally:
        for sock in (ours, theirs):
            sock.close()
        os.close(r)
        os.close(w)


def test_a_memfd_message_without_its_memfd_is_refused() -> None:
    with pytest.raises(ValueError, match="without its memfd"):
        parse_message(IN_MEMFD, [])
