"""Collect what dead sandbox owners left behind: containers, networks and volumes, and the
state directories and cgroups of process sandboxes.

Every resource the SDK creates is labelled with its owner: host name, boot id, pid and the
pid's start time in clock ticks since boot. A normal exit, an exception, a cancellation or
Ctrl-C removes everything; only a process that dies hard (SIGKILL, power loss, an engine that
was down during cleanup) leaves resources behind. ``gc`` finds those by label and removes the
ones whose owner is provably gone:

* the owner ran on this host before the last reboot (another boot id);
* its pid no longer exists, is a zombie, or now belongs to a process that started later.

It never touches a resource whose owner is alive or cannot be checked from here (another
host, missing owner labels), nor anything without the SDK's labels. ``older_than`` narrows the
removal further to resources at least that old.

Checkpoints (``sandbox-checkpoint:<name>`` images) are kept on purpose beyond their maker's
life, so they are removed by age only, and only when ``checkpoints_older_than`` is given; one
a container still uses is kept. The exception is a fork's checkpoint that was to go with its
forks (``fork(keep=False)``, the default): it carries its maker's owner labels (under
``io.sandbox.checkpoint.owner.*``) and is removed, like a container, once that owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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
from ._errors import SandboxError

if TYPE_CHECKING:
    from .docker._gateway import DockerClient, Engine

__all__ = ["GcItem", "GcReport", "gc", "owner_labels"]


def owner_labels() -> dict[str, str]:
    """Labels naming the process that owns a resource, so leaks can be collected later."""
    labels = {
        LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE,
        LABEL_OWNER_HOST: socket.gethostname(),
        LABEL_OWNER_PID: str(os.getpid()),
        LABEL_CREATED: datetime.now(UTC).isoformat(timespec="seconds"),
    }
    with contextlib.suppress(OSError):
        labels[LABEL_OWNER_BOOT_ID] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with contextlib.suppress(OSError, IndexError, ValueError):
        # Field 22 of /proc/self/stat: start time in clock ticks since boot; with the boot id it
        # tells a live owner from a later process that reused the pid.
        stat = Path(f"/proc/{os.getpid()}/stat").read_text()
        labels[LABEL_OWNER_START] = stat.rsplit(")", 1)[1].split()[19]
    return labels


@attrs.frozen(kw_only=True)
class GcItem:
    """One resource gc looked at, and why it was removed or kept.

    Attributes:
        kind: ``"container"``, ``"network"``, ``"volume"``, ``"checkpoint"``, ``"process"``
            (a process sandbox's state directory and cgroup; id is the sandbox id), or
            ``"rootfs"`` (an image exported into the process backend's cache; id is the
            image's id).
        id: The engine's id (a volume's name).
        name: The resource's name.
        reason: Why it was removed or kept, or why removing it failed.
    """

    kind: Literal["container", "network", "volume", "checkpoint", "process", "rootfs"]
    id: str
    name: str
    reason: str


@attrs.frozen(kw_only=True)
class GcReport:
    """What gc removed (or, with ``dry_run``, would remove) and what it kept.

    Attributes:
        dry_run: Nothing was removed; ``removed_*`` lists what would have been.
        removed_containers: Containers removed because their owner is gone.
        kept_containers: Containers left alone, each with the reason.
        removed_networks: Networks removed because their owner is gone.
        kept_networks: Networks left alone, each with the reason.
        removed_volumes: Volumes removed because their owner is gone.
        kept_volumes: Volumes left alone, each with the reason.
        removed_checkpoints: Checkpoint images removed for their age, or (a fork's, to go
            with its forks) because their maker is gone.
        kept_checkpoints: Checkpoint images left alone (younger, in use, or a fork's whose
            maker is alive).
        failed: Resources that should have gone but the engine refused; reason says why.
        removed_process: Process sandboxes' leftovers (state directory, cgroup) removed.
        kept_process: Process sandboxes left alone, each with the reason.
        removed_rootfs: Entries of the process backend's rootfs cache whose image the engine
            no longer has.
        kept_rootfs: Rootfs cache entries left alone (their image exists, or one is mounted).
    """

    dry_run: bool = False
    removed_containers: tuple[GcItem, ...] = ()
    kept_containers: tuple[GcItem, ...] = ()
    removed_networks: tuple[GcItem, ...] = ()
    kept_networks: tuple[GcItem, ...] = ()
    removed_volumes: tuple[GcItem, ...] = ()
    kept_volumes: tuple[GcItem, ...] = ()
    failed: tuple[GcItem, ...] = ()
    removed_checkpoints: tuple[GcItem, ...] = ()
    kept_checkpoints: tuple[GcItem, ...] = ()
    removed_process: tuple[GcItem, ...] = ()
    kept_process: tuple[GcItem, ...] = ()
    removed_rootfs: tuple[GcItem, ...] = ()
    kept_rootfs: tuple[GcItem, ...] = ()

    @property
    def removed(self) -> tuple[GcItem, ...]:
        """Every removed resource: containers, networks, volumes, checkpoints, process
        sandboxes."""
        return self.removed_containers + self.removed_networks + self.removed_volumes + \
            self.removed_checkpoints + self.removed_process + self.removed_rootfs

    @property
    def kept(self) -> tuple[GcItem, ...]:
        """Every kept resource: containers, networks, volumes, checkpoints, process
        sandboxes."""
        return self.kept_containers + self.kept_networks + self.kept_volumes + \
            self.kept_checkpoints + self.kept_process + self.kept_rootfs


@attrs.frozen
class _Here:
    """Identity of the machine gc runs on, to compare owner labels with."""

    host: str
    boot_id: str

    @classmethod
    def current(cls) -> _Here:
        boot = ""
        with contextlib.suppress(OSError):
            boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return cls(socket.gethostname(), boot)


def _pid_start(pid: int) -> tuple[bool, str | None]:
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


def _created(labels: Mapping[str, str], engine_created: datetime | None) -> datetime | None:
    value = labels.get(LABEL_CREATED, "")
    with contextlib.suppress(ValueError):
        parsed = datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return engine_created


def _age_text(age: timedelta) -> str:
    secs = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


def owner_verdict(
    labels: Mapping[str, str], *, here: _Here, created: datetime | None = None,
    older_than: timedelta | None = None, now: datetime | None = None,
) -> tuple[bool, str]:
    """Decide whether a labelled resource's owner is gone: (remove it?, reason)."""
    host = labels.get(LABEL_OWNER_HOST, "")
    pid_text = labels.get(LABEL_OWNER_PID, "")
    boot = labels.get(LABEL_OWNER_BOOT_ID, "")
    ticks = labels.get(LABEL_OWNER_START, "")
    when = _created(labels, created)
    age = (now or datetime.now(UTC)) - when if when else None

    def unverifiable(why: str) -> tuple[bool, str]:
        return False, f"{why}, so it cannot be proven gone; remove it by hand if it is"

    def gone(why: str) -> tuple[bool, str]:
        if older_than is None:
            return True, why
        if age is None:
            return False, f"{why}, but its age is unknown (older_than was given)"
        if age < older_than:
            return False, f"{why}, but it is only {_age_text(age)} old (younger than " \
                          f"{_age_text(older_than)})"
        return True, f"{why}, and it is {_age_text(age)} old"

    if not host or not pid_text.isdigit():
        return unverifiable("it has no owner labels to check")
    if host != here.host:
        return unverifiable(f"its owner ran on another host ({host!r})")
    pid = int(pid_text)
    if boot and here.boot_id and boot != here.boot_id:
        return gone(f"its owner (pid {pid}) ran before this host last rebooted")
    alive, start = _pid_start(pid)
    if not alive:
        return gone(f"its owner (pid {pid}) has exited")
    if ticks and start is not None and ticks != start:
        return gone(f"its owner (pid {pid}) has exited; the pid now belongs to a newer process")
    me = " (this process)" if pid == os.getpid() else ""
    return False, f"its owner (pid {pid}){me} is alive"


async def gc(
    *, dry_run: bool = False, older_than: timedelta | None = None,
    checkpoints_older_than: timedelta | None = None, docker: DockerClient | None = None,
) -> GcReport:
    """Remove sandbox containers, networks and volumes whose owner process is gone.

    Example:
        report = await sandbox.gc(dry_run=True)
        for item in report.removed:
            print("would remove", item.kind, item.name, item.reason)

    Args:
        dry_run: Only report what would be removed.
        older_than: Remove only resources at least this old (their owner gone as well).
            Resources of a live owner, or of one that cannot be checked from here (another
            host, no owner labels), are never removed.
        checkpoints_older_than: Also remove checkpoints at least this old (by their creation
            label); None (the default) leaves every checkpoint alone but a fork's whose
            maker is gone (see `Sandbox.fork`). One in use by a container is kept.
        docker: An aiodocker client to use (yours to close); by default one is opened to
            DOCKER_HOST or the default socket and closed before returning.

    Raises:
        EngineUnavailable: No engine answers.
        ConfigError: ``older_than`` or ``checkpoints_older_than`` is negative.
    """
    from ._errors import ConfigError
    from .docker._gateway import Engine, new_client
    from .docker._gc import list_managed, remove

    if older_than is not None and older_than < timedelta(0):
        raise ConfigError(f"older_than must be >= 0, got {older_than}")
    if checkpoints_older_than is not None and checkpoints_older_than < timedelta(0):
        raise ConfigError(f"checkpoints_older_than must be >= 0, got {checkpoints_older_than}")
    from .process._gc import collect

    gone_process, kept_process, failed_process = collect(
        dry_run=dry_run, older_than=older_than, here=_Here.current(), now=datetime.now(UTC))
    client = docker if docker is not None else new_client()
    try:
        engine = Engine(client)
        here = _Here.current()
        now = datetime.now(UTC)
        removed: dict[str, list[GcItem]] = {"container": [], "network": [], "volume": []}
        kept: dict[str, list[GcItem]] = {"container": [], "network": [], "volume": []}
        failed: list[GcItem] = []
        for res in await list_managed(engine):
            gone, reason = owner_verdict(res.labels, here=here, created=res.created,
                                         older_than=older_than, now=now)
            item = GcItem(kind=res.kind, id=res.id, name=res.name, reason=reason)
            if not gone:
                kept[res.kind].append(item)
                continue
            if not dry_run:
                try:
                    await remove(engine, res)
                except SandboxError as exc:
                    failed.append(attrs.evolve(item, reason=f"{reason}, but removing it "
                                                            f"failed: {exc}"))
                    continue
            removed[res.kind].append(item)
        old_checkpoints = await _collect_checkpoints(
            engine, checkpoints_older_than, now=now, dry_run=dry_run, failed=failed,
            here=here, older_than=older_than)
        rootfs = await _collect_rootfs(engine, dry_run=dry_run, failed=failed)
    finally:
        if docker is None:
            await client.close()
    return GcReport(
        dry_run=dry_run,
        removed_containers=tuple(removed["container"]),
        kept_containers=tuple(kept["container"]),
        removed_networks=tuple(removed["network"]),
        kept_networks=tuple(kept["network"]),
        removed_volumes=tuple(removed["volume"]),
        kept_volumes=tuple(kept["volume"]),
        failed=tuple(failed) + tuple(failed_process),
        removed_checkpoints=tuple(old_checkpoints[0]),
        kept_checkpoints=tuple(old_checkpoints[1]),
        removed_process=tuple(gone_process),
        kept_process=tuple(kept_process),
        removed_rootfs=tuple(rootfs[0]),
        kept_rootfs=tuple(rootfs[1]),
    )


async def _collect_rootfs(engine: Any, *, dry_run: bool,
                          failed: list[GcItem]) -> tuple[list[GcItem], list[GcItem]]:
    """Prune the process backend's rootfs cache of images the engine no longer has."""
    import anyio

    from .process._rootfs import cache_dir
    from .process._rootfs_cache import prune_missing

    images = await engine.query_json("list images", "images/json", params={"all": "1"})
    present = {str(image.get("Id", "")) for image in images}
    removed, kept, gone = await anyio.to_thread.run_sync(
        lambda: prune_missing(cache_dir(), present, dry_run=dry_run))

    def items(found: list[Any]) -> list[GcItem]:
        return [GcItem(kind="rootfs", id=e.image_id, name=str(e.path), reason=why)
                for e, why in found]

    failed += items(gone)
    return items(removed), items(kept)


async def _collect_checkpoints(
    engine: Engine, by_age: timedelta | None, *, now: datetime, dry_run: bool,
    failed: list[GcItem], here: _Here, older_than: timedelta | None,
) -> tuple[list[GcItem], list[GcItem]]:
    """Remove the fork checkpoints whose maker is gone, and (``by_age`` given) the
    checkpoints at least that old: (removed, kept); failures to ``failed``."""
    from ._checkpoint import fork_owner, parse_checkpoint
    from .docker._checkpoint import list_checkpoint_images, remove_image
    from .docker._gateway import EngineConflict

    removed: list[GcItem] = []
    kept: list[GcItem] = []
    for image in await list_checkpoint_images(engine):
        point = parse_checkpoint(image)
        if point is None:
            continue  # labelled, but not a checkpoint the SDK can vouch for: never touched
        item = GcItem(kind="checkpoint", id=point.image_id, name=point.name, reason="")
        owner = fork_owner(image.get("Labels") or {})
        if owner:  # a fork's, to go with its forks: judged by its maker, like a container
            gone, reason = owner_verdict(owner, here=here, created=point.created,
                                         older_than=older_than, now=now)
            reason = f"a fork's checkpoint: {reason}"
            if not gone:
                if by_age is not None:  # else no checkpoint is reported, as before
                    kept.append(attrs.evolve(item, reason=reason))
                continue
        elif by_age is None:
            continue
        elif point.created is None:
            kept.append(attrs.evolve(item, reason="its age is unknown"))
            continue
        elif (age := now - point.created) < by_age:
            kept.append(attrs.evolve(item, reason=f"it is only {_age_text(age)} old (younger "
                                                  f"than {_age_text(by_age)})"))
            continue
        else:
            reason = f"it is {_age_text(age)} old"
        if not dry_run:
            try:
                await remove_image(engine, point.image)
            except EngineConflict:
                kept.append(attrs.evolve(item, reason=f"{reason}, but a container uses it"))
                continue
            except SandboxError as exc:
                failed.append(attrs.evolve(item, reason=f"{reason}, but removing it failed: "
                                                        f"{exc}"))
                continue
        removed.append(attrs.evolve(item, reason=reason))
    return removed, kept
