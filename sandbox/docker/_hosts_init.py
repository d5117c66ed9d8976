"""/etc/hosts of a checkpoint's child written by its own keepalive, seen through an attach.

A sandbox in a bare network namespace (`_netless`) needs Docker's /etc/hosts for ``none``
written over the init layer's empty one. A child of a checkpoint this process committed from a
sandbox alike (`_workdir.settle_by_commit`: a fork's ten children) makes no exec after start of
its own (its working dir is settled, the user probe is the first child's), so its hosts used to
cost it one root exec (`write_hosts_by_exec`): ten at once, on 2 cores, the largest part of a
fork's engine CPU after the starts (runc exec, a ``runc init`` in the container, the daemons'
exec calls).

Here the container's main process does it: the keepalive shell, root without capabilities
like the exec's (the same image's shell, with the container's privileges and no more), runs
the same script (`_netless.WRITE_SH`: a new file renamed over /etc/hosts, never written
through a symlink a hostile checkpoint left, tools from the system's directories only) in a
subshell before its loop, and prints a marker holding a random token of this create. The SDK
attaches to its stdout before start and reads the marker before the create returns, so no
command of the caller's runs before the write; any other answer, an end of the stream or no
answer within `MARKER_TIMEOUT`, and the engine's archive PUT writes the file instead (as the
exec's failure did). Nothing read is trusted beyond that comparison, and at most
`MAX_MARKER_BYTES` are read: what comes back from the sandbox is hostile input.

The keepalive keeps this command line for good (no ``exec``): the host's views of the
container compare docker-init's argument list with its child's (`_host_health`, `_hostview`).
"""

from __future__ import annotations

import contextlib
import posixpath
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from ._gateway import Engine, ExecStream
from ._netless import HOSTS, WRITE_SH, write_hosts
from ._workdir import settled

__all__ = ["MARKER_TIMEOUT", "InitHosts"]

#: How long the keepalive has to write /etc/hosts before the archive PUT does it instead.
MARKER_TIMEOUT = 10.0
#: The most read from the keepalive's stdout while waiting for the marker.
MAX_MARKER_BYTES = 4096


class InitHosts:
    """One create's hosts written by its keepalive: `command` for the create body (`child`
    puts it there), `start` for the container's start."""

    def __init__(self, keepalive: tuple[str, ...]) -> None:
        self._token = secrets.token_hex(8)
        shell, flag, loop = keepalive
        # $1 the hosts, $2 the temporary name's suffix (`WRITE_SH`'s arguments); the
        # subshell's exit (a failed write) never ends the keepalive. The keepalive's PATH pin
        # (`_keepalive.KEEPALIVE`: its first statement) comes first here too, before ``printf``
        # (a builtin of most shells, not of all): a PATH entry the sandbox user could write
        # (a conda prefix) must not put its program in this root process.
        pin, _, rest = loop.partition("; ")
        if not pin.startswith("PATH="):
            raise ValueError(f"the keepalive does not start by pinning PATH: {loop!r}")
        script = (f"{pin}; if ( {WRITE_SH.strip()}\n) >/dev/null 2>&1; then r=ok; "
                  f"else r=failed; fi; printf 'sandbox-hosts %s %s\\n' \"$r\" \"$2\"; "
                  f"exec >/dev/null 2>&1; {rest}")
        self.command: tuple[str, ...] = (shell, flag, script, "sandbox-init", HOSTS.decode(),
                                         self._token)
        self._stream: ExecStream | None = None

    @classmethod
    def child(cls, body: MutableMapping[str, Any], *, netless: bool, image_id: str, user: str,
              cwd: str, mounts: str | None) -> InitHosts | None:
        """For a bare-namespace create of a checkpoint settled for this user, working dir and
        mounts (`_workdir.settled`): one whose keepalive, now ``body``'s command, writes
        /etc/hosts (else None). The keepalive is root (without capabilities) as every
        container's main process is: the backend creates each with ``User`` "0:0", whatever
        user the checkpoint's commit made its own (that one is the commands')."""
        if not netless or not settled(image_id, user, posixpath.normpath(cwd or "/"),
                                      mounts or ""):
            return None
        made = cls(tuple(body["Cmd"]))
        body["Cmd"] = list(made.command)
        return made

    async def attach(self, engine: Engine, container_id: str) -> None:
        """Attach to the created container's stdout (before start, so nothing is missed)."""
        self._stream = await engine.attach_output("attach to the sandbox's keepalive",
                                                  container_id)

    async def _marker(self) -> bool:
        """Whether the keepalive said it wrote /etc/hosts (within `MARKER_TIMEOUT`)."""
        stream = self._stream
        if stream is None:
            return False
        want = f"sandbox-hosts ok {self._token}\n".encode()
        seen = b""
        with anyio.move_on_after(MARKER_TIMEOUT):
            while len(seen) < MAX_MARKER_BYTES and b"\n" not in seen:
                frame = await stream.read_out("read the sandbox keepalive's word")
                if frame is None:
                    break
                seen += frame[1][:MAX_MARKER_BYTES]
        return seen.partition(b"\n")[0] + b"\n" == want

    async def start(self, engine: Engine, container_id: str,
                    start: Callable[[], Awaitable[object]]) -> None:
        """Attach, ``start()`` the container and return once /etc/hosts is written: by the
        keepalive (its marker read), else by the archive PUT."""
        try:
            with contextlib.suppress(Exception):  # no attach: the PUT writes it
                await self.attach(engine, container_id)
            await start()
            try:
                done = await self._marker()
            except Exception:  # the engine's, aiodocker's or aiohttp's: the PUT then
                done = False
        finally:
            self.close()
        if not done:
            await write_hosts(engine, container_id)

    def close(self) -> None:
        """Drop the attach (idempotent; the container runs on)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close_now()
