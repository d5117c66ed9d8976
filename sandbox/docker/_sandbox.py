"""DockerBackend: one container per sandbox, driven through the Engine API."""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, cast

import anyio
import attrs

from .._backend import ProcessSpec
from .._backend_base import BackendBase
from .._constants import DEFAULT_CLEANUP_TIMEOUT, GVISOR_CLEANUP_TIMEOUT, LABEL_SANDBOX_ID
from .._egress_stats import EgressStats
from .._errors import ConfigError, SandboxError, SandboxInitFailed
from .._helper_files import HelperFiles
from .._ids import Identity
from .._image_ref import ImageRef, parse_image_ref
from .._lifecycle import Lifecycle
from .._models import (
    CommandResult,
    ResourceLimits,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SandboxStatus,
)
from .._owner import owner_labels
from .._protocol import OutputCallback
from .._session_fifo import FifoDir
from .._shield import finish_despite_cancel
from .._tasks import drop, single_errors
from .._workspace import Workspace, live_mount_user
from . import _facts_cache
from ._background import Background
from ._checkpoint import PoolPrimitives
from ._container import create_container, find_own_container, remove_container
from ._engine_errors import first_call
from ._exec import ExecProcess, Finalizer, open_exec
from ._exec_gate import ExecGate
from ._exec_kill import kill_marked
from ._facts import EngineFacts
from ._finish import ResultFinisher
from ._gateway import DockerClient, Engine, client_like, engine_address, new_client
from ._helpers import HelperRunner, Helpers
from ._hosts_init import InitHosts
from ._images import ensure_image
from ._keepalive import KEEPALIVE
from ._main_pid import MainPid
from ._netless import applies as netless_applies
from ._netless import disable_network, hosts_entry, write_hosts, write_hosts_by_exec
from ._network import SandboxNetwork, published_port
from ._plan import plan_container
from ._root_env import RootEnv
from ._session_mount import TARGET as FIFO_TARGET
from ._session_mount import add_fifo_mount, create_dropping_fifo
from ._stats import StatsSampler
from ._vm import pick_vm_runtime
from ._wire import container_view
from ._workdir import Extra, give_workdir_before_start, mounts_key, probe_kept, settle_user

PullProgress = Callable[[Mapping[str, Any]], object]


class DockerBackend(BackendBase, HelperFiles, PoolPrimitives):
    """A sandbox backed by one Docker container: the Docker implementation of `Backend`.

    Use it through :class:`sandbox.Sandbox` (``Sandbox(config)`` builds one, or
    ``Sandbox(backend=DockerBackend(config, docker=...))`` for Docker-specific options).
    """

    keepalive: tuple[str, ...] = KEEPALIVE
    stdin_stops_at_exit = True  # an exec's stdin feed ends with it (copy in: one exec)

    def __init__(
        self, config: SandboxConfig | None = None, *, docker: DockerClient | None = None,
        on_pull_progress: PullProgress | None = None,
        on_sample: Callable[[ResourceUsage], object] | None = None,
    ) -> None:
        super().__init__(config)
        self._docker = docker
        self._owns_docker = docker is None
        self._engine: Engine | None = None
        self._on_pull_progress = on_pull_progress
        self._container_id: str | None = None
        self._live: set[ExecProcess] = set()  # commands running now
        self._gate = ExecGate()  # keeps execs out of a checkpoint's freeze
        self._gvisor = False
        self._created_resources = False
        # Events, wall clock and sampler; it reports to the lifecycle (see `_background`).
        self._background = Background(self.id, life=self._life, audit=lambda: self._audit,
                                      stop_commands=self._stop_commands)
        self._facts: EngineFacts | None = None
        self._identity: Identity | None = None
        self._root_opt_in = False
        self._workdir_given = False
        self._given_config = self._config
        self._replanned = False  # a create that found its kept facts outdated started over
        self._pin_runc = False  # planned from trusted facts: the body names runc itself
        self._mounts_key: str | None = None
        self._image_id = ""
        self._started_at: datetime | None = None
        self._helpers: Helpers | None = None
        self._finisher: ResultFinisher | None = None
        self._on_sample = on_sample
        self._workspace = Workspace(None)
        self._network: SandboxNetwork | None = None
        self._fifo: FifoDir | None = None  # sessions' FIFO directory, mounted (`_session_mount`)
        self._root_env = RootEnv()  # the image's variables kept from root (`_root_env`)

    # -- state -----------------------------------------------------------------------------------

    @property
    def container_id(self) -> str | None:
        """The engine's id of the container, once created."""
        return self._container_id

    @property
    def identity(self) -> Identity | None:
        """The user's real ids and names, as the probe at create read them."""
        return self._identity

    def _running(self) -> tuple[Engine, str]:
        self._life.require_running()
        assert self._engine is not None and self._container_id is not None
        return self._engine, self._container_id

    def _stop_commands(self) -> None:
        """Tell running commands their container is gone (once it really is)."""
        error = self._life.not_running()
        for proc in self._live:
            proc.container_stopped(error)

    @contextlib.contextmanager
    def _tracked(self, proc: ExecProcess) -> Iterator[ExecProcess]:
        """Keep `proc` where a stopping container can reach it while it runs."""
        self._live.add(proc)
        try:
            if not self._life.alive:
                proc.container_stopped(self._life.not_running())
            yield proc
        finally:
            self._live.discard(proc)

    # -- create ----------------------------------------------------------------------------------

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        """Create and start the container, moving ``lifecycle`` to RUNNING.

        ``environment`` (what `Sandbox` holds, when no new ``config`` replaces it) is where
        the set-up adds HOME and the repository's variables; read it back from `environment`.
        On failure `Sandbox` calls `remove`.
        """
        self.begin_create(lifecycle, config, environment)
        await self._create()

    async def _create(self) -> None:
        """Check the config, then create by the path the facts kept for this engine allow: none
        kept, read first (`_create_cold`); trusted, no read (`_create_trusted`); else plan
        from them while a read confirms them (`_create_confirming`)."""
        cfg = self._given_config = self._config
        if cfg.type not in ("docker", "vm"):
            raise SandboxInitFailed(f"unknown sandbox type {cfg.type!r}; available: 'docker', "
                                    "'vm'")
        try:
            ref = parse_image_ref(cfg.image)
        except ConfigError as exc:
            raise SandboxInitFailed(f"invalid image reference {cfg.image!r}",
                                    details=str(exc), cause=exc) from exc
        if self._docker is None:
            self._docker = new_client()
        engine = self._engine = Engine(self._docker)
        # Facts are kept only for our own client's engine (`_facts_cache`).
        address = engine_address() if self._owns_docker else ""
        cached = _facts_cache.kept(address) if address and not self._replanned else None
        if cached is None:
            await self._create_cold(engine, ref, address)
            return
        trusted = _facts_cache.trusted(address, cfg.runtime) if cfg.type == "docker" else None
        if trusted is not None:
            await self._create_trusted(engine, ref, address, trusted)
        else:
            await self._create_confirming(engine, ref, address, cached)

    async def _create_cold(self, engine: Engine, ref: ImageRef, address: str) -> None:
        """No facts kept (or a create starting over): read them beside the ping, then plan."""
        by = _facts_cache.daemon(address)  # named before the read
        asked_at = time.monotonic()
        with first_call():
            info = await engine.ping_and_info()  # one round trip where there were three
        self._keep_api(address)
        self._facts = EngineFacts.from_info(info)
        _facts_cache.keep(address, self._facts, asked_at, by)  # kept for our own client's only
        await self._build(engine, ref, None)

    async def _create_trusted(self, engine: Engine, ref: ImageRef, address: str,
                              trusted: EngineFacts) -> None:
        """Trusted facts (`_facts_cache.trusted`), runc pinned: no read if the ping keeps the API
        version and their daemon, if named, answers after the create (`SameDaemon`)."""
        kept_api = _facts_cache.kept_api(address)
        early = _facts_cache.early_inspect(engine, ref.engine_name, address,
                                           self._config.pull_policy)
        same = _facts_cache.same_daemon(engine, address, trusted)
        try:
            with first_call():
                version = await engine.ping(unversioned=early is not None)
                early = _facts_cache.check_api(engine, version, address, early)
            self._keep_api(address)
            if engine.docker.api_version != kept_api:  # `check_api` forgot the facts
                self._replanned = True
                await self._create()
                return
            self._facts, self._pin_runc = trusted, True
            current = await self._build_checked(engine, ref, same, early)
        finally:
            if early is not None:
                drop(early)
        if not current:
            await self._start_over(address)

    async def _create_confirming(self, engine: Engine, ref: ImageRef, address: str,
                                 cached: EngineFacts) -> None:
        """Kept facts: planned from at once while ``/info`` is read again (`FreshFacts`); they
        must equal the fresh ones before start, else what was made from them (nothing ran in
        it) is removed and the create starts over from what the engine says now."""
        fresh = _facts_cache.FreshFacts(engine, address)
        early = _facts_cache.early_inspect(engine, ref.engine_name, address,
                                           self._config.pull_policy)
        try:
            with first_call(on_error=fresh.cancel):
                version = await engine.ping(unversioned=early is not None)
                early = _facts_cache.check_api(engine, version, address, early)
            self._keep_api(address)
            self._facts = cached
            try:
                planned_from_current = await self._build_checked(engine, ref, fresh, early)
            finally:
                fresh.cancel()
        finally:
            if early is not None:
                drop(early)
        if planned_from_current:
            _facts_cache.keep(address, cached, fresh.asked_at, fresh.asked_by)  # confirmed
            return
        await self._start_over(address)

    def _keep_api(self, address: str) -> None:
        """Keep the API version the ping settled for the engine at ``address``."""
        api = self._engine_or_fail().docker.api_version
        if address and api != "auto":
            _facts_cache.keep_api(address, api)

    async def _build_checked(self, engine: Engine, ref: ImageRef,
                             check: _facts_cache.Check | None,
                             early: asyncio.Task[dict[str, Any] | None] | None) -> bool:
        """`_build`; False also where it failed from facts ``check`` shows outdated."""
        try:
            return await self._build(engine, ref, check, early)
        except SandboxError:
            if not await self._facts_changed(check):
                raise
            return False

    async def _facts_changed(self, fresh: _facts_cache.Check | None) -> bool:
        """Whether the engine's facts now differ from those this create planned from."""
        return fresh is not None and await fresh.result() != self._facts

    async def _start_over(self, address: str) -> None:
        """Undo a create planned from outdated facts (before start) and create again, reading
        the facts (forgotten for ``address``) first this time."""
        _facts_cache.forget(address)
        await self.remove()
        self._container_id, self._created_resources, self._network = None, False, None
        self._workspace, self._workdir_given = Workspace(None), False
        self._config, self._replanned, self._pin_runc = self._given_config, True, False
        await self._create()

    async def _build(self, engine: Engine, ref: ImageRef,
                     fresh: _facts_cache.Check | None,
                     early: asyncio.Task[dict[str, Any] | None] | None = None) -> bool:
        """Everything after reading the facts; False when ``fresh`` (the facts read during
        this create) shows the ones planned from were outdated, before the container
        started."""
        cfg = self._config
        assert self._facts is not None
        if cfg.type == "vm":  # a VM-isolated runtime the engine has, or a refusal naming them
            cfg = self._config = attrs.evolve(
                cfg, runtime=pick_vm_runtime(self._facts.runtimes, cfg.runtime))
        self._gvisor = self._facts.is_gvisor(cfg.runtime or self._facts.default_runtime)
        image = await ensure_image(engine, ref, cfg.pull_policy, self._on_pull_progress,
                                   platform=cfg.architecture, inspected=early)
        self._image_id = str(image.get("Id") or "")
        labels = {**owner_labels(), LABEL_SANDBOX_ID: self.id}
        image_user = ""
        if not cfg.security.run_as_user:
            # A writable live mount's owner, else the image's own user (`_plan._user`).
            image_user = await live_mount_user(cfg.repository) or \
                str((image.get("Config") or {}).get("User") or "")
        try:
            plan = plan_container(cfg, name=self._name, labels=labels, engine=self._facts,
                                  command=list(KEEPALIVE), image_user=image_user)
        except SandboxInitFailed as exc:
            if await self._facts_changed(fresh):
                return False  # refused from outdated facts: plan again from the current
            # A setting this engine cannot enforce, refused: "resources.x: why".
            self._audit.refused(exc.message.split(":", 1)[0], "initialize", exc)
            raise
        # The main process is root (whatever the image's USER, a checkpoint's too); every
        # command runs as the sandbox user instead. On this engine a container whose User is
        # non-root gives even root execs no capabilities, and its user could kill the keepalive.
        body = dict(plan.body)
        self._user, body["User"] = body.pop("User", "") or "", "0:0"
        # The config's variables reach every command through its exec (self._env), not the
        # container's environment, which an exec cannot unset: so set_environment can.
        own = {f"{key}={value}" for key, value in cfg.environment.items()}
        body["Env"] = [entry for entry in body.get("Env") or [] if entry not in own]
        self._root_env = RootEnv.hide(body, (image.get("Config") or {}).get("Env") or (),
                                      sandbox_user=self._user)  # LD_*, BASH_ENV: not root's
        for opt_in in plan.opt_ins:
            setting, _, granted = opt_in.partition(": ")
            self._audit.opt_in(setting, granted)
        self._root_opt_in = bool(plan.opt_ins) and any(
            o.startswith(("security.run_as_user", "security.run_as_group")) for o in plan.opt_ins)
        # Repository and network: made on the host and patched into the body before create;
        # _remove_everything undoes both even if a later step fails.
        self._workspace = Workspace(cfg.repository)
        await self._workspace.prepare(body, sandbox_user=self._user)
        self._network = SandboxNetwork(engine, cfg, name=f"sandbox-{self.id}", labels=labels,
                                       audit=lambda: self._audit, facts=self._facts)
        await self._network.set_up(body, plan)  # shielded like the container create below
        self._created_resources = True
        # No network: a bare namespace instead of libnetwork's "none" sandbox (`_netless`).
        netless = not plan.networked and not self._gvisor and netless_applies(
            body, runtime=cfg.runtime or self._facts.default_runtime)
        if netless:
            disable_network(body)
        self._mounts_key = mounts_key(body)  # what the user probe's answer depends on
        init = InitHosts.child(body, netless=netless, image_id=self._image_id, user=self._user,
                               cwd=self._cwd, mounts=self._mounts_key)  # its keepalive: hosts

        if self._pin_runc:
            # Planned for runc from facts not read during this create (`_facts_cache.trusted`):
            # runc runs it, whatever the engine's default became since.
            body["HostConfig"] = {**(body.get("HostConfig") or {}), "Runtime": "runc"}
        self._fifo = add_fifo_mount(body, self._facts, runtime=cfg.runtime,
                                    address=engine_address() if self._owns_docker else "")

        async def create() -> None:
            self._container_id, self._fifo = await create_dropping_fifo(
                lambda b: create_container(engine, self._name, plan.params, b), body, self._fifo)

        await finish_despite_cancel(create())
        self._created_at = datetime.now(UTC)
        assert self._container_id is not None
        # /etc/hosts: by a settled checkpoint's child's keepalive (`_hosts_init`), else in the
        # working dir's hand-over, else by a root exec beside the user probe, else a PUT.
        netless, self.keepalive = netless and init is None, init.command if init else KEEPALIVE
        hosts_due = not await self._give_workdir([hosts_entry()] if netless else []) and netless
        if hosts_due and (not self._user or probe_kept(  # `_prepare_workdir` makes no exec
                self._image_id, self._user, self._cwd, self._mounts_key,
                covered=self._workspace.covers(self._cwd), given=self._workdir_given)):
            await write_hosts(engine, self._container_id)
            hosts_due = False
        if await self._facts_changed(fresh):
            return False
        self._life.advance(SandboxStatus.STARTING)
        start = partial(engine.request, "start the sandbox container",
                        f"containers/{self._container_id}/start", "POST")
        await (init.start(engine, self._container_id, start) if init else start())
        self._started_at = datetime.now(UTC)
        await self._network.shape(self._container_id)  # before any command runs
        self._life.advance(SandboxStatus.RUNNING)
        self._helpers = Helpers(engine, self._container_id, user=self._user,
                                ready=self._life.require_running, tracked=self._tracked,
                                gate=self._gate, root_env=self._root_env)
        main_pid = MainPid(engine, self._container_id)  # one inspect for both below
        self._finisher = ResultFinisher(
            engine, self._container_id, life=self._life, resources=cfg.resources,
            gvisor=self._gvisor, sampler=lambda: self._background.sampler,
            on_stop=self._background.on_container_stop, main_pid=main_pid)
        if hosts_due:
            async with single_errors(), anyio.create_task_group() as tg:
                tg.start_soon(write_hosts_by_exec, self._helpers.run, engine, self._container_id)
                tg.start_soon(self._prepare_workdir)
        else:
            await self._prepare_workdir()
        git_env = await self._workspace.populate(self._helpers.named("set up the repository"),
                                                 sandbox_user=self._user)
        self._env = {**git_env, **self._env}
        self._background.start(
            engine, self._container_id, life=self._life, config=cfg, finisher=self._finisher,
            helpers=self._helpers, on_sample=self._on_sample,
            host_mem=self._facts.mem_total if self._facts else 0, main_pid=main_pid)
        return True

    async def _prepare_workdir(self) -> None:
        """Check the sandbox user's ids and give it a writable HOME and working dir."""
        if not self._user:
            return
        assert self._helpers is not None and self._container_id is not None
        ids = await settle_user(
            self._helpers.run, self._engine_or_fail(), self._container_id, user=self._user,
            cwd=self._cwd, image=self._config.image, covered=self._workspace.covers(self._cwd),
            given=self._workdir_given, root_ok=self._root_opt_in, audit=self._audit,
            image_id=self._image_id, mounts=self._mounts_key)
        self._identity = Identity(ids.uid, ids.gid, ids.user_name, ids.group_name)
        if not ids.home_writable and "HOME" not in self._env:
            # Not in a live mount: dotfiles (git's config, caches) would land in the user's
            # checkout.
            self._env["HOME"] = "/tmp" if self._workspace.covers(self._cwd) else self._cwd

    async def _give_workdir(self, extra: list[Extra]) -> bool:
        """Before start, hand the working dir to a numeric non-root user (see `_workdir`);
        say whether the ``extra`` files were written (in its PUT)."""
        cwd = posixpath.normpath(self._cwd or "/")
        if self._config.security.read_only_root or self._workspace.covers(cwd):
            return False  # a read-only root's tmpfs gets its owner as options
        assert self._container_id is not None
        done = await give_workdir_before_start(
            self._engine_or_fail(), self._container_id, cwd, self._user, image_id=self._image_id,
            mounts=self._mounts_key or "", extra=extra)
        self._workdir_given = done.dealt
        return done.wrote_extra

    def _engine_or_fail(self) -> Engine:
        assert self._engine is not None
        return self._engine

    # -- remove ----------------------------------------------------------------------------------

    async def remove(self) -> None:
        """Remove the container, its network and workspace; idempotent, and safe after a
        create that failed half-way (a container whose create answer was lost is found by
        its label)."""
        # The background work (the event watcher's stream) ends, and the host's views of the
        # container close, while the engine removes it: awaited before the client closes.
        # What that close raised stops none of the removals; `ended.check` raises it last.
        finisher = self._finisher
        errors: list[str] = []
        closing = self._docker if self._owns_docker else None
        async with self._background.ending(
                finisher.close if finisher is not None else lambda: None) as ended:
            if self._engine is not None and self._engine.client_closed():
                # An earlier cleanup that failed closed our client, or the caller closed
                # theirs under us: remove through a new client to the same engine (shared
                # by the network's Engine, which is this same object).
                self._engine.docker = closing = client_like(self._engine.docker)
                if self._owns_docker:
                    self._docker = closing
            target = None
            if self._engine is not None and self._created_resources:
                target = self._container_id or await find_own_container(self._engine, self.id,
                                                                        errors)
            if self._engine is not None and target is not None:
                # Tearing down a gVisor sandbox took 30-35 s under a loaded 2-core host (the
                # engine finished the removal later); runc takes well under a second.
                patience = GVISOR_CLEANUP_TIMEOUT if self._gvisor else DEFAULT_CLEANUP_TIMEOUT
                errors += await remove_container(self._engine, target, patience=patience,
                                                 paused=self._background.paused,
                                                 removed=self._stop_commands)
        # After the container: a network with an endpoint left cannot be removed.
        if self._network is not None:
            errors += await self._network.remove()
        errors += await self._workspace.remove(self._audit)
        if closing is not None:
            with contextlib.suppress(Exception):
                await closing.close()
            if self._owns_docker:
                self._docker = None
        ended.check(errors)

    # -- commands --------------------------------------------------------------------------------

    async def run_process(
        self, spec: ProcessSpec, *, on_stdout: OutputCallback | None = None,
        on_stderr: OutputCallback | None = None,
    ) -> CommandResult:
        """Run ``spec`` to its end; a non-zero exit, a signal or a timeout is a result."""
        engine, container_id = self._running()
        finisher, spec = self._finisher, self._root_env.spec(spec)
        assert finisher is not None
        async with open_exec(
            engine, container_id, spec, attach_stdin=spec.stdin is not None,
            on_stdout=on_stdout, on_stderr=on_stderr,
            finalize=finisher.finalizer_now() if finisher.ready else await finisher.finalizer(),
            gate=self._gate,
        ) as proc:
            # `_tracked`, spelled out: a generator-based context manager per command cost
            # more than these lines.
            self._live.add(proc)
            try:
                if not self._life.alive:
                    proc.container_stopped(self._life.not_running())
                return await proc.wait()
            finally:
                self._live.discard(proc)

    @contextlib.asynccontextmanager
    async def open_process(self, spec: ProcessSpec) -> AsyncIterator[ExecProcess]:
        """Start ``spec`` and yield its live handle; leaving the block kills it if it runs."""
        engine, container_id = self._running()
        assert self._finisher is not None
        async with open_exec(engine, container_id, self._root_env.spec(spec),
                             attach_stdin=True, iterate=True,
                             finalize=await self._finisher.finalizer(),
                             gate=self._gate) as proc:
            with self._tracked(proc):
                yield proc

    def session_fifo(self) -> tuple[FifoDir, str] | None:
        """Where sessions may take FIFOs (`sandbox._session_fifo`): host dir, path inside."""
        return None if self._fifo is None else (self._fifo, FIFO_TARGET)

    async def kill_marked(self, entry: str, shell: int = 0, since: int = 0,
                          spare: tuple[str, ...] = ()) -> bool | None:
        """SIGKILL from the host what holds ``entry`` (a session's command marker), all below,
        the subshells up to ``shell`` and its children since ``since`` (`_backend`): True when
        none is left, None where the SDK cannot reach the container's cgroup (the session then
        sweeps from inside)."""
        engine, container_id = self._running()
        return await kill_marked(engine, container_id, entry, self._gate, shell, since, spare)

    async def command_finalizer(self) -> Finalizer:  # usage and OOM for a session's results
        return await cast(ResultFinisher, self._finisher).finalizer()

    def egress_stats(self) -> EgressStats:
        """What the sandbox's egress proxy decided so far (``enforced=False`` without one)."""
        return self._network.egress_stats() if self._network is not None else EgressStats()

    def _helper(self, what: str, *, rate: float | None = None,
                max_time: float | None = None) -> HelperRunner:
        self._life.require_running()
        assert self._helpers is not None
        return self._helpers.named(what, rate=rate, max_time=max_time)

    async def published_port(self, container_port: int, protocol: str = "tcp") -> int:
        """Return the host port a PortMapping published (the engine's pick when host_port=0)."""
        engine, container_id = self._running()
        return await published_port(engine, container_id, container_port, protocol)

    async def get_resource_usage(self) -> ResourceUsage:
        """Return the latest sample at once; take one only if none exists yet."""
        engine, container_id = self._running()
        sampler = self._background.sampler
        if sampler is None:
            sampler = self._background.sampler = StatsSampler(
                engine, container_id, interval=1.0,
                host_mem=self._facts.mem_total if self._facts else 0)
        if await sampler.demand():  # the counts were read just now: a sample with them
            return await sampler.sample_now()
        return sampler.latest or await sampler.sample_now()

    def usage_history(self) -> list[ResourceUsage]:
        """The samples kept so far (the last 600), oldest first."""
        sampler = self._background.sampler
        if sampler is None:
            return []
        sampler.want()
        return sampler.history()

    def _platform(self, os_name: str) -> str:
        arch = self._config.architecture or (self._facts.architecture if self._facts else "")
        return f"{os_name or 'linux'}/{arch}" if arch else "linux"

    async def get_info(self) -> SandboxInfo:
        """Describe the sandbox as the engine sees it now."""
        data: dict[str, Any] = {}
        if self._engine is not None and self._container_id and \
                self._life.status is not SandboxStatus.DESTROYED:
            with contextlib.suppress(SandboxError):
                data = await self._engine.query_json(
                    "inspect the sandbox", f"containers/{self._container_id}/json")
        view = container_view(data)
        allocated = ResourceLimits(
            cpu_limit=view.cpu_limit, memory_limit=view.memory_limit,
            memory_request=view.memory_request, process_limit=view.process_limit,
        ) if view.cpu_limit is not None else self._config.resources
        life = self._life
        return SandboxInfo(
            id=self.id, name=self._name, type=self._config.type, status=life.status,
            created_at=view.created_at or self._created_at,
            started_at=view.started_at or self._started_at,
            runtime=self._config.runtime if view.runtime is None else view.runtime,
            image=self._config.image, platform=self._platform(view.os),
            ip_address=view.ip_address, mac_address=view.mac_address, hostname=view.hostname,
            allocated_resources=allocated, config=self._config, labels=view.labels,
            annotations=dict(self._config.annotations), status_reason=life.reason,
            exit_code=life.exit_code, oom_killed=life.oom_killed,
        )
