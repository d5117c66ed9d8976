"""Engine side of checkpoints: commit a container to a labelled image, list and remove them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import anyio

from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
from .._errors import CheckpointFailed
from .._hostview import HostInspector
from ._gateway import Engine, EngineConflict, EngineNotFound
from ._hostview import HostView
from ._images import inspect_image

if TYPE_CHECKING:
    from .._lifecycle import Lifecycle
    from ._background import Background

#: Label every checkpoint image carries (see sandbox._checkpoint).
LABEL_CHECKPOINT = "io.sandbox.checkpoint"
#: Copying a big filesystem takes a while; the engine default would cut a 1 GiB commit off.
COMMIT_TIMEOUT = 600.0


async def commit_checkpoint(engine: Engine, container_id: str, image: str,
                            labels: Mapping[str, str], *, user: str) -> str:
    """Commit the container (paused for the copy) to ``image`` with ``labels``; its id.

    ``user`` becomes the image's user, so a sandbox started from it runs as the same user
    (the container itself runs its main process as root and commands as the user).

    Raises:
        CheckpointFailed: A checkpoint of that name exists, or the engine refused the commit.
    """
    if await inspect_image(engine, image) is not None:
        raise CheckpointFailed(
            f"a checkpoint named {image.partition(':')[2]!r} already exists",
            details="choose another name, or remove it first (sandbox.remove_checkpoint)")
    repository, _, tag = image.partition(":")
    try:
        # pause=1: the engine freezes the container for the copy and thaws it after, so the
        # image is one consistent instant; the config is merged over the container's own.
        created = await engine.query_json(
            f"commit the sandbox to image {image}", "commit", "POST",
            params={"container": container_id, "repo": repository, "tag": tag,
                    "comment": "sandbox checkpoint", "pause": "1"},
            data={"Labels": dict(labels), "User": user}, deadline=COMMIT_TIMEOUT)
        return str(created["Id"])
    except EngineNotFound as exc:
        raise CheckpointFailed("the sandbox's container is gone: nothing to checkpoint",
                               details=exc.details, cause=exc) from exc
    except EngineConflict as exc:
        raise CheckpointFailed("the engine refused to checkpoint the sandbox",
                               details=exc.details, cause=exc) from exc


async def remove_image(engine: Engine, ref: str) -> None:
    """Remove an image by reference (a tag untags it; the image goes with its last tag).

    Raises:
        EngineConflict: A container uses it.
        EngineNotFound: There is no such image.
    """
    await engine.request(f"remove the checkpoint {ref}", f"images/{ref}", "DELETE")


async def list_checkpoint_images(engine: Engine) -> list[Mapping[str, Any]]:
    """The engine's list entries of the images labelled as SDK checkpoints."""
    filters = json.dumps({"label": [f"{LABEL_MANAGED_BY}={LABEL_MANAGED_BY_VALUE}",
                                    LABEL_CHECKPOINT]})
    images = await engine.query_json("list the checkpoints", "images/json",
                                     params={"filters": filters})
    return [i for i in images or [] if isinstance(i, Mapping)]


async def remove_checkpoint_image(engine: Engine, ref: str) -> None:
    """Remove one checkpoint image by reference (its tag, or its id when untagged).

    Raises:
        CheckpointFailed: It does not exist, or a container still uses it.
    """
    found = await inspect_image(engine, ref)
    labels = ((found or {}).get("Config") or {}).get("Labels") or {}
    if found is None or labels.get(LABEL_MANAGED_BY) != LABEL_MANAGED_BY_VALUE or \
            LABEL_CHECKPOINT not in labels:
        # Never remove an image the SDK did not make, whatever its name.
        raise CheckpointFailed(f"there is no checkpoint {ref!r}",
                               details="see `python -m sandbox checkpoints`")
    try:
        await remove_image(engine, ref)
    except EngineNotFound as exc:
        raise CheckpointFailed(f"there is no checkpoint {ref!r}", details=exc.details,
                               cause=exc) from exc
    except EngineConflict as exc:
        raise CheckpointFailed(
            f"the checkpoint {ref!r} is in use",
            details=f"{exc.details}; remove the sandboxes started from it first",
            cause=exc) from exc


#: How long a checkpoint waits for the event watcher to see the engine's pause and thaw.
SETTLE_TIMEOUT = 5.0
_CHANGE_KINDS = {0: "C", 1: "A", 2: "D"}


async def container_health(engine: Engine, container_id: str) -> tuple[str, bool]:
    """("", False) when the container runs and is not paused, else (why it cannot take
    commands, whether it is paused)."""
    try:
        data = await engine.query_json("inspect the sandbox", f"containers/{container_id}/json",
                                       deadline=10)
    except EngineNotFound:
        return "the container is gone", False
    state = (data or {}).get("State") or {}
    if state.get("Paused"):
        return "the container is paused", True
    if not state.get("Running") or state.get("Restarting"):
        return f"the container is {state.get('Status') or 'not running'}", False
    return "", False


def memory_refused() -> CheckpointFailed:
    """The error for a memory checkpoint: it needs CRIU, which fails on this kind of host."""
    return CheckpointFailed(
        "memory checkpoints are not supported: only the filesystem can be captured",
        details="CRIU (which `docker checkpoint create` needs) fails on this kind of host "
                "(Debian's CRIU 3.17: 'Unexpected rt vDSO area bounds'); call "
                "checkpoint(name) for a filesystem checkpoint")


async def filesystem_changes(engine: Engine, container_id: str) -> list[tuple[str, str]]:
    """(kind, path) for every path of the container's writable layer: kind "A" added,
    "C" changed, "D" deleted. Mounts (tmpfs, volumes, binds) are not part of it."""
    changes = await engine.query_json("list the sandbox's changed files",
                                      f"containers/{container_id}/changes", deadline=60)
    found: list[tuple[str, str]] = []
    for change in changes or []:
        if isinstance(change, Mapping) and isinstance(change.get("Path"), str):
            kind = change.get("Kind")
            found.append((_CHANGE_KINDS.get(kind, "?") if isinstance(kind, int) else "?",
                          change["Path"]))
    return found


class PoolPrimitives:
    """`Backend.health`, `filesystem_changes`, `checkpoint` and the pool reset's
    `host_inspector` for `DockerSandbox`, which mixes this in (its own module stays within
    the size bound)."""

    _life: Lifecycle
    _background: Background
    _user: str
    #: The container's main command (DockerSandbox's), which the host view expects to find.
    keepalive: tuple[str, ...] = ()

    def _running(self) -> tuple[Engine, str]:
        raise NotImplementedError  # DockerSandbox's

    async def host_inspector(self) -> HostInspector | str:
        """The container seen from the host (its cgroup and its init's root), for a pool's
        reset; or why it cannot be seen so (not root, a remote engine, gVisor). Call it on a
        new sandbox: it checks that only the container's own processes run."""
        engine, container_id = self._running()
        data = await engine.query_json("inspect the sandbox", f"containers/{container_id}/json",
                                       deadline=10)
        pid = ((data or {}).get("State") or {}).get("Pid")
        found = await anyio.to_thread.run_sync(
            lambda: HostView.find(container_id, pid if isinstance(pid, int) else 0,
                                  self.keepalive))
        return found

    async def health(self) -> str:
        """Ask the engine whether the container runs now: "" if so, else why not."""
        engine, container_id = self._running()
        why, paused = await container_health(engine, container_id)
        if paused:
            self._background.paused = True  # so removal thaws it first
        return why

    async def filesystem_changes(self) -> list[tuple[str, str]]:
        """The engine's list of paths added ("A"), changed ("C") or deleted ("D")."""
        engine, container_id = self._running()
        return await filesystem_changes(engine, container_id)

    async def checkpoint(self, image: str, labels: Mapping[str, str], *,
                         memory: bool = False) -> str:
        """Commit the filesystem to ``image`` (frozen for the copy); the image's id.

        While it is taken the sandbox reads as PAUSED, so no command or helper of this SDK
        starts an exec into the freeze (an exec starting in a container being paused hangs
        the engine for that container: README, "Known engine hazard").
        """
        engine, container_id = self._running()
        if memory:
            raise memory_refused()
        seen = self._background.pause_events
        self._life.set_paused(True, "a checkpoint is being taken")
        try:
            image_id = await commit_checkpoint(engine, container_id, image, labels,
                                               user=self._user)
            # The engine froze and thawed the container; wait until the event watcher has
            # seen both, or it would mark the sandbox paused after we return.
            with anyio.move_on_after(SETTLE_TIMEOUT):
                while self._background.pause_events < seen + 2:  # noqa: ASYNC110 (callbacks)
                    await anyio.sleep(0.005)
        finally:
            if not self._background.paused:
                self._life.set_paused(False)
        return image_id
