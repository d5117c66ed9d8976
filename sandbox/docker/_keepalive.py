"""The Docker container's main process: a root shell that waits until SIGTERM and never runs a
program from a directory the sandbox user may be able to write.

Every container is created with ``User`` "0:0" (`_plan`, the backend), so this shell
(docker-init's one child) is root, without capabilities. It used to loop on ``sleep 3600``
with the system's directories ahead of the image's PATH: an image with no ``sleep`` there
(one whose tools live in a conda or Nix prefix, say) had its loop look one up in the image's
PATH, where a ``sleep`` the sandbox user planted in a directory it owns ran as root, within the
hour or at once in a checkpoint's child.

Now its PATH is `ROOT_PATH` alone. Where a ``sleep`` is found there (or is the shell's own,
as busybox's applets are), it loops on it as before (measured: sandbox-busybox has
/bin/sleep, a busybox applet its shell runs whatever PATH says; sandbox-python and the plain
Debian image have /bin/sleep and /usr/bin/sleep). Else it runs nothing at all: a forked
copy of itself blocks in the ``read`` builtin on a pipe it holds open for writing too
(``0<>/proc/self/fd/0`` opens its own pipe read-write, so no end of file ever comes),
POSIX shell only (dash and busybox have no ``read -t``). ``wait`` on it ends at SIGTERM
like the ``sleep``'s. Where that ``read`` fails at once (no /proc) the shell exits, ending
the container, rather than spin or look a program up: the create then fails on its first
exec into a stopped container.

Both loops' children are root forks of the keepalive (a ``sleep 3600``, or a shell with the
keepalive's own command line): what the host views count as the container's own
(`_hostview`).
"""

from __future__ import annotations

from typing import Final

from .._constants import ROOT_PATH

__all__ = ["KEEPALIVE", "SLEEP_ARGV"]

#: The command line of the keepalive's ``sleep`` child, as /proc shows it.
SLEEP_ARGV: Final = b"sleep\x003600\x00"

#: The container's main command. Its first statement pins PATH (`_hosts_init` puts its
#: /etc/hosts write after it).
KEEPALIVE: Final = (
    "/bin/sh", "-c",
    f"PATH={ROOT_PATH}; trap 'exit 0' TERM; "
    "if command -v sleep >/dev/null 2>&1; then while :; do sleep 3600 & wait $!; done; fi; "
    "while :; do : | read _ 0<>/proc/self/fd/0 & wait $! || [ $? -gt 128 ] || exit 1; done",
)
