"""DockerSandbox: one container per sandbox, driven through the Engine API."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import posixpath
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import attrs

from .. import _constants
from .._audit import Auditor
from .._backend import ProcessSpec
from .._constants import (
    DEFAULT_CLEANUP_TIMEOUT,
    GVISOR_CLEANUP_TIMEOUT,
    LABEL_CREATED,
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_BOOT_ID,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
    LABEL_SANDBOX_ID,
)
from .._errors import (
    ConfigError,
    EngineUnavailable,
    ResourceLimitExceeded,
    SandboxAlreadyExists,
    SandboxAlreadyInitialized,
    SandboxError,
    SandboxInitFailed,
    SandboxNotFound,
    SandboxNotRunning,
    SecurityViolation,
    TimeoutExceeded,
)
from .._image_ref import parse_image_ref
from .._models import (
    CommandResult,
    FileInfo,
    ResourceLimits,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SandboxStatus,
    as_config,
)
from .._policy import seconds
from .._protocol import OutputCallback
from . import _files
from ._cgroup import HostCgroup, command_usage
from ._exec import ExecProcess, Finalizer, open_exec
from ._facts import EngineFacts
from ._gateway import DockerClient, Engine, EngineConflict, EngineNotFound, client_like, new_client
from ._health import REMOVED_REASON, watch_container
from ._images import ensure_image
from ._network import SandboxNetwork, published_port
from ._plan import plan_container
from ._stats import PROC_SCRIPT, StatsSampler, parse_proc_counts
from ._wire import engine_time
from ._workdir import give_workdir_after_start, give_workdir_before_start, probe_user
from ._workspace import Workspace

#: The container's main process: waits forever and ends on SIGTERM (docker-init forwards it).
KEEPALIVE = ("/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done")

log = logging.getLogger("sandbox.lifecycle")

PullProgress = Callable[[Mapping[str, Any]], object]


def _owner_labels() -> dict[str, str]:
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




async def _finish_despite_cancel(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` to its end even if the caller is cancelled, then pass the cancellation on.

    Used for removal, and for the container create, whose id must be known before cleanup.

    anyio's shield stops anyio cancellation only; asyncio's ``Task.cancel()`` (and the Ctrl-C
    handler of ``asyncio.run``, which uses it) still lands at the next await, so removal runs
    in a task of its own that the caller's cancellation cannot reach.
    """
    task = asyncio.ensure_future(coro)
    cancelled: asyncio.CancelledError | None = None
    with anyio.CancelScope(shield=True):
        while not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError as exc:
                cancelled = exc
    if cancelled is not None:
        if not task.cancelled() and task.exception() is not None:
            log.warning("%s failed after the caller was cancelled: %s",
                        getattr(coro, "__qualname__", coro), task.exception())
        raise cancelled
    task.result()


def _join_errors(first: str, rest: str) -> str:
    return f"{first}; {rest}" if rest else first


class DockerSandbox:
    """A sandbox backed by one Docker container.

    Use it through :class:`sandbox.Sandbox`, which picks the backend from ``config.type``.
    """

    def __init__(
        self, config: SandboxConfig | None = None, *, docker: DockerClient | None = None,
        on_pull_progress: PullProgress | None = None,
        on_sample: Callable[[ResourceUsage], object] | None = None,
    ) -> None:
        self._config = as_config(config)
        self._docker = docker
        self._owns_docker = docker is None
        self._engine: Engine | None = None
        self._on_pull_progress = on_pull_progress
        self.id = uuid.uuid4().hex[:12]
        self._name = self._config.name or f"sandbox-{self.id}"
        self._container_id: str | None = None
        self._cgroup: HostCgroup | None = None
        self._cgroup_looked_up = False
        self._live: set[ExecProcess] = set()  # commands running now
        self._gvisor = False
        self._created_resources = False
        self._status = SandboxStatus.CREATING
        self._initialized = False
        self._status_reason = ""
        self._exit_code: int | None = None
        self._oom_killed = False
        self._cwd = self._config.working_dir
        self._env: dict[str, str] = dict(self._config.environment)
        self._lock = anyio.Lock()
        # The supervisor of the sandbox's own background work (see _start_background).
        self._background: asyncio.Task[None] | None = None
        self._background_error: BaseException | None = None
        self._facts: EngineFacts | None = None
        self._user = ""
        self._root_opt_in = False
        self._workdir_given = False
        self._image_id = ""
        self._created_at: datetime | None = None
        self._started_at: datetime | None = None
        self._sampler: StatsSampler | None = None
        self._oom_events = 0
        self._oom_seen = anyio.Event()
        self._on_sample = on_sample
        self._paused = False  # as the event watcher last saw it
        self._audit = Auditor(self.id, self._config.security)
        self._workspace = Workspace(None)
        self._network: SandboxNetwork | None = None

    # -- state -----------------------------------------------------------------------------------

    @property
    def status(self) -> SandboxStatus:
        """Where the sandbox is in its lifecycle."""
        return self._status

    @property
    def config(self) -> SandboxConfig:
        return self._config

    @property
    def container_id(self) -> str | None:
        """The engine's id of the container, once created."""
        return self._container_id

    def _require_running(self) -> Engine:
        if self._status is SandboxStatus.RUNNING and self._engine is not None:
            return self._engine
        raise self._not_running()

    def mark_failed(self, reason: str, *, exit_code: int | None = None,
                    oom_killed: bool = False) -> None:
        """Record that the container stopped by itself or was stopped by a limit."""
        if self._status in (SandboxStatus.DESTROYED, SandboxStatus.STOPPING):
            return
        self._status = SandboxStatus.FAILED
        self._status_reason = reason
        self._exit_code = exit_code
        self._oom_killed = self._oom_killed or oom_killed

    def _stop_commands(self) -> None:
        """Tell running commands their container is gone (once it really is)."""
        error = self._not_running()
        for proc in self._live:
            proc.container_stopped(error)

    def _not_running(self) -> SandboxError:
        """The error for a call that needs the container, given why it is not running."""
        if not self._initialized:
            return SandboxNotRunning("the sandbox was never initialized: call initialize() or "
                                     "use `async with Sandbox(...)`")
        if self._oom_killed:
            return ResourceLimitExceeded(
                "the sandbox's main process was killed by the out-of-memory killer",
                details=self._status_reason,
            )
        reason = f" ({self._status_reason})" if self._status_reason else ""
        if self._status_reason == REMOVED_REASON:
            return SandboxNotFound(f"the sandbox's container is gone{reason}")
        if self._background_error is not None:
            return SandboxNotRunning(
                f"the sandbox is {self._status.value}{reason}",
                details="the SDK lost track of the sandbox; call cleanup() and start a new one",
                cause=self._background_error)
        return SandboxNotRunning(f"the sandbox is {self._status.value}{reason}")

    @contextlib.contextmanager
    def _tracked(self, proc: ExecProcess) -> Iterator[ExecProcess]:
        """Keep `proc` where a stopping container can reach it while it runs."""
        self._live.add(proc)
        try:
            if self._status not in (SandboxStatus.RUNNING, SandboxStatus.PAUSED):
                proc.container_stopped(self._not_running())
            yield proc
        finally:
            self._live.discard(proc)

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> DockerSandbox:
        await self.initialize()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._status is not SandboxStatus.DESTROYED:
            await self.cleanup()

    async def initialize(self, config: SandboxConfig | None = None, *,
                         environment: Mapping[str, str] | None = None) -> None:
        """Create and start the container; on any failure remove what was created.

        ``environment`` (what `Sandbox` holds, when no new ``config`` replaces it) is where
        the set-up adds HOME and the repository's variables; read it back from `environment`.
        """
        config = None if config is None else as_config(config)
        async with self._lock:
            if self._initialized:
                raise SandboxAlreadyInitialized("this sandbox was already initialized; "
                                                "create a new Sandbox for another container")
            self._initialized = True
            if config is not None:
                self._config = config
                self._name = config.name or self._name
                self._cwd = config.working_dir
                self._env = dict(config.environment)
                self._audit = Auditor(self.id, config.security)
            elif environment is not None:
                self._env = dict(environment)
            try:
                await self._initialize()
            except BaseException as exc:
                self._status = SandboxStatus.FAILED
                try:
                    await _finish_despite_cancel(self._remove_everything())
                except SandboxError as cleanup_exc:
                    # The failure to start is the news; what was left behind is a footnote.
                    exc.add_note(f"cleanup after the failure: {cleanup_exc}")
                if isinstance(exc, SecurityViolation):
                    # The refusing setting leads the message: "security.x: why".
                    self._audit.refused(exc.message.split(":", 1)[0], "initialize", exc)
                if isinstance(exc, SandboxInitFailed | EngineUnavailable | SecurityViolation):
                    self._status_reason = exc.message
                    raise
                if isinstance(exc, SandboxError | ConfigError):
                    self._status_reason = str(exc)
                    raise SandboxInitFailed(
                        f"sandbox {self._name} could not be started", details=str(exc), cause=exc
                    ) from exc
                if isinstance(exc, Exception):
                    raise SandboxInitFailed(
                        f"sandbox {self._name} could not be started",
                        details=f"{type(exc).__name__}: {exc}", cause=exc,
                    ) from exc
                raise

    async def _initialize(self) -> None:
        cfg = self._config
        if cfg.type != "docker":
            raise SandboxInitFailed(f"unknown sandbox type {cfg.type!r}; available: 'docker'")
        try:
            ref = parse_image_ref(cfg.image)
        except ConfigError as exc:
            raise SandboxInitFailed(f"invalid image reference {cfg.image!r}",
                                    details=str(exc), cause=exc) from exc
        if self._docker is None:
            self._docker = new_client()
        engine = self._engine = Engine(self._docker)
        try:
            await engine.ping()
        except EngineUnavailable:
            raise
        except SandboxError as exc:
            raise EngineUnavailable(exc.message, details=exc.details, cause=exc) from exc
        self._facts = EngineFacts.from_info(await engine.info())
        self._gvisor = self._facts.is_gvisor(cfg.runtime or self._facts.default_runtime)
        image = await ensure_image(engine, ref, cfg.pull_policy, self._on_pull_progress,
                                   platform=cfg.architecture)
        self._image_id = str(image.get("Id") or "")
        labels = {**_owner_labels(), LABEL_SANDBOX_ID: self.id}
        image_user = ""
        if not cfg.security.run_as_user:
            image_user = str((image.get("Config") or {}).get("User") or "")
        try:
            plan = plan_container(cfg, name=self._name, labels=labels, engine=self._facts,
                                  command=list(KEEPALIVE), image_user=image_user)
        except SandboxInitFailed as exc:
            # A setting this engine cannot enforce, refused: "resources.x: why".
            self._audit.refused(exc.message.split(":", 1)[0], "initialize", exc)
            raise
        # The main process stays root; every command runs as the sandbox user instead. On this
        # engine a container whose User is non-root gives even root execs no capabilities,
        # which would leave the SDK unable to prepare the workspace or kill another uid's tree.
        body = dict(plan.body)
        self._user = body.pop("User", "") or ""
        # The config's variables reach every command through its exec (self._env), not the
        # container's environment, which an exec cannot unset: so set_environment can.
        own = {f"{key}={value}" for key, value in cfg.environment.items()}
        body["Env"] = [entry for entry in body.get("Env") or [] if entry not in own]
        for opt_in in plan.opt_ins:
            setting, _, granted = opt_in.partition(": ")
            self._audit.opt_in(setting, granted)
        self._root_opt_in = bool(plan.opt_ins) and any(
            o.startswith(("security.run_as_user", "security.run_as_group")) for o in plan.opt_ins)
        # Repository and network: made on the host and patched into the body before create;
        # _remove_everything undoes both even if a later step fails.
        self._workspace = Workspace(cfg.repository)
        await self._workspace.prepare(body, sandbox_user=self._user)
        self._network = SandboxNetwork(engine, cfg, name=f"sandbox-{self.id}", labels=labels)
        # Like the container create below: a network create cancelled in flight would still
        # be made by the engine, after cleanup looked for it.
        await _finish_despite_cancel(self._network.prepare(
            body, networked=plan.networked, needs_network=plan.needs_network))
        self._created_resources = True

        async def create() -> None:
            try:
                created = await engine.query_json(
                    "create the sandbox container", "containers/create", "POST",
                    params=plan.params, data=body,
                )
            except EngineConflict as exc:
                raise SandboxAlreadyExists(
                    f"a container named {self._name!r} already exists on the engine",
                    details="choose another SandboxConfig.name, or leave it empty for a "
                            "generated one; the existing container was not touched",
                    cause=exc,
                ) from exc
            self._container_id = created["Id"]

        # A create cancelled in flight still finishes on the engine, after a removal by name
        # would have found nothing; so the create itself is not cancelled, and its id is known
        # before the cancellation goes on to the cleanup.
        await _finish_despite_cancel(create())
        self._created_at = datetime.now(UTC)
        await self._give_workdir()
        self._status = SandboxStatus.STARTING
        await engine.request("start the sandbox container",
                             f"containers/{self._container_id}/start", "POST")
        self._started_at = datetime.now(UTC)
        self._status = SandboxStatus.RUNNING
        await self._prepare_workdir()
        git_env = await self._workspace.populate(self._helper("set up the repository"),
                                                 sandbox_user=self._user)
        self._env = {**git_env, **self._env}
        self._start_background()

    async def _find_own_container(self, errors: list[str]) -> str | None:
        """The id of a container this sandbox made whose create answer never reached us.

        Found by our sandbox-id label, never by name: the name may belong to someone else.
        """
        assert self._engine is not None
        filters = json.dumps({"label": [f"{LABEL_SANDBOX_ID}={self.id}"]})
        try:
            found = await self._engine.query_json(
                "look for the sandbox container", "containers/json", "GET",
                params={"all": "1", "filters": filters},
            )
        except SandboxError as exc:
            errors.append(str(exc))
            return None
        return str(found[0]["Id"]) if found else None

    async def _prepare_workdir(self) -> None:
        """Check the sandbox user's ids, give it a writable HOME, and (for a user given by
        name) the working directory; see `_workdir`."""
        if not self._user:
            return
        covered = self._workspace.covers(self._cwd)
        ids = await probe_user(self._run_internal, self._user, self._cwd,
                               image=self._config.image, make_dir=not covered)
        if 0 in (ids.uid, ids.gid) and not self._root_opt_in:
            # A name, or the image's own user, that the image maps to root (user or group).
            user = self._user
            raise self._audit.refused("security.run_as_user", f"user={user!r}", SecurityViolation(
                f"security.run_as_user: {user!r} runs as uid {ids.uid} gid {ids.gid} in image "
                f"{self._config.image!r}, which is root",
                details="give a non-root uid and security.run_as_group, or ask for root "
                        "explicitly with run_as_user='root'"))
        if not ids.home_writable and "HOME" not in self._env:
            self._env["HOME"] = self._cwd
        if covered or self._workdir_given:
            return  # _give_workdir made it or found it, before start
        assert self._engine is not None and self._container_id is not None
        await give_workdir_after_start(self._run_internal, self._engine, self._container_id,
                                       self._cwd, ids)

    async def _give_workdir(self) -> None:
        """Before start, hand the working dir to a numeric non-root user (see `_workdir`)."""
        cwd = posixpath.normpath(self._cwd or "/")
        if self._config.security.read_only_root or self._workspace.covers(cwd):
            return  # a read-only root's tmpfs gets its owner as options
        assert self._engine is not None and self._container_id is not None
        self._workdir_given = await give_workdir_before_start(
            self._engine, self._container_id, cwd, self._user, image_id=self._image_id)

    def _start_background(self) -> None:
        """Start the sandbox's own work: the event watcher, the wall clock, the sampler.

        They run in one anyio task group that the sandbox owns, under a supervisor task (the
        group must outlive ``initialize``, and cleanup may run in another task); cleanup
        cancels and awaits it. A failure there is logged, moves the sandbox to FAILED and
        makes the next call raise; it never passes unnoticed.
        """
        assert self._engine is not None and self._container_id is not None
        engine, container_id = self._engine, self._container_id
        work: list[tuple[str, Callable[[], Coroutine[Any, Any, None]]]] = []
        wall = seconds(self._config.resources.wall_time_limit)
        if wall is not None:
            work.append(("the wall clock", lambda: self._wall_clock(wall)))
        work.append(("the event watcher", lambda: watch_container(
            engine, container_id, self._on_container_stop, on_oom=self._on_oom,
            on_pause=self._on_pause)))
        interval = self._config.stats_interval.total_seconds()
        if interval > 0:
            sampler = self._sampler = StatsSampler(
                engine, container_id, interval=max(interval, 1.0),
                on_sample=self._on_sample, proc_reader=self._read_proc_counts,
                started_at=time.monotonic(),
                host_mem=self._facts.mem_total if self._facts else 0,
            )
            work.append(("the stats sampler", sampler.run))
        self._background = asyncio.ensure_future(self._supervise(work))

    async def _supervise(
        self, work: Sequence[tuple[str, Callable[[], Coroutine[Any, Any, None]]]]
    ) -> None:
        async with anyio.create_task_group() as tg:
            for name, start in work:
                tg.start_soon(self._guarded, name, start, tg.cancel_scope)

    async def _guarded(self, name: str, start: Callable[[], Coroutine[Any, Any, None]],
                       group: anyio.CancelScope) -> None:
        """Run one piece of background work; its failure fails the sandbox, visibly."""
        try:
            await start()
        except Exception as exc:
            log.error("sandbox %s: %s failed", self.id, name, exc_info=exc)
            self._background_error = exc
            self.mark_failed(f"{name} failed: {type(exc).__name__}: {exc}")
            self._stop_commands()
            group.cancel()  # the rest cannot be trusted without it

    async def _read_proc_counts(self) -> tuple[int, int, int]:
        # As the sandbox user: root has no capabilities, so it could not read another
        # user's fds either; the SDK's own root helpers are not what the counts are for.
        result = await self._run_internal(["/bin/sh", "-c", PROC_SCRIPT],
                                          what="count processes")
        return parse_proc_counts(result.stdout)

    def _on_container_stop(self, reason: str, exit_code: int | None, oom_killed: bool) -> None:
        if self._status is not SandboxStatus.FAILED:
            self.mark_failed(reason, exit_code=exit_code, oom_killed=oom_killed)
            if oom_killed:
                self._audit.limit("memory", f"the sandbox stopped: {reason}")
        self._stop_commands()

    def _on_oom(self) -> None:
        self._oom_events += 1
        self._oom_seen.set()
        self._oom_seen = anyio.Event()

    def _on_pause(self, paused: bool) -> None:
        self._paused = paused
        if paused and self._status is SandboxStatus.RUNNING:
            self._status = SandboxStatus.PAUSED
            self._status_reason = "the container was paused from outside"
        elif not paused and self._status is SandboxStatus.PAUSED:
            self._status = SandboxStatus.RUNNING
            self._status_reason = ""

    async def _wall_clock(self, seconds: float) -> None:
        await anyio.sleep(seconds)
        if self._status not in (SandboxStatus.RUNNING, SandboxStatus.PAUSED):
            return
        self.mark_failed(f"TimeoutExceeded: wall_time_limit of {seconds:g} s reached")
        self._audit.limit("wall_time", self._status_reason)
        assert self._engine is not None
        with contextlib.suppress(SandboxError):
            if self._paused:
                # Pausing must not outlive the limit; a frozen container ignores SIGKILL.
                await self._engine.request("unpause the sandbox at its wall time limit",
                                           f"containers/{self._container_id}/unpause", "POST")
            await self._engine.request("stop the sandbox at its wall time limit",
                                       f"containers/{self._container_id}/kill", "POST")
        self._stop_commands()

    async def cleanup(self) -> None:
        """Remove the container and everything created for it; safe to call twice.

        Shielded from cancellation, so a cancelled caller still leaves nothing behind.
        """
        if not self._initialized:
            return  # nothing was created, so there is nothing to remove
        await _finish_despite_cancel(self._cleanup())

    async def _cleanup(self) -> None:
        with anyio.CancelScope(shield=True):
            async with self._lock:
                if self._status is SandboxStatus.DESTROYED:
                    return
                delay = self._config.cleanup_delay.total_seconds()
                if delay > 0:
                    await anyio.sleep(delay)
                self._status = SandboxStatus.STOPPING
                await self._remove_everything()
                self._status = SandboxStatus.DESTROYED

    async def _remove_everything(self) -> None:
        if self._background is not None:
            self._background.cancel()
            # _guarded logged and recorded every failure; what is left is the cancellation.
            with contextlib.suppress(BaseException):
                await self._background
            self._background = None
        errors: list[str] = []
        closing = self._docker if self._owns_docker else None
        if self._engine is not None and self._engine.client_closed():
            # An earlier cleanup that failed closed our client, or the caller closed theirs
            # under us: remove through a new client to the same engine (shared by the
            # network's Engine, which is this same object).
            self._engine.docker = closing = client_like(self._engine.docker)
            if self._owns_docker:
                self._docker = closing
        if self._engine is not None and self._created_resources:
            target = self._container_id or await self._find_own_container(errors)
        else:
            target = None
        if self._engine is not None and target is not None:
            short = target[:12]
            # Tearing down a gVisor sandbox took 30-35 s under a loaded 2-core host (the engine
            # finished the removal later); runc takes well under a second.
            patience = GVISOR_CLEANUP_TIMEOUT if self._gvisor else DEFAULT_CLEANUP_TIMEOUT
            with anyio.move_on_after(patience) as scope:
                if self._paused:
                    # A paused container cannot be removed (cgroup v1: SIGKILL waits for the
                    # thaw, so the DELETE hangs); thaw it first.
                    with contextlib.suppress(SandboxError):
                        await self._engine.request("unpause the sandbox container",
                                                   f"containers/{target}/unpause", "POST")
                try:
                    await self._engine.request(
                        f"remove the sandbox container {short}", f"containers/{target}",
                        "DELETE", params={"force": "1", "v": "1"}, deadline=patience,
                    )
                except EngineNotFound:
                    pass  # already gone
                except SandboxError as exc:
                    errors.append(str(exc))
                # Commands still running (another task's) must not wait on a removed container.
                self._stop_commands()
            if scope.cancelled_caught and not await self._removal_under_way(target):
                errors.append(f"remove the sandbox container {short}: no answer within "
                              f"{patience:g} s")
        # After the container: a network with an endpoint left cannot be removed.
        if self._network is not None:
            errors += await self._network.remove()
        errors += await self._workspace.remove()
        if closing is not None:
            with contextlib.suppress(Exception):
                await closing.close()
            if self._owns_docker:
                self._docker = None
        if errors:
            raise SandboxError("cleanup could not remove everything", details="; ".join(errors),
                               retryable=True)

    async def _removal_under_way(self, target: str) -> bool:
        """After a DELETE that timed out: is the container gone, or being removed anyway?

        The engine goes on removing after the client gave up (seen with runsc under load:
        containerd answered after 33 s); only a container still there is a leak.
        """
        assert self._engine is not None
        try:
            data = await self._engine.query_json(
                "inspect the sandbox container", f"containers/{target}/json", deadline=5)
        except EngineNotFound:
            return True
        except SandboxError:
            return False
        return (data.get("State") or {}).get("Status") in ("removing", "dead")

    # -- commands --------------------------------------------------------------------------------

    @property
    def user(self) -> str:
        """The user commands run as ("uid:gid" or a name); "" before initialize."""
        return self._user

    @property
    def audit(self) -> Auditor:
        """Where this sandbox's audit events go."""
        return self._audit

    @property
    def working_dir(self) -> str:
        """The working directory the set-up prepared."""
        return self._cwd

    def environment(self) -> dict[str, str]:
        """The environment as the set-up left it (config, HOME, repository variables)."""
        return dict(self._env)

    def require_running(self) -> None:
        """Raise the error that says why the sandbox cannot run commands now, if it cannot."""
        self._require_running()

    async def run_process(
        self, spec: ProcessSpec, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Run ``spec`` to its end; a non-zero exit, a signal or a timeout is a result."""
        engine = self._require_running()
        assert self._container_id is not None
        async with open_exec(
            engine, self._container_id, spec, attach_stdin=spec.stdin is not None,
            on_stdout=on_stdout, on_stderr=on_stderr, finalize=await self._finalizer(),
        ) as proc:
            with self._tracked(proc):
                return await proc.wait()

    async def _raise_if_container_died(self, patience: float) -> None:
        """Under gVisor a command can fail *because* the sandbox died (exit 128, "urpc ...
        EOF" on stderr, when the OOM killer took the whole sandbox); then that is the news.
        """
        if self._status is SandboxStatus.RUNNING:
            assert self._engine is not None
            state: Mapping[str, Any] = {}
            with anyio.move_on_after(patience + 5):
                give_up = time.monotonic() + patience
                while True:
                    try:
                        data = await self._engine.query_json(
                            "inspect the sandbox", f"containers/{self._container_id}/json",
                            deadline=5)
                    except SandboxError:
                        return
                    state = data.get("State") or {}
                    if not state.get("Running") or time.monotonic() >= give_up:
                        break
                    await anyio.sleep(0.05)
            if state.get("Running", True):
                return
            # The event watcher explains the stop best (a kill from outside, OOM); wait for it.
            with anyio.move_on_after(1.0):
                while True:
                    if self._status is not SandboxStatus.RUNNING:
                        break
                    await anyio.sleep(0.02)
            if self._status is SandboxStatus.RUNNING:
                code, oom = state.get("ExitCode"), bool(state.get("OOMKilled"))
                self._on_container_stop(
                    f"the container's main process exited with code {code}"
                    + (" (OOMKilled)" if oom else ""), code, oom)
        if self._status is SandboxStatus.FAILED:
            raise self._not_running()

    async def _host_cgroup(self) -> HostCgroup | None:
        """The container's cgroup on this host, looked up once; None for a remote engine."""
        if not self._cgroup_looked_up:
            assert self._engine is not None and self._container_id is not None
            with contextlib.suppress(SandboxError):
                data = await self._engine.query_json(
                    "inspect the sandbox", f"containers/{self._container_id}/json", deadline=5)
                pid = int((data.get("State") or {}).get("Pid") or 0)
                self._cgroup = HostCgroup.find(pid, self._container_id)
                self._cgroup_looked_up = True  # an engine error is worth another try
        return self._cgroup

    async def _finalizer(self) -> Finalizer:
        """Return what completes a command's result; call it just before the command starts."""
        cgroup = await self._host_cgroup()
        before = cgroup.read() if cgroup is not None else None
        start, ooms = time.monotonic(), self._oom_events

        async def finalize(result: CommandResult) -> CommandResult:
            end = time.monotonic()
            usage = self._sampler.usage_between(start, end) if self._sampler else None
            after = cgroup.read() if cgroup is not None and before is not None else None
            if before is not None and after is not None:
                usage = command_usage(usage, before, after, end - start)
            return await self._finish_result(result, usage, ooms)
        return finalize

    async def _finish_result(self, result: CommandResult, usage: ResourceUsage | None,
                             ooms: int) -> CommandResult:
        """Add what only the sandbox knows: usage during the command, and OOM kills."""
        if result.exit_code != 0 and self._gvisor and not result.timed_out:
            # runsc reports its own lost connection to the dying sandbox as exit 128, often
            # before the engine has seen the container stop.
            await self._raise_if_container_died(2.0 if result.exit_code == 128 else 0.0)
        changes: dict[str, Any] = {}
        if usage is not None:
            changes["resource_usage"] = usage
        if result.exit_code == 137 and not result.timed_out:
            if self._oom_events == ooms and self._config.resources.memory_limit:
                # The oom event may trail the exec's end by a moment.
                with anyio.move_on_after(0.5):
                    await self._oom_seen.wait()
            if self._oom_events > ooms:
                changes["oom_killed"] = True
                changes["error"] = _join_errors(
                    "killed by the out-of-memory killer (memory limit reached)", result.error)
        cpu_time = self._config.resources.cpu_time_limit.total_seconds()
        if result.signal == "SIGXCPU" and cpu_time and not result.error:
            changes["error"] = f"killed by SIGXCPU: cpu_time_limit of {cpu_time:g} s reached"
        return attrs.evolve(result, **changes) if changes else result

    @contextlib.asynccontextmanager
    async def open_process(self, spec: ProcessSpec) -> AsyncIterator[ExecProcess]:
        """Start ``spec`` and yield its live handle; leaving the block kills it if it runs."""
        engine = self._require_running()
        assert self._container_id is not None
        async with open_exec(engine, self._container_id, spec, attach_stdin=True,
                             iterate=True, finalize=await self._finalizer()) as proc:
            with self._tracked(proc):
                yield proc

    async def _run_internal(
        self, argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
        on_stdout: Callable[[bytes], object] | None = None, user: str | None = None,
        what: str = "a helper command", rate: float | None = None,
        max_time: float | None = None,
    ) -> CommandResult:
        """Run a helper the SDK needs (file operation, set-up) with a deadline.

        The helper gets ``HELPER_TIMEOUT`` seconds, plus one second per ``rate`` bytes it has
        moved (stdin written and stdout read; default ``HELPER_MIN_RATE``, 1 MiB/s), up to
        ``max_time`` in all (default ``HELPER_MAX_TIME``). A big copy thus has time in
        proportion to its size, while one that stalls or trickles (a tool replaced by ``sleep``
        or by a slow writer) is killed with everything it started and raises
        `TimeoutExceeded` naming ``what``.
        """
        engine = self._require_running()
        assert self._container_id is not None
        fixed = _constants.HELPER_TIMEOUT
        per_byte = 1.0 / (rate or _constants.HELPER_MIN_RATE)
        ceiling = max(fixed, max_time or _constants.HELPER_MAX_TIME)
        start = time.monotonic()
        moved = 0
        scope = anyio.CancelScope(deadline=start + fixed)

        def credit(n: int) -> None:
            nonlocal moved
            moved += n
            scope.deadline = start + min(fixed + moved * per_byte, ceiling)

        def counted_out(data: bytes) -> object:
            credit(len(data))
            return on_stdout(data) if on_stdout is not None else None

        async def counted_in(src: bytes | AsyncIterator[bytes]) -> AsyncIterator[bytes]:
            if isinstance(src, bytes):
                for off in range(0, len(src), 1 << 20):
                    piece = src[off:off + (1 << 20)]
                    credit(len(piece))
                    yield piece
            else:
                async for piece in src:
                    credit(len(piece))
                    yield piece

        with scope:
            spec = ProcessSpec(
                argv=argv, env={}, workdir="/", user=self._user if user is None else user,
                stdin=None if stdin is None else counted_in(stdin),
                # A caller taking stdout through on_stdout (read_file, tar) needs the result
                # only for error text; decoding 1 MiB of binary as UTF-8 cost ~25 ms per read.
                max_output_bytes=(64 << 10) if on_stdout is not None else 1 << 20,
            )
            async with open_exec(engine, self._container_id, spec,
                                 attach_stdin=stdin is not None,
                                 on_stdout=counted_out) as proc:
                with self._tracked(proc):
                    return await proc.wait()
        allowed = scope.deadline - start
        raise TimeoutExceeded(
            f"{what} did not finish within {allowed:.0f} s (has a tool in the sandbox been "
            "replaced?)",
            details=f"the helper {argv[0]!r} was killed after moving {moved} bytes; helpers get "
                    f"{fixed:g} s plus 1 s per {1 / per_byte:.0f} bytes moved, at most "
                    f"{ceiling:g} s",
        )

    def _helper(self, what: str, *, rate: float | None = None,
                max_time: float | None = None) -> Callable[
            ..., Coroutine[Any, Any, CommandResult]]:
        """A runner for `_files` / `Workspace` whose deadline error names ``what``."""
        async def run(argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
                      on_stdout: Callable[[bytes], object] | None = None,
                      user: str | None = None) -> CommandResult:
            return await self._run_internal(argv, stdin=stdin, on_stdout=on_stdout, user=user,
                                            what=what, rate=rate, max_time=max_time)
        return run

    # -- files -----------------------------------------------------------------------------------

    async def write_file(self, target: str, content: bytes, mode: int = 0o644) -> None:
        """Write a file at the absolute path ``target``, creating parent directories."""
        await _files.write_file(self._helper(f"write {target!r}"), target, content, mode)

    async def read_file(self, target: str) -> bytes:
        """Read a whole file (up to 1 GiB; use copy_out for larger ones)."""
        return await _files.read_file(self._helper(f"read {target!r}"), target)

    async def list_files(self, target: str) -> list[FileInfo]:
        """List a directory (or describe one file)."""
        return await _files.list_files(
            self._helper(f"list {target!r}", rate=_constants.LIST_MIN_RATE,
                         max_time=_constants.LIST_MAX_TIME), target)

    async def copy_in(self, source: Path, target: str) -> None:
        """Copy a host file or tree to the absolute sandbox path ``target``."""
        await _files.copy_to_sandbox(self._helper(f"copy into {target!r}"), source, target)

    async def copy_out(self, target: str, dest: Path, *, max_bytes: int,
                       max_entries: int) -> None:
        """Copy the sandbox file or tree at ``target`` to the host, by the copy-out rules."""
        await _files.copy_from_sandbox(self._helper(f"copy from {target!r}"), target, dest,
                                       max_bytes=max_bytes, max_entries=max_entries)

    async def path_kind(self, target: str) -> str:
        """What is at ``target``: "dir", "none", or another kind."""
        return await _files.path_kind(self._helper(f"inspect {target!r}"), target)

    # -- info --------------------------------------------------------------------------------------

    async def published_port(self, container_port: int, protocol: str = "tcp") -> int:
        """Return the host port a PortMapping published (the engine's pick when host_port=0)."""
        engine = self._require_running()
        assert self._container_id is not None
        return await published_port(engine, self._container_id, container_port, protocol)

    async def get_resource_usage(self) -> ResourceUsage:
        """Return the latest sample at once; take one only if none exists yet."""
        self._require_running()
        if self._sampler is None:
            assert self._engine is not None and self._container_id is not None
            self._sampler = StatsSampler(self._engine, self._container_id, interval=1.0,
                                         host_mem=self._facts.mem_total if self._facts else 0)
        return self._sampler.latest or await self._sampler.sample_now()

    def usage_history(self) -> list[ResourceUsage]:
        """The samples kept so far (the last 600), oldest first."""
        return self._sampler.history() if self._sampler else []

    def _platform(self, data: Mapping[str, Any]) -> str:
        arch = self._config.architecture or (self._facts.architecture if self._facts else "")
        return f"{data.get('Platform') or 'linux'}/{arch}" if arch else "linux"

    async def get_info(self) -> SandboxInfo:
        """Describe the sandbox as the engine sees it now."""
        data: dict[str, Any] = {}
        if self._engine is not None and self._container_id and \
                self._status is not SandboxStatus.DESTROYED:
            with contextlib.suppress(SandboxError):
                data = await self._engine.query_json(
                    "inspect the sandbox", f"containers/{self._container_id}/json")
        host = data.get("HostConfig", {})
        cfg_data = data.get("Config", {})
        net = data.get("NetworkSettings", {})
        ip, mac = net.get("IPAddress", ""), net.get("MacAddress", "")
        for n in (net.get("Networks") or {}).values():
            ip, mac = ip or n.get("IPAddress", ""), mac or n.get("MacAddress", "")
        state = data.get("State", {})
        cpus = (host.get("NanoCpus") or 0) / 1e9
        allocated = ResourceLimits(
            cpu_limit=cpus, memory_limit=host.get("Memory") or 0,
            memory_request=host.get("MemoryReservation") or 0,
            process_limit=host.get("PidsLimit") or 0,
        ) if host else self._config.resources
        return SandboxInfo(
            id=self.id,
            name=self._name,
            type="docker",
            status=self._status,
            created_at=engine_time(data.get("Created")) or self._created_at,
            started_at=engine_time(state.get("StartedAt")) or self._started_at,
            runtime=host.get("Runtime", self._config.runtime),
            image=self._config.image,
            platform=self._platform(data),
            ip_address=ip,
            mac_address=mac,
            hostname=cfg_data.get("Hostname", ""),
            allocated_resources=allocated,
            config=self._config,
            labels=cfg_data.get("Labels") or {},
            annotations=dict(self._config.annotations),
            status_reason=self._status_reason,
            exit_code=self._exit_code,
            oom_killed=self._oom_killed,
        )

