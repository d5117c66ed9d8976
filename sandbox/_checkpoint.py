"""Checkpoints and forks: a sandbox's filesystem kept as a local image, and sandboxes from it.

``await sb.checkpoint("name")`` freezes the sandbox for an instant, copies its filesystem into
a local image ``sandbox-checkpoint:name`` and thaws it; ``Sandbox(checkpoint.config)`` starts a
new sandbox from that filesystem with the same configuration; ``await sb.fork(n)`` does both
for ``n`` sandboxes at once.

What a checkpoint holds: every file of the sandbox's own filesystem. What it does not hold:
memory and processes (nothing that runs is captured: see ``memory`` below), a bind-mounted
repository (``RepositoryConfig.local_path`` stays on the host; a new sandbox mounts it again),
tmpfs mounts (``security.tmpfs_paths``, and the working dir of a read-only root) and volumes.

``memory=True`` asks for the processes too (CRIU, as ``docker checkpoint create`` does); no
backend here offers it yet, so it is refused with `CheckpointFailed`, never silently ignored.
A backend that can do it returns a `Checkpoint` with ``memory=True``.

Checkpoints outlive the process that made them (that is their point), so ``gc`` does not
remove them by owner but by age: ``gc(checkpoints_older_than=...)``. The one a ``fork`` makes
is the exception: it is removed with the last sandbox of the fork (unless ``keep=True``), and
labelled with its maker's owner (under ``io.sandbox.checkpoint.owner.*``) so ``gc`` removes
it once that process is gone, if a crash left it.

What a checkpoint image never holds: the values of ``environment``, nor credentials in the
repository URL or the proxies. Image labels are readable by anyone who can reach the engine
and are copied onto every container made from the image; the variables reach a sandbox
through its commands, not the container's own environment, so the commit does not capture
them either. The labels keep the configuration without them and name what was withheld
(`Checkpoint.withheld`); a `Checkpoint` returned by ``checkpoint()`` (and a fork) keeps the
full configuration in memory, one read back by `checkpoints` needs them supplied again.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import anyio
import attrs

from ._backend import checkpoints_of
from ._constants import (
    LABEL_CREATED,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_PID,
    LABEL_SANDBOX_ID,
)
from ._errors import CheckpointFailed, ConfigError, SandboxError
from ._models import SandboxConfig
from ._owner import OWNER_KEYS, owner_labels
from ._registry import EngineClient, checkpoint_store
from ._tasks import single_errors
from ._wire_time import engine_time

if TYPE_CHECKING:
    from ._backend import Backend

__all__ = ["Checkpoint", "checkpoints", "remove_checkpoint"]


class Source(Protocol):
    """What a checkpoint is taken of: a sandbox's id, config and backend."""

    @property
    def id(self) -> str: ...

    @property
    def config(self) -> SandboxConfig: ...

    @property
    def backend(self) -> Backend: ...


class Child(Protocol):
    """A sandbox a fork starts: started, removed, and told what to do once removed."""

    async def initialize(self) -> None: ...

    async def cleanup(self) -> None: ...

    def after_cleanup(self, hook: Callable[[], Awaitable[None]]) -> None: ...


ChildT = TypeVar("ChildT", bound=Child)

#: The local image repository every checkpoint is a tag of.
CHECKPOINT_REPOSITORY = "sandbox-checkpoint"
#: Label keys on checkpoint images (besides the SDK's ``io.sandbox.managed-by`` and created).
LABEL_CHECKPOINT = "io.sandbox.checkpoint"
LABEL_CHECKPOINT_SOURCE = "io.sandbox.checkpoint.source"
LABEL_CHECKPOINT_CONFIG = "io.sandbox.checkpoint.config"
LABEL_CHECKPOINT_MEMORY = "io.sandbox.checkpoint.memory"
#: A fork's checkpoint is marked so, to tell it from the ones named by hand.
LABEL_CHECKPOINT_FORK = "io.sandbox.checkpoint.fork"
#: What the stored config lacks (a JSON list of field names): values never put in a label.
LABEL_CHECKPOINT_WITHHELD = "io.sandbox.checkpoint.withheld"
#: A fork's checkpoint removed with its forks carries its maker's owner labels under this
#: prefix, for gc; not under the container owner keys, which containers made from the image
#: would inherit (and gc would then take for leaks of that owner).
FORK_OWNER_PREFIX = "io.sandbox.checkpoint.owner."

#: An image tag's grammar: what a checkpoint name may be.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
#: Forks started at once. A fork waits for all its children, so only their total time counts
#: (not each start's, as for ``SandboxPool``'s ``create_concurrency``): ten children of a
#: python sandbox holding 100 MiB, interleaved in one process on the 2-core host (loaded by
#: other jobs), took 3.27 s (median of 6) three at a time, 2.89 s five, 2.56 s ten.
FORK_CONCURRENCY = 10


def check_name(name: object) -> str:
    """Return ``name`` if it can name a checkpoint (an image tag), else raise `ConfigError`."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"invalid checkpoint name {name!r}",
            details="use 1-128 letters, digits, '_', '.' or '-', not starting with '.' or '-'")
    return name


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A sandbox's filesystem, kept as a local image.

    Start a sandbox from it with ``Sandbox(checkpoint.config)``.

    Attributes:
        name: The checkpoint's name (the image tag).
        image: The image reference, ``sandbox-checkpoint:<name>``.
        image_id: The engine's id of the image.
        source_id: The id of the sandbox it was taken from.
        created: When it was taken.
        size: The image's size in bytes as the engine reports it (0 if unknown).
        memory: Whether memory and processes were captured too (never, so far).
        source_config: The configuration of the sandbox it was taken from; None when the
            engine's copy of it could not be read back.
        withheld: What ``source_config`` lacks because it was never written to the image
            (``"environment.NAME"``, ``"repository.url credentials"``, ...): empty for the
            one ``checkpoint()`` returns; supply them again (``attrs.evolve(point.config,
            environment=...)``) for one read back by `checkpoints`.
    """

    name: str
    image: str
    image_id: str = ""
    source_id: str = ""
    created: datetime | None = None
    size: int = 0
    memory: bool = False
    source_config: SandboxConfig | None = None
    withheld: tuple[str, ...] = ()

    @property
    def config(self) -> SandboxConfig:
        """The source's configuration, starting from this checkpoint's image.

        The name is cleared (several sandboxes may start from one checkpoint) and the image is
        never pulled: it exists only on this engine.
        """
        base = self.source_config or SandboxConfig()
        return attrs.evolve(base, image=self.image, pull_policy="never", name="")


def _no_credentials(url: str) -> str:
    """``url`` without credentials: on http(s) no user info at all (a user there is often a
    token), elsewhere no password."""
    with contextlib.suppress(ValueError):
        parts = urlsplit(url)
        user, at, host = parts.netloc.rpartition("@")
        web = parts.scheme.lower() in ("http", "https")
        if at and (web or ":" in user):
            keep = "" if web else user.partition(":")[0] + "@"
            return urlunsplit(parts._replace(netloc=keep + host))
    return url


def shareable(config: SandboxConfig) -> tuple[SandboxConfig, tuple[str, ...]]:
    """The config as an image label may hold it, and the names of what was withheld: no
    environment values, no credentials in the repository URL or the proxies."""
    withheld = [f"environment.{key}" for key in sorted(config.environment)]
    repo = config.repository
    if repo is not None and (url := _no_credentials(repo.url)) != repo.url:
        repo = attrs.evolve(repo, url=url)
        withheld.append("repository.url credentials")
    net = config.network
    proxies = {"http_proxy": net.http_proxy, "https_proxy": net.https_proxy}
    clean = {field: _no_credentials(value) for field, value in proxies.items()}
    withheld += [f"network.{field} credentials" for field in proxies
                 if clean[field] != proxies[field]]
    net = attrs.evolve(net, http_proxy=clean["http_proxy"], https_proxy=clean["https_proxy"])
    return attrs.evolve(config, name="", environment={}, repository=repo,
                        network=net), tuple(withheld)


def checkpoint_labels(sb: Source, name: str, *, memory: bool, fork: bool,
                      owned: bool = False) -> dict[str, str]:
    """The labels a checkpoint image carries.

    The owner labels of the source container (which the engine would copy onto the image, and
    from there onto any container made from it by hand) are blanked: a checkpoint has no owner
    process, and ``gc`` must never take a container started from one by someone else for a
    leak of a dead owner. ``owned`` (a fork's checkpoint removed with its forks) records this
    process under `FORK_OWNER_PREFIX` instead, so ``gc`` can remove it if a crash left it.
    Every key is set, blank when unused: the source may itself run a checkpoint's image,
    whose labels the commit would otherwise carry over.
    """
    from ._json import to_json

    config, withheld = shareable(sb.config)
    mine = owner_labels() if owned else {}
    return {
        LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE,
        LABEL_CREATED: datetime.now(UTC).isoformat(timespec="seconds"),
        **dict.fromkeys(OWNER_KEYS, ""), LABEL_SANDBOX_ID: "",
        LABEL_CHECKPOINT: name,
        LABEL_CHECKPOINT_SOURCE: sb.id,
        LABEL_CHECKPOINT_CONFIG: to_json(config),
        LABEL_CHECKPOINT_WITHHELD: json.dumps(withheld),
        LABEL_CHECKPOINT_MEMORY: "true" if memory else "false",
        LABEL_CHECKPOINT_FORK: "true" if fork else "",
        **{fork_owner_key(key): mine.get(key, "") for key in OWNER_KEYS},
    }


def fork_owner_key(key: str) -> str:
    """The checkpoint label that holds the owner label ``key`` of a fork's maker."""
    return FORK_OWNER_PREFIX + key.removeprefix("io.sandbox.owner.")


def fork_owner(labels: Mapping[str, str]) -> dict[str, str]:
    """The owner labels of a fork's checkpoint removed with its forks ({} for any other)."""
    if labels.get(LABEL_CHECKPOINT_FORK) != "true":
        return {}
    found = {key: str(labels.get(fork_owner_key(key)) or "") for key in OWNER_KEYS}
    return found if found[LABEL_OWNER_PID] else {}


async def create_checkpoint(sb: Source, name: str, *, memory: bool = False,
                            fork: bool = False, owned: bool = False) -> Checkpoint:
    """Checkpoint ``sb`` (what `Sandbox.checkpoint` does)."""
    check_name(name)
    if memory:
        raise CheckpointFailed(
            "memory checkpoints are not supported: only the filesystem can be captured",
            details="CRIU (which `docker checkpoint create` needs) fails on this kind of host "
                    "(Debian's CRIU 3.17: 'Unexpected rt vDSO area bounds'); call "
                    "checkpoint(name) for a filesystem checkpoint")
    image = f"{CHECKPOINT_REPOSITORY}:{name}"
    labels = checkpoint_labels(sb, name, memory=memory, fork=fork, owned=owned)
    image_id = await checkpoints_of(sb.backend).checkpoint(image, labels, memory=memory)
    return Checkpoint(name=name, image=image, image_id=image_id, source_id=sb.id,
                      created=datetime.fromisoformat(labels[LABEL_CREATED]), memory=memory,
                      source_config=attrs.evolve(sb.config, name=""))


class _ForkImage:
    """A fork's checkpoint image and how many of its sandboxes live in this process: the
    last one's cleanup removes it (a container someone else made from it keeps it, for gc)."""

    def __init__(self, image: str, image_id: str) -> None:
        self.image, self.image_id = image, image_id
        self.users = 0
        self.removed = False

    def adopt(self, child: Child) -> None:
        self.users += 1
        child.after_cleanup(self._release)

    async def _release(self) -> None:
        self.users -= 1
        if self.users == 0:
            await self.remove()

    async def remove(self) -> None:
        """Remove the image if it is still the one made (never a namesake made since)."""
        if self.removed:
            return
        self.removed = True
        await checkpoint_store().remove_if_same(self.image, self.image_id)


async def fork(sb: Source, n: int, make: Callable[[SandboxConfig], ChildT], *, name: str = "",
               keep: bool = False) -> list[ChildT]:
    """Checkpoint ``sb`` and start ``n`` sandboxes from it, each ``make(config)`` (what
    `Sandbox.fork` does).

    All or nothing: if one fails to start (or the caller is cancelled), those already started
    are removed before the error goes on, and the checkpoint with them unless ``keep``.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"fork: n must be a positive integer, got {n!r}")
    name = check_name(name) if name else f"{sb.id}-fork-{uuid.uuid4().hex[:8]}"
    point = await create_checkpoint(sb, name, fork=True, owned=not keep)
    shared = None if keep else _ForkImage(point.image, point.image_id)
    children: list[ChildT] = []
    limiter = anyio.CapacityLimiter(FORK_CONCURRENCY)

    async def start() -> None:
        async with limiter:
            child = make(point.config)
            await child.initialize()
            children.append(child)  # after initialize: a failed one removed itself
            if shared is not None:
                shared.adopt(child)

    try:
        # All at once up to the knee. (Starting the first alone, so that the others reuse
        # what it learns about the new image, was measured slower: one child's whole start
        # serialized costs more than the first wave's duplicate looks.) One failure cancels
        # the rest and is raised as itself (SandboxInitFailed...), not as a group.
        async with single_errors(), anyio.create_task_group() as tg:
            for _ in range(n):
                tg.start_soon(start)
    except BaseException:
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for child in children:
                    tg.start_soon(_quiet_cleanup, child)
            if shared is not None and shared.users == 0:
                await _quietly(shared.remove)
        raise
    return children


async def _quietly(action: Callable[[], Awaitable[None]]) -> None:
    # The error that made us clean up is the news; what is left is gc's (owner labels).
    with contextlib.suppress(SandboxError):
        await action()


async def _quiet_cleanup(sb: Child) -> None:
    await _quietly(sb.cleanup)


def parse_checkpoint(image: Mapping[str, Any]) -> Checkpoint | None:
    """A `Checkpoint` from the engine's image list entry, or None if it is not a valid one.

    Labels come back from the engine and may have been set by anyone who can build images;
    a name that is not a checkpoint name, or a config that does not parse, is not trusted.
    """
    from ._json import from_json

    labels = image.get("Labels") or {}
    if not isinstance(labels, Mapping) or labels.get(LABEL_MANAGED_BY) != LABEL_MANAGED_BY_VALUE:
        return None
    name = labels.get(LABEL_CHECKPOINT)
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return None
    config: SandboxConfig | None = None
    with contextlib.suppress(SandboxError, ValueError, TypeError):
        config = from_json(str(labels.get(LABEL_CHECKPOINT_CONFIG) or ""), SandboxConfig)
    created: datetime | None = None
    with contextlib.suppress(ValueError, TypeError):
        created = datetime.fromisoformat(str(labels.get(LABEL_CREATED)))
        created = created if created.tzinfo else created.replace(tzinfo=UTC)
    withheld: tuple[str, ...] = ()
    with contextlib.suppress(ValueError, TypeError):
        names = json.loads(str(labels.get(LABEL_CHECKPOINT_WITHHELD) or "[]"))
        withheld = tuple(str(n) for n in names) if isinstance(names, list) else ()
    size = image.get("Size")
    tag = f"{CHECKPOINT_REPOSITORY}:{name}"
    tags = image.get("RepoTags") or []
    return Checkpoint(
        name=name, image=tag if tag in tags else str(image.get("Id") or ""),
        image_id=str(image.get("Id") or ""),
        source_id=str(labels.get(LABEL_CHECKPOINT_SOURCE) or ""),
        created=created or engine_time(image.get("Created")),
        size=size if isinstance(size, int) and not isinstance(size, bool) else 0,
        memory=labels.get(LABEL_CHECKPOINT_MEMORY) == "true", source_config=config,
        withheld=withheld)


async def checkpoints(*, docker: EngineClient | None = None) -> list[Checkpoint]:
    """Every checkpoint on the engine, oldest first.

    Args:
        docker: An aiodocker client to use (yours to close); by default one is opened and
            closed before returning.
    """
    images = await checkpoint_store().list_entries(docker)
    found = [c for c in map(parse_checkpoint, images) if c is not None]
    return sorted(found, key=lambda c: (c.created or datetime.min.replace(tzinfo=UTC), c.name))


async def remove_checkpoint(name: str, *, docker: EngineClient | None = None) -> None:
    """Remove the checkpoint ``name``.

    Raises:
        CheckpointFailed: There is no such checkpoint, or a container still uses it.
    """
    check_name(name)
    await checkpoint_store().remove_entry(f"{CHECKPOINT_REPOSITORY}:{name}", docker)
