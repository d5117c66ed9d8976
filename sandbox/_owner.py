"""Who owns a resource the SDK made, and whether that owner is provably gone.

Every resource a backend creates (a container, network or volume, a Pod, a process
sandbox's state directory, a fork's checkpoint) carries its owner's labels: host name, boot
id, pid and the pid's start time in clock ticks since boot (`owner_labels`). `owner_verdict`
tells from them whether the owner is gone, the rule every backend's gc applies; `GcItem` is
what a gc reports of one resource.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs

from ._constants import (
    LABEL_CREATED,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_BOOT_ID,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
)

__all__ = ["OWNER_KEYS", "Collected", "GcItem", "Here", "HostCollector", "age_text",
           "created_at", "owner_labels", "owner_pid", "owner_verdict", "seconds_text"]

#: The labels that name a resource's owner process (host, pid, its start time, the boot).
OWNER_KEYS = (LABEL_OWNER_HOST, LABEL_OWNER_PID, LABEL_OWNER_START, LABEL_OWNER_BOOT_ID)


def owner_pid(text: str) -> int | None:
    """The pid an owner label (or annotation) names, None unless it is one: ASCII digits
    only, at most 10 (``str.isdigit`` also takes "²", which `int` refuses, and any number
    of digits, past `int`'s limit). Whoever can label a resource writes this text."""
    ok = isinstance(text, str) and text.isascii() and text.isdigit() and len(text) <= 10
    return int(text) if ok else None


def owner_labels() -> dict[str, str]:
    """Labels naming the process that owns a resource, so leaks can be collected later."""
    labels = {
        LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE,
        LABEL_OWNER_HOST: socket.gethostname(),
        LABEL_OWNER_PID: str(os.getpid()),
        LABEL_CREATED: datetime.now(UTC).isoformat(timespec="seconds"),
    }
    labels.update(_process_marks(os.getpid()))
    return labels


#: Per pid (a forked child is another process): its boot id and start time labels. Neither
#: changes while the process lives; reading them took two /proc reads, 0.2 ms of CPU in front
#: of every create.
_MARKS: dict[int, dict[str, str]] = {}


def _process_marks(pid: int) -> dict[str, str]:
    """The boot id and ``pid``'s start time in clock ticks since boot, as labels (each left
    out where /proc does not say)."""
    marks = _MARKS.get(pid)
    if marks is not None:
        return marks
    marks = {}
    with contextlib.suppress(OSError):
        marks[LABEL_OWNER_BOOT_ID] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.suppress(OSError, IndexError, ValueError):
        # Field 22 of /proc/self/stat: start time in clock ticks since boot; with the boot id it
        # tells a live owner from a later process that reused the pid.
        stat = Path(f"/proc/{pid}/stat").read_text()
        marks[LABEL_OWNER_START] = stat.rsplit(")", 1)[1].split()[19]
    if len(marks) == 2:  # complete: kept (an incomplete read is tried again next time)
        _MARKS.clear()
        _MARKS[pid] = marks
    return marks


@attrs.frozen(kw_only=True)
class GcItem:
    """One resource gc looked at, and why it was removed or kept.

    Attributes:
        kind: ``"container"``, ``"network"``, ``"volume"``, ``"checkpoint"``, ``"process"``
            (a process sandbox's state directory and cgroup; id is the sandbox id),
            ``"rootfs"`` (an image exported into the process backend's cache; id is the
            image's id), or ``"session"`` (an SDK process's session FIFO directory).
        id: The engine's id (a volume's name).
        name: The resource's name.
        reason: Why it was removed or kept, or why removing it failed.
    """

    kind: Literal["container", "network", "volume", "checkpoint", "process", "rootfs",
                  "session"]
    id: str
    name: str
    reason: str


@attrs.frozen
class Here:
    """Identity of the machine gc runs on, to compare owner labels with."""

    host: str
    boot_id: str

    @classmethod
    def current(cls) -> Here:
        boot = ""
        with contextlib.suppress(OSError):
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return cls(socket.gethostname(), boot)


def pid_start(pid: int) -> tuple[bool, str | None]:
    """Return (alive, start ticks or None when unknown) for a pid on this machine."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False, None
    except OSError:
        # No /proc (macOS) or no access to it: ask the kernel whether the pid exists.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False, None
        except PermissionError:
            return True, None
        return True, None
    fields = stat.rsplit(")", 1)[-1].split()
    if not fields or fields[0] in ("Z", "X"):
        return False, None  # a zombie has exited; only its parent has not reaped it yet
    return True, fields[19] if len(fields) > 19 else None


def created_at(labels: Mapping[str, str], engine_created: datetime | None) -> datetime | None:
    value = labels.get(LABEL_CREATED, "")
    with contextlib.suppress(ValueError):
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return engine_created


def age_text(age: timedelta) -> str:
    return seconds_text(int(age.total_seconds()))


def seconds_text(secs: int) -> str:
    """A number of seconds in its largest whole unit: 3d, 5h, 2m or 40s."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def owner_verdict(
    labels: Mapping[str, str], *, here: Here, created: datetime | None = None,
    older_than: timedelta | None = None, now: datetime | None = None,
) -> tuple[bool, str]:
    """Decide whether a labelled resource's owner is gone: (remove it?, reason)."""
    host = labels.get(LABEL_OWNER_HOST, "")
    pid_text = labels.get(LABEL_OWNER_PID, "")
    boot = labels.get(LABEL_OWNER_BOOT_ID, "")
    ticks = labels.get(LABEL_OWNER_START, "")
    when = created_at(labels, created)
    age = (now or datetime.now(UTC)) - when if when else None

    def unverifiable(why: str) -> tuple[bool, str]:
        return False, f"{why}, so it cannot be proven gone; remove it by hand if it is"

    def gone(why: str) -> tuple[bool, str]:
        if older_than is None:
            return True, why
        if age is None:
            return False, f"{why}, but its age is unknown (older_than was given)"
        if age < older_than:
            return False, f"{why}, but it is only {age_text(age)} old (younger than " \
                          f"{age_text(older_than)})"
        return True, f"{why}, and it is {age_text(age)} old"

    pid = owner_pid(pid_text)
    if not host or pid is None:
        return unverifiable("it has no owner labels to check")
    if host != here.host:
        return unverifiable(f"its owner ran on another host ({host!r})")
    if boot and here.boot_id and boot != here.boot_id:
        return gone(f"its owner (pid {pid}) ran before this host last rebooted")
    alive, start = pid_start(pid)
    if not alive:
        return gone(f"its owner (pid {pid}) has exited")
    if ticks and start is not None and ticks != start:
        return gone(f"its owner (pid {pid}) has exited; the pid now belongs to a newer process")
    me = " (this process)" if pid == os.getpid() else ""
    return False, f"its owner (pid {pid}){me} is alive"


@attrs.frozen(kw_only=True)
class Collected:
    """What one backend's gc removed, kept and failed to remove."""

    removed: tuple[GcItem, ...] = ()
    kept: tuple[GcItem, ...] = ()
    failed: tuple[GcItem, ...] = ()


class HostCollector(Protocol):
    """One backend's gc of what dead owners left on this host (`sandbox.gc` runs each)."""

    async def __call__(self, *, dry_run: bool, older_than: timedelta | None,
                       checkpoints_older_than: timedelta | None, here: Here, now: datetime,
                       docker: Any) -> Collected: ...
