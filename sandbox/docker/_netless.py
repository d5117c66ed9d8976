"""A sandbox without a network in a bare network namespace (``Config.NetworkDisabled``).

With ``HostConfig.NetworkMode: "none"`` the engine builds a libnetwork sandbox for every
container (about half of a busybox create-to-start here: 214 -> 100 ms, 15 interleaved
reps); with ``Config.NetworkDisabled`` runc makes the container a new network namespace of
its own holding only ``lo`` (up, 127.0.0.1), and the engine skips libnetwork. Both isolate
the same: a namespace with nothing but loopback. ``NetworkMode`` stays ``"none"`` in the
body, so every inspect, report and check reads "no network" as before.

What libnetwork did for a ``none`` container, done here so a command sees the same:

- ``/etc/hosts``: Docker's file for ``none`` (localhost and the ip6 names; no hostname line).
  Without it the container reads the empty placeholder the engine's init layer puts over
  the image's own /etc/hosts (whatever the image holds, a symlink too: measured), and
  ``localhost`` does not resolve. A child of a checkpoint this process committed from a
  sandbox alike (a fork's children) has its own keepalive write it, seen done before the
  create returns (`_hosts_init`: no exec at all). Else it rides in the working dir's
  archive PUT before start where there is one. Else, where the create runs a user probe
  after start anyway (or waits for another create's), one root exec writes it beside that
  probe (`write_hosts_by_exec`), before the create returns, so no command of the caller's
  runs before it: an archive PUT makes dockerd re-run itself to unpack (57 ms of engine
  CPU here, against 37 ms for the exec: ten at once, medians of 8 under load). Else (the
  probe's answer kept: no exec after start at all) its own archive PUT before start, which
  is also the fallback of the exec and of the keepalive's write;
- IPv6 off in the namespace (``disable_ipv6`` on all, default and lo): with it on, ``::1``
  would sort before 127.0.0.1 for ``localhost`` and a client trying only the first address
  would miss a server on 127.0.0.1;
- the hostname and ``/etc/hostname`` are the engine's either way.

``/etc/resolv.conf`` stays the init layer's empty file instead of a copy of the host's
nameservers: a name other than localhost fails to resolve either way ("Temporary failure in
name resolution", EAI_AGAIN, both measured), and the host's resolver address is no longer
shown to the sandbox.

Used only where nothing else differs: runc, a writable root (the archive API refuses a
read-only one), and no DNS, extra hosts, sysctls or mount of the sandbox's own at /etc.
Checkpoints, forks and pools create through the same path; a user-requested network
(``NetworkConfig``, egress) is not touched.
"""

from __future__ import annotations

import posixpath
import secrets
import tarfile
import time
from collections.abc import Mapping
from typing import Any

from .._constants import ROOT_PATH
from .._errors import SandboxError, SandboxInitFailed
from ._gateway import Engine
from ._workdir import Runner, entries_tar

__all__ = ["HOSTS", "SYSCTLS", "WRITE_SH", "applies", "disable_network", "hosts_entry",
           "hosts_tar", "write_hosts", "write_hosts_by_exec"]

#: What Docker 20.10 writes to /etc/hosts for a ``NetworkMode: none`` container.
HOSTS = (
    b"127.0.0.1\tlocalhost\n"
    b"::1\tlocalhost ip6-localhost ip6-loopback\n"
    b"fe00::0\tip6-localnet\n"
    b"ff00::0\tip6-mcastprefix\n"
    b"ff02::1\tip6-allnodes\n"
    b"ff02::2\tip6-allrouters\n"
)

#: IPv6 off in the namespace, as libnetwork leaves a ``none`` container's.
SYSCTLS: Mapping[str, str] = {
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
}

#: HostConfig settings that change what libnetwork would have written: with any of them set,
#: the sandbox keeps ``NetworkMode: none`` alone.
_LIBNETWORK_SETTINGS = ("Dns", "DnsSearch", "DnsOptions", "ExtraHosts", "Sysctls", "Links")


def _mount_targets(host: Mapping[str, Any], body: Mapping[str, Any]) -> list[str]:
    targets: list[str] = [str(t) for t in (host.get("Tmpfs") or {})]
    for bind in host.get("Binds") or []:
        parts = str(bind).split(":")
        if len(parts) >= 2:
            targets.append(parts[1])
    targets += [str((m or {}).get("Target") or "") for m in host.get("Mounts") or []]
    targets += [str(t) for t in body.get("Volumes") or {}]
    return targets


def applies(body: Mapping[str, Any], *, runtime: str) -> bool:
    """Whether a create ``body`` of a sandbox without a network can use a bare namespace:
    ``NetworkMode`` is ``"none"``, the runtime is runc, the root is writable, and nothing in
    the body asks libnetwork for files or settings or mounts something of its own at /etc."""
    host: Mapping[str, Any] = body.get("HostConfig") or {}
    if host.get("NetworkMode") != "none" or runtime != "runc" or body.get("NetworkDisabled"):
        return False
    if host.get("ReadonlyRootfs") or host.get("VolumesFrom") or \
            any(host.get(key) for key in _LIBNETWORK_SETTINGS):
        return False
    for target in _mount_targets(host, body):
        path = posixpath.normpath("/" + target.lstrip("/")) if target else "/"
        if path == "/" or path == "/etc" or path.startswith("/etc/"):
            return False
    return True


def disable_network(body: dict[str, Any]) -> None:
    """Turn a body `applies` accepted into one for a bare namespace (``NetworkMode`` stays
    ``"none"``)."""
    body["NetworkDisabled"] = True
    body["HostConfig"] = {**(body.get("HostConfig") or {}), "Sysctls": dict(SYSCTLS)}


def hosts_entry(name: str = "etc/hosts") -> tuple[tarfile.TarInfo, bytes]:
    """The tar entry ``name`` (root's, 0644) holding `HOSTS`, with its contents: for the
    working dir's PUT at / where there is one (`_workdir.give_workdir_before_start`)."""
    info = tarfile.TarInfo(name)
    info.size = len(HOSTS)
    info.mode = 0o644
    info.uid = info.gid = 0
    info.mtime = int(time.time())
    return info, HOSTS


def hosts_tar() -> bytes:
    """A tar of ``hosts`` (`hosts_entry`), to extract into /etc."""
    return entries_tar([hosts_entry("hosts")])


async def write_hosts(engine: Engine, container_id: str) -> None:
    """Write `HOSTS` over the init layer's empty /etc/hosts by the archive API (before or
    after start: the engine replaces whatever entry is there, within the container's root)."""
    try:
        await engine.request(
            "write the sandbox's /etc/hosts", f"containers/{container_id}/archive", "PUT",
            params={"path": "/etc"}, data=hosts_tar(),
            headers={"Content-Type": "application/x-tar"})
    except SandboxError as exc:
        raise SandboxInitFailed("could not write the sandbox's /etc/hosts", details=str(exc),
                                cause=exc) from exc


#: As root in the sandbox, with built-ins, ``rm`` and ``mv`` only, from the system's own
#: directories (a PATH entry the sandbox user could write, such as a conda prefix, must not
#: put its program in a root exec): `HOSTS` (``$1``) into a new file in /etc named with a
#: random suffix (``$2``) that nothing there is expected to hold (``rm`` first: ``set -C``
#: does not stop a FIFO or a symlink to a device), renamed over /etc/hosts, as the archive
#: PUT does: a symlink put there is replaced, never written through, and ``mv -T`` never
#: moves the file into a directory put there. Fails (and the PUT follows) where that leaves
#: no regular file.
WRITE_SH = f"umask 022; PATH={ROOT_PATH}; set -C" + r"""
t="/etc/.sandbox-hosts.$2"; rm -f -- "$t" || exit 1
printf '%s' "$1" > "$t" && [ -f "$t" ] && [ ! -L "$t" ] || { rm -f -- "$t"; exit 1; }
mv -fT -- "$t" /etc/hosts || { rm -f -- "$t"; exit 1; }
[ -f /etc/hosts ] && [ ! -L /etc/hosts ]
"""


async def write_hosts_by_exec(run: Runner, engine: Engine, container_id: str) -> None:
    """After start, before any command of the caller's: write `HOSTS` to /etc/hosts by one
    exec as root (``0:0``), else by the archive PUT (`write_hosts`).

    The exec runs the image's shell, which a checkpoint's code may have replaced; it has the
    container's privileges and no more (no capabilities, as its main process, which is that
    same image's shell as root), the SDK reads nothing from it but its exit status, and the
    helper's deadline bounds it. What it can get wrong is this sandbox's own /etc/hosts,
    which its root could rewrite at any time anyway.
    """
    try:
        done = await run(["/bin/sh", "-c", WRITE_SH, "sandbox-init", HOSTS.decode(),
                          secrets.token_hex(8)],
                         user="0:0", what="write the sandbox's /etc/hosts")
        if done.success:
            return
    except SandboxError:
        pass  # no shell, a stall: the engine writes it instead
    await write_hosts(engine, container_id)
