"""Engine side of checkpoints: commit a container to a labelled image, list and remove them."""

from __future__ import annotations

import contextlib
import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import attrs

from .._backend import CheckpointStore
from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE
from .._errors import CheckpointFailed, ResourceLimitExceeded, SandboxError, TimeoutExceeded
from .._hostview import HostInspector
from .._session_fifo import FifoDir
from .._tasks import single_errors
from ._exec_gate import ExecGate
from ._gateway import DockerClient, Engine, EngineConflict, EngineNotFound, engine_over
from ._host import PROC_ROOT, ContainerCgroup, find_container_cgroup, read_stat
from ._hostview import HostView
from ._images import inspect_image
from ._root_env import RootEnv
from ._session_mount import is_fifo_mount
from ._workdir import settle_by_commit

if TYPE_CHECKING:
    from .._lifecycle import Lifecycle
    from ._background import Background

#: Label every checkpoint image carries (see sandbox._checkpoint).
LABEL_CHECKPOINT = "io.sandbox.checkpoint"
#: Copying a big filesystem takes a while; the engine default would cut a 1 GiB commit off.
COMMIT_TIMEOUT = 600.0


async def commit_checkpoint(engine: Engine, container_id: str, image: str,
                            labels: Mapping[str, str], *, user: str,
                            cgroup: ContainerCgroup | None = None,
                            env: Sequence[str] = ()) -> str:
    """Commit the container (paused for the copy) to ``image`` with ``labels``; its id.

    ``user`` becomes the image's user, so a sandbox started from it runs as the same user
    (the container itself runs its main process as root and commands as the user).
    ``env`` ("NAME=value") replaces those variables of the container's in the image's: the
    image's values that the create set empty for root (`RootEnv.committed`).
    ``cgroup``: the container's cgroup where the SDK reaches it; a freeze that wedges there
    is thawed (see `FreezeWatch`). The commit has `COMMIT_TIMEOUT` seconds, after which the
    container is thawed too.

    Raises:
        CheckpointFailed: A checkpoint of that name exists, the engine refused the commit,
            did not finish it in time, or its freeze wedged; the container is thawed.
    """
    if await inspect_image(engine, image) is not None:
        raise CheckpointFailed(
            f"a checkpoint named {image.partition(':')[2]!r} already exists",
            details="choose another name, or remove it first (sandbox.remove_checkpoint)")
    repository, _, tag = image.partition(":")
    deadline = COMMIT_TIMEOUT
    watch = FreezeWatch(cgroup)
    created: Any = None
    late: TimeoutExceeded | None = None
    try:
        # Our own deadline, whatever the engine's connection does (a wedged engine may hold
        # the request open for good).
        with anyio.move_on_after(deadline) as scope:
            async with single_errors(), anyio.create_task_group() as tg:
                tg.start_soon(watch.run, tg.cancel_scope)
                # pause=1: the engine freezes the container for the copy and thaws it after,
                # so the image is one consistent instant; the config is merged over the
                # container's own.
                created = await engine.query_json(
                    f"commit the sandbox to image {image}", "commit", "POST",
                    params={"container": container_id, "repo": repository, "tag": tag,
                            "comment": "sandbox checkpoint", "pause": "1"},
                    data={"Labels": dict(labels), "User": user,
                          **({"Env": list(env)} if env else {})}, deadline=deadline + 5)
                tg.cancel_scope.cancel()
    except EngineNotFound as exc:
        raise CheckpointFailed("the sandbox's container is gone: nothing to checkpoint",
                               details=exc.details, cause=exc) from exc
    except EngineConflict as exc:
        raise CheckpointFailed("the engine refused to checkpoint the sandbox",
                               details=exc.details, cause=exc) from exc
    except TimeoutExceeded as exc:
        late = exc
    if (scope.cancelled_caught or late is not None) and not watch.wedged:
        with anyio.CancelScope(shield=True):
            await thaw(engine, container_id, cgroup)
        raise CheckpointFailed(
            f"the engine did not finish the checkpoint within {deadline:g} s",
            details="the sandbox was thawed and runs on; no checkpoint was taken",
            cause=late)
    if watch.wedged:
        if created is not None:  # copied while thawed: not one instant, so not kept
            with contextlib.suppress(SandboxError):
                await remove_image(engine, str(created["Id"]))
        with anyio.CancelScope(shield=True):
            await thaw(engine, container_id, cgroup)
        raise CheckpointFailed(f"the checkpoint's freeze wedged: {watch.wedged}",
                               details="the sandbox was thawed and runs on; no checkpoint was "
                                       "taken; try again", retryable=True)
    return str(created["Id"])


#: A v1 freezer still FREEZING after this long will not finish: a task cannot be frozen.
WEDGE_FREEZING = 10.0
#: An exec's ``runc init`` seen this long in the frozen container is stuck there.
WEDGE_RUNC_INIT = 2.0
#: After a wedged freeze is thawed, how long the engine may take to finish its commit.
RECOVER_WAIT = 30.0


@attrs.define
class FreezeWatch:
    """Watches the container's freezer during a commit; thaws a freeze that wedged.

    Wedged means: still FREEZING after `WEDGE_FREEZING` s, or an exec's ``runc init`` (a
    ``runc:`` process whose parent is outside the container) caught inside the frozen cgroup
    for `WEDGE_RUNC_INIT` s. That init sleeps there uninterruptibly, its shim blocks and the
    engine's unpause never returns (issue 26, item 9); writing THAWED releases all of it.
    """

    cgroup: ContainerCgroup | None
    wedged: str = ""

    async def run(self, commit: anyio.CancelScope) -> None:
        cg = self.cgroup
        if cg is None:
            return
        since: dict[str, float] = {}
        while True:
            await anyio.sleep(0.25)
            state = await anyio.to_thread.run_sync(cg.state)
            signs = {"freezing"} if state == "FREEZING" else set()
            if state in ("FREEZING", "FROZEN") and \
                    await anyio.to_thread.run_sync(runc_init_inside, cg):
                signs.add("init")
            now = anyio.current_time()
            since = {k: since.get(k, now) for k in signs}
            if now - since.get("freezing", now) >= WEDGE_FREEZING:
                self.wedged = f"the freezer stayed FREEZING for {WEDGE_FREEZING:g} s"
            elif now - since.get("init", now) >= WEDGE_RUNC_INIT:
                self.wedged = "an exec was caught starting inside the frozen container"
            if self.wedged:
                await anyio.to_thread.run_sync(cg.set_frozen, False)
                await anyio.sleep(RECOVER_WAIT)  # the engine should finish by now
                commit.cancel()
                return


def runc_init_inside(cg: ContainerCgroup, proc: Path = PROC_ROOT) -> bool:
    """Whether a ``runc:`` process whose parent is outside the container is in its cgroup.

    A command can name itself so, but its parent is inside (or, for an exec's own process,
    the shim: then this can fail its own sandbox's checkpoint, never wedge anything)."""
    pids = set(cg.pids() or ())
    for pid in pids:
        try:
            st = read_stat(pid, proc)
        except (OSError, ValueError):
            continue
        if st is not None and st.comm.startswith("runc:") and st.ppid not in pids:
            return True
    return False


async def thaw(engine: Engine, container_id: str, cgroup: ContainerCgroup | None) -> None:
    """Thaw the container however the SDK can: its freezer, and the engine's unpause."""
    if cgroup is not None:
        await anyio.to_thread.run_sync(cgroup.set_frozen, False)
    with contextlib.suppress(SandboxError):
        _why, paused = await container_health(engine, container_id)
        if paused:
            await engine.request("unpause the sandbox after a failed checkpoint",
                                 f"containers/{container_id}/unpause", "POST", deadline=10)


@attrs.frozen
class SourceFacts:
    """What the engine says of a container about to be committed: its cgroup where the SDK
    reaches it (root beside the engine), and whether its config declares a volume (the
    image's or its own: the commit copies that config into the checkpoint's; True where it
    could not be read)."""

    cgroup: ContainerCgroup | None
    volumes: bool


async def inspect_source(engine: Engine, container_id: str) -> SourceFacts:
    """One inspect of the container: its `SourceFacts`."""
    try:
        data = await engine.query_json("inspect the sandbox", f"containers/{container_id}/json",
                                       deadline=10)
    except SandboxError:
        return SourceFacts(None, volumes=True)
    data = data or {}
    pid = int((data.get("State") or {}).get("Pid") or 0)
    config = data.get("Config") or {}
    return SourceFacts(find_container_cgroup(pid, container_id),
                       volumes=bool(config.get("Volumes")))


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
#: The most of the engine's change list read: a sandbox user can make it as long as it
#: likes (many files, long paths), and all of it would be held in the SDK's memory.
MAX_CHANGES_BYTES = 8 << 20


async def container_health(engine: Engine, container_id: str, *,
                           on_pid: Callable[[int], object] | None = None) -> tuple[str, bool]:
    """("", False) when the container runs and is not paused, else (why it cannot take
    commands, whether it is paused). ``on_pid`` is given the init's host pid (``State.Pid``)
    of a running container."""
    try:
        data = await engine.query_json("inspect the sandbox", f"containers/{container_id}/json",
                                       deadline=10)
    except EngineNotFound:
        return "the container is gone", False
    state = (data or {}).get("State") or {}
    pid = state.get("Pid")
    if on_pid is not None and state.get("Running") and isinstance(pid, int) and pid > 0:
        on_pid(pid)
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
    body = await engine.request("list the sandbox's changed files",
                                f"containers/{container_id}/changes", deadline=60,
                                max_bytes=MAX_CHANGES_BYTES + 1)
    if len(body) > MAX_CHANGES_BYTES:
        raise ResourceLimitExceeded(
            f"too many changes: the sandbox's change list is over {MAX_CHANGES_BYTES} bytes",
            details="a pool does not reuse it")
    changes = json.loads(body) if body.strip() else []
    found: list[tuple[str, str]] = []
    for change in changes or []:
        if isinstance(change, Mapping) and isinstance(change.get("Path"), str):
            kind = change.get("Kind")
            found.append((_CHANGE_KINDS.get(kind, "?") if isinstance(kind, int) else "?",
                          change["Path"]))
    return found


class PoolPrimitives:
    """`Backend.health`, `filesystem_changes`, `checkpoint` and the pool reset's
    `host_inspector` for `DockerBackend`, which mixes this in (its own module stays within
    the size bound)."""

    _life: Lifecycle
    _background: Background
    _user: str
    #: The container's main command (DockerBackend's), which the host view expects to find.
    keepalive: tuple[str, ...] = ()
    _gate: ExecGate
    #: DockerBackend's: the working dir, whether its create dealt with it before start, and
    #: the create body's `mounts_key` (what `settle_by_commit` notes a checkpoint under).
    _cwd: str
    _workdir_given: bool
    _mounts_key: str | None
    _root_env: RootEnv  # DockerBackend's: the image's variables it kept from root

    def _running(self) -> tuple[Engine, str]:
        raise NotImplementedError  # DockerBackend's

    def session_fifo(self) -> tuple[FifoDir, str] | None:
        raise NotImplementedError  # DockerBackend's

    async def host_inspector(self) -> HostInspector | str:
        """The container seen from the host (its cgroup and its init's root), for a pool's
        reset; or why it cannot be seen so (not root, a remote engine, gVisor). Call it on a
        new sandbox: it checks that only the container's own processes run."""
        engine, container_id = self._running()
        data = await engine.query_json("inspect the sandbox", f"containers/{container_id}/json",
                                       deadline=10)
        data = data or {}
        # A mount (an image's VOLUME, a bind, a tmpfs) is outside the engine's change list and
        # the host view's walk (another device): what a user leaves there would reach the next.
        # Not the sessions' FIFO directory: read-only, nothing inside can leave anything there.
        fifo = self.session_fifo()
        mounts = [str(m.get("Destination")) for m in data.get("Mounts") or []
                  if isinstance(m, Mapping) and not is_fifo_mount(m, fifo and fifo[0])]
        volumes = sorted((data.get("Config") or {}).get("Volumes") or {})
        if mounts or volumes:
            return f"it has mounts a reset cannot see into ({', '.join(mounts or volumes)})"
        pid = (data.get("State") or {}).get("Pid")
        found = await anyio.to_thread.run_sync(
            lambda: HostView.find(container_id, pid if isinstance(pid, int) else 0,
                                  self.keepalive))
        return found

    async def health(self) -> str:
        """Whether the container runs now and is not paused: "" if so, else why not.

        Asked of the host where it sees the container (its init's pidfd and its freezer,
        `_host_health`: microseconds), else of the engine (one inspect, milliseconds).
        """
        engine, container_id = self._running()
        host = self._background.host_view()
        seen = host.check() if host is not None else None
        why, paused = seen if seen is not None else \
            await container_health(engine, container_id, on_pid=self._background.offer_init)
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

        The container's `ExecGate` is closed first: execs already asked for are seen started,
        and commands asked for meanwhile wait, so no exec is caught half-started in the
        freeze (that wedged the engine: issue 26, item 9). The sandbox stays RUNNING for
        them; a freeze that wedges anyway is thawed and raised as `CheckpointFailed`.
        """
        engine, container_id = self._running()
        if memory:
            raise memory_refused()
        async with self._gate.closed(engine) as settled:
            if not settled:
                raise CheckpointFailed(
                    "a command of the sandbox did not finish starting: checkpoint not taken",
                    details="the freeze could have caught it half-started, which wedges the "
                            "engine; try again", retryable=True)
            source = await inspect_source(engine, container_id)
            cgroup = source.cgroup
            seen = self._background.pause_events
            self._background.checkpointing = True
            try:
                image_id = await commit_checkpoint(engine, container_id, image, labels,
                                                   user=self._user, cgroup=cgroup,
                                                   env=self._root_env.committed())
                # The engine froze and thawed the container; wait until the event watcher
                # has seen both, or it would mark the sandbox paused after we return.
                with anyio.move_on_after(SETTLE_TIMEOUT):
                    while self._background.pause_events < seen + 2:  # noqa: ASYNC110
                        await anyio.sleep(0.005)
            except anyio.get_cancelled_exc_class():
                # The engine goes on with its commit: keep execs out until it has thawed the
                # container (or thaw it), else one could start into its freeze.
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(RECOVER_WAIT):
                        while self._background.pause_events < seen + 2:  # noqa: ASYNC110
                            await anyio.sleep(0.01)
                    if self._background.pause_events < seen + 2:
                        await thaw(engine, container_id, cgroup)
                raise
            finally:
                self._background.checkpointing = False
        if self._workdir_given and not source.volumes:
            # Its create dealt with the working dir: a sandbox alike made from the checkpoint
            # (a fork's children) need not look at it (`settle_by_commit`). A volume's
            # contents are not in the commit, so none may be declared (the container's config,
            # which no code inside can change, is what the commit copies).
            settle_by_commit(image_id, self._user, posixpath.normpath(self._cwd or "/"),
                             self._mounts_key or "")
        return image_id


# -- the checkpoint store: what `sandbox.checkpoints`, `remove_checkpoint` and a fork's
# release ask of the engine --------------------------------------------------------------------


class DockerCheckpointStore:
    """Checkpoints as images of the Docker engine: the `CheckpointStore` of the registry."""

    async def list_entries(self, docker: DockerClient | None) -> list[Mapping[str, Any]]:
        """The image list entries labelled as checkpoints, over ``docker`` (or a client
        opened and closed here)."""
        async with engine_over(docker) as engine:
            return await list_checkpoint_images(engine)

    async def remove_entry(self, ref: str, docker: DockerClient | None) -> None:
        """Remove the checkpoint image ``ref`` (`remove_checkpoint_image`'s checks)."""
        async with engine_over(docker) as engine:
            await remove_checkpoint_image(engine, ref)

    async def remove_if_same(self, image: str, image_id: str) -> None:
        """Remove ``image`` if it is still the image ``image_id`` (never a namesake made
        since)."""
        async with engine_over() as engine:
            found = await inspect_image(engine, image)
            if found is not None and found.get("Id") == image_id:
                await remove_image(engine, image)


#: What `sandbox._registry.checkpoint_store` loads.
STORE: CheckpointStore = DockerCheckpointStore()
