"""Collect what dead sandbox owners left behind: containers, networks and volumes, the
state directories and cgroups of process sandboxes, and Kubernetes sandboxes' Pods and
NetworkPolicies in every namespace a sandbox of this host recorded (`sandbox._places`).

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

from datetime import UTC, datetime, timedelta
from typing import Literal

import attrs

from ._errors import ConfigError
from ._owner import GcItem, Here, owner_labels
from ._registry import EngineClient, gc_collectors

__all__ = ["GcItem", "GcReport", "gc", "owner_labels"]  # the first and last for old imports


class _Kind:
    """A read-only view of a report's removed or kept items of one kind."""

    def __init__(self, which: Literal["removed", "kept"], kind: str) -> None:
        self.which, self.kind = which, kind

    def __get__(self, report: GcReport | None, owner: type) -> tuple[GcItem, ...]:
        assert report is not None, "a view of a report, not of its class"
        items = report.removed if self.which == "removed" else report.kept
        return tuple(item for item in items if item.kind == self.kind)


def _kinds(kind: str) -> tuple[_Kind, _Kind]:
    """The removed and the kept view of one kind."""
    return _Kind("removed", kind), _Kind("kept", kind)


@attrs.frozen(kw_only=True)
class GcReport:
    """What gc removed (or, with ``dry_run``, would remove) and what it kept, whatever the
    backend: each `GcItem` says its kind ("container", "network", "volume", "checkpoint",
    "process", "rootfs", "session"); ``removed_containers`` and the like select one kind.

    Attributes:
        dry_run: Nothing was removed; ``removed`` lists what would have been.
        removed: Resources removed because their owner is gone (checkpoints: for their
            age, or, a fork's, because their maker is gone).
        kept: Resources left alone, each with the reason.
        failed: Resources that should have gone but the engine refused; reason says why.
    """

    dry_run: bool = False
    removed: tuple[GcItem, ...] = ()
    kept: tuple[GcItem, ...] = ()
    failed: tuple[GcItem, ...] = ()

    def removed_of(self, kind: str) -> tuple[GcItem, ...]:
        """The removed resources of one kind."""
        return tuple(item for item in self.removed if item.kind == kind)

    def kept_of(self, kind: str) -> tuple[GcItem, ...]:
        """The kept resources of one kind."""
        return tuple(item for item in self.kept if item.kind == kind)

    #: Containers (or Pods), networks (or NetworkPolicies), volumes, checkpoint images and
    #: process sandboxes' leftovers (state directory, cgroup), removed or kept.
    removed_containers, kept_containers = _kinds("container")
    removed_networks, kept_networks = _kinds("network")
    removed_volumes, kept_volumes = _kinds("volume")
    removed_checkpoints, kept_checkpoints = _kinds("checkpoint")
    removed_process, kept_process = _kinds("process")
    #: Entries of the process backend's rootfs cache whose image the engine no longer has
    #: (removed), or left alone (their image exists, or one is mounted).
    removed_rootfs, kept_rootfs = _kinds("rootfs")
    #: SDK processes' session FIFO directories (`sandbox._session_fifo`).
    removed_sessions, kept_sessions = _kinds("session")


async def gc(
    *, dry_run: bool = False, older_than: timedelta | None = None,
    checkpoints_older_than: timedelta | None = None, docker: EngineClient | None = None,
) -> GcReport:
    """Remove sandbox containers, networks and volumes whose owner process is gone, and the
    Pods and NetworkPolicies of Kubernetes sandboxes in the namespaces this host's sandboxes
    recorded (one that does not answer is skipped with a warning on ``sandbox.gc``).

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
    if older_than is not None and older_than < timedelta(0):
        raise ConfigError(f"older_than must be >= 0, got {older_than}")
    if checkpoints_older_than is not None and checkpoints_older_than < timedelta(0):
        raise ConfigError(f"checkpoints_older_than must be >= 0, got {checkpoints_older_than}")
    here, now = Here.current(), datetime.now(UTC)
    removed: list[GcItem] = []
    kept: list[GcItem] = []
    failed: list[GcItem] = []
    # Each backend that leaves resources on this host collects its own, by the same rule; then
    # each backend whose sandboxes recorded places off this host (a cluster) looks there.
    for collect in gc_collectors():
        found = await collect(dry_run=dry_run, older_than=older_than,
                              checkpoints_older_than=checkpoints_older_than, here=here,
                              now=now, docker=docker)
        removed += found.removed
        kept += found.kept
        failed += found.failed
    return GcReport(dry_run=dry_run, removed=tuple(removed), kept=tuple(kept),
                    failed=tuple(failed))
