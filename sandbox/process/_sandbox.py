"""ProcessBackend: a sandbox of namespaces held by one bubblewrap process, no engine.

``create`` starts ``bwrap`` with every namespace unshared (`_bwrap`, from the plan in
`_plan`) running a keep-alive shell, then has the fork server make the sandbox's zygote
(`_spawner`, `_forkserver`), which every command (`_exec`) is spawned from, so commands share
the sandbox's filesystem, processes, IPC and network like execs in one container. Measured
here: a bwrap per command was as fast, but cannot share a network or IPC namespace, and a
tmpfs /tmp would be per command (README, "Backends").
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import anyio
import anyio.lowlevel
import attrs

from .._backend import ProcessSpec
from .._backend_base import BackendBase
from .._constants import LABEL_SANDBOX_ID
from .._errors import CleanupIncomplete, CommandStartFailed, SandboxInitFailed
from .._helper_files import HelperFiles
from .._lifecycle import Lifecycle
from .._models import (
    CommandResult,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SandboxStatus,
)
from .._owner import owner_labels
from .._policy import seconds
from .._protocol import OutputCallback
from .._supervisor import Supervisor
from .._workspace import Workspace
from . import _seccomp, _spares, _usage
from ._bwrap import bwrap_argv, find_bwrap, home_of, lookup_in, mount_points, prepare_state
from ._cgroup import SandboxCgroup, available, renames
from ._exec import Entry, SandboxProcess, open_command, reap, start_command
from ._helpers import HelperRunner, helper_runner
from ._inroot import missing, open_in_root
from ._overlay import overlay_options, overlay_problem, prepare_overlay
from ._plan import ProcessPlan, plan_sandbox
from ._repository import RepoBind, prepare_repository
from ._rootfs import Rootfs, resolve_rootfs
from ._spawner import RemoteProcess, SandboxSpawner, readable
from ._state import new_state, remove_state, write_owner
from ._tree import sweep

#: The host user the sandbox runs as when the SDK runs as root (never host root itself).
HOST_NOBODY = (65534, 65534)
#: As root, the holder (bwrap's pid 1 and the keep-alive) runs as another host id, mapped to
#: the same id inside: sandbox code then can neither signal, trace nor write its memory, so
#: it needs no seccomp filter of its own (loading one cost ~3 ms of every create here).
HOST_HOLDER = 65533


class ProcessBackend(BackendBase, HelperFiles):
    """The process (bubblewrap) implementation of `Backend`; use it through `Sandbox`."""

    def __init__(self, config: SandboxConfig | None = None, *,
                 on_sample: Callable[[ResourceUsage], object] | None = None) -> None:
        super().__init__(config)
        self._base_env: dict[str, str] = {}
        self._plan: ProcessPlan | None = None
        self._state: Path | None = None
        self._cgroup: SandboxCgroup | None = None
        self._accounting = _usage.CommandAccounting(None, per_command=False)
        self._holder: RemoteProcess | None = None
        self._root_fd = -1
        self._init_pid = 0
        self._pid_ns = ""
        self._entry: Entry | None = None
        self._zygote: SandboxSpawner | None = None
        self._removing = False
        self._live: set[SandboxProcess] = set()
        self._supervisor = Supervisor(self.id, self._failed)
        self._sampler = _usage.Sampler(self)
        self._on_sample = on_sample
        self._workspace = Workspace(None)

    # -- state -----------------------------------------------------------------------------

    @property
    def cgroup(self) -> SandboxCgroup | None:
        """The sandbox's cgroup, when it has one (limits asked and this process may)."""
        return self._cgroup

    @property
    def limits(self) -> dict[str, str]:
        """Per defaulted limit (``memory_limit``, ``process_limit``, ``cpu_limit``,
        ``file_limit``), what holds it in this sandbox: its cgroup, an rlimit, or nothing
        (only when ``resources.allow_unbounded`` accepts that); {} before create."""
        return dict(self._plan.limits) if self._plan is not None else {}

    @property
    def init_pid(self) -> int:
        """Host pid of the sandbox's pid 1 (bwrap), once created."""
        return self._init_pid

    # -- create ----------------------------------------------------------------------------

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        """Start the holder and move ``lifecycle`` to RUNNING; on failure `Sandbox` removes."""
        cfg = self.begin_create(lifecycle, config, environment)
        if cfg.type != "process":
            raise SandboxInitFailed(f"sandbox type {cfg.type!r} given to the process backend")
        bwrap = find_bwrap()
        rootfs = await resolve_rootfs(cfg.image)
        root_user = os.getuid() == 0
        try:
            plan = self._plan = plan_sandbox(cfg, image_user=rootfs.user,
                                             lookup=lookup_in(rootfs.path),
                                             cgroup_problem=available(),
                                             overlay_problem="" if cfg.security.read_only_root
                                             else overlay_problem(),
                                             seccomp_problem=_seccomp.problem())
        except SandboxInitFailed as exc:
            self._audit.refused(exc.message.split(":", 1)[0], "initialize", exc)
            raise
        for field in plan.unbounded:
            self._audit.opt_in("resources.allow_unbounded", f"no {field} (nothing here can "
                               "enforce it)")
        self._audit.resources(dict(plan.limits))
        self._user = f"{plan.uid}:{plan.gid}"
        self._cwd = plan.working_dir
        home = home_of(rootfs.path, plan.uid)
        self._base_env = {**rootfs.env, "HOME": home or plan.working_dir, **plan.env}
        self._workspace = Workspace(cfg.repository)  # owned first: remove() undoes a failure
        self._life.advance(SandboxStatus.STARTING)
        launch = Launch(bwrap=bwrap, rootfs=rootfs, plan=plan, home=home, root_user=root_user)
        # A spare is only for what it was made for: no repository (bound per sandbox), and
        # a cgroup that can take this sandbox's name (v1; v2 renames no cgroup).
        key = launch.key() if cfg.repository is None and (
            self._cgroup_renames() or plan.cgroup is None) else None
        spare = await _spares.take(key) if key is not None else None
        assert spare is None or isinstance(spare, ProcessBackend)
        if spare is None or not await self._take_over(spare):
            if spare is not None:
                with anyio.CancelScope(shield=True):
                    await spare.remove()
            repo = await prepare_repository(self._workspace,
                                            host_user=":".join(map(str, HOST_NOBODY))
                                            if root_user else "")
            await self._launch(launch, repo)
        if key is not None:  # the next create like this one takes a sandbox made ahead
            _spares.offer(key, functools.partial(_make_spare, cfg, launch))
        self._accounting = _usage.CommandAccounting(self._cgroup, per_command=any(
            getattr(cfg.resources, f) for f in ("cpu_limit", "cpu_request", "memory_limit",
                                                "memory_request", "process_limit")))
        assert self._zygote is not None and self._plan is not None
        self._entry = Entry(spawner=self._zygote, rlimits=plan.rlimits)
        self._created_at = datetime.now(UTC)
        self._life.advance(SandboxStatus.RUNNING)
        self._env = {**await self._workspace.populate(
            self._helper("set up the repository"), sandbox_user=self._user), **self._env}
        work = [("the holder watcher", self._watch_holder)]
        wall = seconds(cfg.resources.wall_time_limit)
        if wall is not None:
            work.append(("the wall clock", lambda: self._wall_clock(wall)))
        self._supervisor.start(work)
        interval = cfg.stats_interval.total_seconds()
        if interval > 0:  # at least 1 s apart, as on Docker; one sampler for all sandboxes
            self._sampler.start(max(interval, 1.0), self._on_sample)

    async def _launch(self, launch: Launch, repo: RepoBind | None) -> None:
        """Make the sandbox named by this backend's id: its state directory, cgroup and
        overlay, its holder (bwrap) up and ready, and its zygote sent in. Whatever it made is
        the backend's already (`remove` undoes a failure)."""
        plan, rootfs, home, root_user = launch.plan, launch.rootfs, launch.home, launch.root_user
        self._plan = plan
        await anyio.lowlevel.checkpoint()  # see below: the plan was CPU work too
        self._state = state = new_state(self.id, {**owner_labels(), LABEL_SANDBOX_ID: self.id})
        prepare_state(state, HOST_NOBODY if root_user else None)
        cgroup_procs: list[str] = []
        if plan.cgroup is not None:  # the default limits, or the config's
            self._cgroup = SandboxCgroup(self.id)
            self._cgroup.create()
            self._cgroup.apply(plan.cgroup)
            cgroup_procs = self._cgroup.procs_files
        # Checkpoints between the steps (each ~0.5-1 ms of CPU here, ~2.5 ms in all without
        # a suspension): another sandbox's command waiting on the loop runs in between (a
        # spare or a pool's refill made during a user's command). What is made so far is
        # this backend's, so a cancellation here is undone by `remove` as any failure.
        await anyio.lowlevel.checkpoint()
        program = await _seccomp.compiled(plan.seccomp)
        merged = prepare_overlay(state, rootfs.path, mount_points(plan)) \
            if plan.writable_root else None
        await anyio.lowlevel.checkpoint()
        pipes = [os.pipe() for _ in range(4)]  # ready, block, info, stderr
        owned = [fd for pair in pipes for fd in pair]  # closed at the end, unless handed over
        try:
            # The holder's descriptors: stdio, then 3 (block), 4 (info), 5 (filter) for bwrap.
            child_fds = [os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), pipes[0][1],
                         pipes[3][1], pipes[1][0], pipes[2][1]]
            owned.append(child_fds[0])
            holder = None
            if root_user:
                holder = HOST_HOLDER if plan.uid != HOST_HOLDER else HOST_HOLDER - 1
            elif program:  # the holder is the sandbox user's: it needs the filter too
                child_fds.append(_seccomp.memfd(program))
                owned.append(child_fds[-1])
            spec = {"argv": bwrap_argv(launch.bwrap, plan, rootfs.path, state, home=home,
                                       userns_fds=(3, 4), overlay=merged, repo=repo,
                                       holder=holder,
                                       seccomp_fd=5 if len(child_fds) > 5 else -1),
                    # The holder (bwrap's pid 1, the keep-alive: the SDK's) stays out of the
                    # cgroup: its v1 moves, contending with the zygote's, cost ~18 ms here.
                    "env": [f"PATH={rootfs.env['PATH']}"], "cgroup_procs": [],
                    "rlimits": plan.rlimits, "ids": [HOST_HOLDER] * 2 if root_user else None,
                    "overlay": {"merged": str(merged), "options": overlay_options(
                        state, rootfs.path)} if merged is not None else None}
            # The fork server starts the holder; the zygote loads the filter while bwrap starts.
            self._zygote = SandboxSpawner(program, spec, child_fds, cgroup_procs)
            for fd in child_fds:  # the server has its copies
                os.close(fd)
                owned.remove(fd)
            owned.remove(pipes[3][0])
            self._holder = await self._zygote.holder(pipes[3][0])  # takes it over
            # The sandbox user is us (unprivileged), or host nobody beside the holder (root).
            ids = [(plan.uid, os.getuid()), (plan.gid, os.getgid())] if holder is None else \
                [(plan.uid, HOST_NOBODY[0]), (plan.gid, HOST_NOBODY[1])]
            await anyio.to_thread.run_sync(_map_user, pipes[2][0], pipes[1][1], ids, holder)
            ready = await _read_ready(pipes[0][0])
        finally:
            for fd in owned:
                os.close(fd)
        if not ready:
            err = b""
            with anyio.move_on_after(5):
                got = await self._holder.output.read()
                err = got[1] if got is not None else b""
            raise SandboxInitFailed(f"sandbox {self._name} could not be started by bubblewrap",
                                    details=err.decode(errors="replace").strip()
                                    or "bwrap ended before the sandbox was ready")
        self._init_pid = _init_pid(self._holder.pid)
        self._root_fd = os.open(f"/proc/{self._init_pid}/root",
                                os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        self._pid_ns = os.readlink(f"/proc/{self._init_pid}/ns/pid")
        # Unprivileged, the zygote keeps its own uid, which the map makes the sandbox user.
        self._zygote.join(self._init_pid, self._pid_ns, [
            "user", "mnt", "pid", "ipc", "uts", "cgroup",
            *([] if plan.host_network else ["net"])], (),  # in its cgroup already
            (plan.uid, plan.gid) if root_user else None, plan.sandbox_rlimits)

    @staticmethod
    def _cgroup_renames() -> bool:
        return renames()

    async def _take_over(self, spare: ProcessBackend) -> bool:
        """Make ``spare`` (made ahead for this config, never used) this sandbox: its state
        directory and cgroup renamed to this id, its holder, zygote and root ours. False
        (nothing moved: the caller removes it) when a rename failed.

        The renames run in a worker thread: a cgroup v1 rename waits in the kernel (0.1-0.2 ms
        each on a quiet host, up to ~1 ms under load, six per hand-over), which on the event
        loop stalled every other sandbox's command meanwhile (a pool's refill handing a spare
        over during the next user's first command). Not cancellable halfway: the thread runs to
        its end (shielded), and what it moved is taken over before any cancellation lands.
        """
        assert spare._state is not None and spare._zygote is not None
        state = spare._state.with_name(self.id)
        pairs = [(spare._state, state)]
        cgroup = SandboxCgroup(self.id) if spare._cgroup is not None else None
        if spare._cgroup is not None and cgroup is not None:
            pairs += zip(spare._cgroup.dirs, cgroup.dirs, strict=True)
        if not await anyio.to_thread.run_sync(_rename_all, pairs, state, self.id):
            return False
        self._state, self._cgroup = state, cgroup
        self._holder, self._zygote = spare._holder, spare._zygote
        self._init_pid, self._root_fd, self._pid_ns = spare._init_pid, spare._root_fd, \
            spare._pid_ns
        if cgroup is not None:  # a zygote made again joins the cgroup by its new name
            self._zygote.moved(cgroup.procs_files)
        spare._state = spare._cgroup = spare._holder = spare._zygote = None
        spare._root_fd = -1
        return True

    def alive(self) -> bool:
        """Whether the holder (bwrap's pid 1) still runs and the zygote is not known to
        have failed (a spare's check before a hand-over)."""
        return self._holder is not None and self._holder.alive() and \
            self._zygote is not None and not self._zygote.failed

    def _failed(self, name: str, exc: Exception) -> None:
        self._life.fail(f"{name} failed: {exc}", error=exc)

    async def _watch_holder(self) -> None:
        assert self._holder is not None
        code = await self._holder.wait()
        if not self._removing:
            oom = bool(self._cgroup and self._cgroup.oom_kills())
            self._life.fail(f"the sandbox's main process ended (exit code {code})",
                            exit_code=code, oom_killed=oom)

    async def _wall_clock(self, limit: float) -> None:
        await anyio.sleep(limit)
        self._life.fail(f"TimeoutExceeded: wall_time_limit of {limit:g} s reached")
        self._audit.limit("wall_time", self._life.reason)
        await self._stop_holder()

    async def _stop_holder(self) -> None:
        holder = self._holder
        if holder is not None and holder.returncode is None:
            # The sandbox's pid 1 first: its pid namespace dies with it, and the outer bwrap
            # (our child, so that pid cannot be reused yet) reaps it and exits.
            with contextlib.suppress(OSError):
                if self._init_pid and \
                        os.readlink(f"/proc/{self._init_pid}/ns/pid") == self._pid_ns:
                    os.kill(self._init_pid, signal.SIGKILL)
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await holder.wait()
        if holder is not None and holder.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                holder.kill()  # bwrap's --die-with-parent then kills the sandbox's pid 1
            with anyio.CancelScope(shield=True), anyio.move_on_after(10):
                await holder.wait()

    # -- remove ----------------------------------------------------------------------------

    async def health(self) -> str:
        """"" while the holder (bwrap's pid 1) lives, else why commands cannot run; asked of
        its pidfd, not of cached state."""
        if self._holder is None or not self._holder.alive():
            return "its holder (bwrap) has ended"
        return ""

    async def remove(self) -> None:
        """Kill every process, remove the cgroup and the state directory; idempotent."""
        self._removing = True
        self._sampler.stop()
        await self._supervisor.aclose()
        for proc in list(self._live):
            with contextlib.suppress(Exception):
                await proc.aclose()
        await self._stop_holder()
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        errors: list[str] = []
        if self._state is not None:
            errors, gone = await anyio.to_thread.run_sync(_remove_state, self._state,
                                                          limiter=_removers())
            if gone:
                self._state = None  # gone: a retried cleanup has nothing to redo there
        elif self._cgroup is not None:
            errors = await anyio.to_thread.run_sync(self._cgroup.remove, limiter=_removers())
        errors += await self._workspace.remove(self._audit)
        if errors:
            left = [str(self._state)] if self._state is not None else []
            raise CleanupIncomplete(
                "cleanup could not remove everything", left=[*left, *self._workspace.left],
                details="; ".join(errors) + "; cleanup() again retries, and `python -m "
                "sandbox gc` removes what is left once this process has exited")

    # -- commands --------------------------------------------------------------------------

    def _workdir(self, spec: ProcessSpec) -> int:
        """Check that ``spec`` may start here; its working directory, opened in the root."""
        self._life.require_running()
        assert self._plan is not None and self._entry is not None
        if spec.user and spec.user != self._user:
            raise CommandStartFailed(
                f"cannot start {spec.argv[0]!r} as user {spec.user!r}: a process sandbox runs "
                f"every command as its own user ({self._user})",
                details="leave Command.user empty, or use type='docker'")
        try:
            return open_in_root(self._root_fd, spec.workdir)
        except OSError as exc:
            what = "does not exist" if missing(exc) else f"cannot be entered ({exc.strerror})"
            raise CommandStartFailed(f"cannot start {spec.argv[0]!r}: its working directory "
                                     f"{spec.workdir!r} {what} in the sandbox") from exc

    @contextlib.asynccontextmanager
    async def _open(self, spec: ProcessSpec, *, iterate: bool,
                    on_stdout: OutputCallback | None = None,
                    on_stderr: OutputCallback | None = None) -> AsyncIterator[SandboxProcess]:
        wd = self._workdir(spec)
        assert self._entry is not None
        async with open_command(
            spec, entry=self._entry, env={**self._base_env, **spec.env}, workdir_fd=wd,
            pid_ns=self._pid_ns, iterate=iterate, on_stdout=on_stdout, on_stderr=on_stderr,
        ) as proc:
            self._live.add(proc)
            try:
                yield proc
            finally:
                self._live.discard(proc)

    async def kill_marked(self, entry: str, shell: int = 0, since: int = 0,
                          spare: tuple[str, ...] = ()) -> bool | None:
        """SIGKILL from the host every process of the sandbox whose environment holds
        ``entry`` (a session's command marker), the subshells between those and the session's
        ``shell`` (its pid in the sandbox) and the shell's children started since the tick
        ``since`` but ``spare``'s (`.._below_shell`): True when none is left. Needs no process
        in the sandbox, so a fork bomb at its process limit cannot starve it."""
        self._life.require_running()
        gone = False
        with anyio.CancelScope(shield=True):
            gone = await anyio.to_thread.run_sync(
                lambda: sweep(0, "", self._pid_ns, signal.SIGKILL, entry=entry, shell=shell,
                              since=since, spare=spare))
        return gone

    async def run_process(self, spec: ProcessSpec, *, on_stdout: OutputCallback | None = None,
                          on_stderr: OutputCallback | None = None) -> CommandResult:
        """Run ``spec`` to its end; exit codes, signals and timeouts are results, with what
        the sandbox's cgroup says about it (`_usage.CommandAccounting`)."""
        before = self._accounting.before()
        # `_open` without its two generator-based context managers (once per command).
        wd = self._workdir(spec)
        assert self._entry is not None
        proc = await start_command(
            spec, entry=self._entry, env={**self._base_env, **spec.env}, workdir_fd=wd,
            pid_ns=self._pid_ns, iterate=False, on_stdout=on_stdout, on_stderr=on_stderr)
        try:
            async with proc.lifetime(spec.stdin):
                self._live.add(proc)
                try:
                    result = await proc.wait()
                finally:
                    self._live.discard(proc)
        finally:
            await reap(proc)
        return self._accounting.after(result, before)

    @contextlib.asynccontextmanager
    async def open_process(self, spec: ProcessSpec) -> AsyncIterator[SandboxProcess]:
        """Start ``spec`` and yield its handle; leaving kills it if it still runs."""
        async with self._open(spec, iterate=True) as proc:
            yield proc

    def _helper(self, what: str, *, rate: float | None = None,
                max_time: float | None = None) -> HelperRunner:
        self._life.require_running()

        def opener(spec: ProcessSpec, *, on_stdout: OutputCallback | None
                   ) -> contextlib.AbstractAsyncContextManager[SandboxProcess]:
            return self._open(spec, iterate=False, on_stdout=on_stdout)
        return helper_runner(opener, what, rate=rate, max_time=max_time)

    # -- usage and info --------------------------------------------------------------------

    async def get_resource_usage(self) -> ResourceUsage:
        """A sample taken now from the sandbox's cgroup (or its processes)."""
        self._life.require_running()
        return self._sampler.sample()

    def usage_history(self) -> list[ResourceUsage]:
        return self._sampler.history()

    async def get_info(self) -> SandboxInfo:
        life = self._life
        return SandboxInfo(
            id=self.id, name=self._name, type="process", status=life.status,
            created_at=self._created_at, started_at=self._created_at, runtime="bwrap",
            image=self._config.image, platform="linux", hostname=self._plan.hostname
            if self._plan else "", allocated_resources=self._config.resources,
            config=self._config, labels=dict(self._config.labels),
            annotations=dict(self._config.annotations), status_reason=life.reason,
            exit_code=life.exit_code, oom_killed=life.oom_killed)


#: Worker threads removing process sandboxes' cgroups and state directories at once. Their
#: work is short system calls, each giving up the GIL and taking it back: 300 sandboxes closed
#: at once on 2 cores took less SDK CPU with 8 such threads than with anyio's default 40
#: (0.58-0.69 s against 0.83-0.90 s, 150 threads 0.96-1.6 s), and no longer.
REMOVERS = 8
_removers_var: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "sandbox_process_removers")


def _removers() -> anyio.CapacityLimiter:
    """This event loop's limiter for cleanup's worker threads (made on first use)."""
    try:
        return _removers_var.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(REMOVERS)
        _removers_var.set(limiter)
        return limiter


def _remove_state(state: Path) -> tuple[list[str], bool]:
    """`remove_state`, and whether ``state`` is gone, asked in the same worker thread: a stat
    on the event loop waits for the GIL behind every other cleanup's thread (0.66 ms each
    while 300 sandboxes closed, in series)."""
    return remove_state(state), not state.exists()


@attrs.frozen(kw_only=True)
class Launch:
    """What a create makes a sandbox from, once its config is planned (see `key`)."""

    bwrap: str
    rootfs: Rootfs
    plan: ProcessPlan
    home: str
    root_user: bool

    def key(self) -> tuple[object, ...]:
        """Everything that shapes the sandbox `_launch` makes: a spare made from an equal
        key is the sandbox this create would make."""
        return (self.bwrap, str(self.rootfs.path), self.rootfs.image_id, self.home,
                self.root_user, repr(self.plan))


async def _make_spare(cfg: SandboxConfig, launch: Launch) -> ProcessBackend:
    """A sandbox made ahead for the next create like ``cfg`` (its own id, never used), with
    its zygote in it: nothing of it is made after the hand-over renamed its cgroup."""
    spare = ProcessBackend(cfg)
    try:
        await spare._launch(launch, None)
        assert spare._zygote is not None
        await spare._zygote.joined()
    except BaseException:
        with anyio.CancelScope(shield=True):
            await spare.remove()
        raise
    return spare


def _rename_all(pairs: list[tuple[Path, Path]], state: Path, sandbox_id: str) -> bool:
    """Rename each (old, new) and record this process as the owner of ``sandbox_id`` in
    ``state``; on any failure undo the renames done and return False (see
    `ProcessBackend._take_over`)."""
    moved: list[tuple[Path, Path]] = []
    try:
        for old, new in pairs:
            if os.path.lexists(new):
                raise FileExistsError(errno.EEXIST, "exists", str(new))
            os.rename(old, new)
            moved.append((old, new))
        write_owner(state, sandbox_id, {**owner_labels(), LABEL_SANDBOX_ID: sandbox_id})
    except OSError:
        for old, new in reversed(moved):
            with contextlib.suppress(OSError):
                os.rename(new, old)
        return False
    return True


def _map_user(info_fd: int, block_fd: int, ids: list[tuple[int, int]],
              holder: int | None) -> None:
    """Map the sandbox's (uid, host uid) and (gid, host gid) in bwrap's new user namespace
    (and the holder's id to the same host id), then let it go on (``--userns-block-fd``): the
    one user namespace then owns all the others."""
    data = b""
    while b"}" not in data:
        chunk = os.read(info_fd, 4096)
        if not chunk:
            return  # bwrap failed before the namespace existed; its stderr says why
        data += chunk
    pid = int(json.loads(data[: data.index(b"}") + 1])["child-pid"])
    extra = f"{holder} {HOST_HOLDER} 1\n" if holder is not None else ""
    Path(f"/proc/{pid}/uid_map").write_text(f"{ids[0][0]} {ids[0][1]} 1\n{extra}")
    Path(f"/proc/{pid}/setgroups").write_text("deny")
    Path(f"/proc/{pid}/gid_map").write_text(f"{ids[1][0]} {ids[1][1]} 1\n{extra}")
    os.write(block_fd, b"1")


async def _read_ready(fd: int) -> bool:
    """Wait until the keep-alive says it runs (True) or bwrap gave up (EOF: False), on the
    event loop (a worker thread's hand-off cost ~0.3 ms of a start)."""
    await readable(fd)
    return os.read(fd, 16) == b"ready"


def _init_pid(bwrap_pid: int) -> int:
    """The sandbox's pid 1: the child of the holder (the outer bwrap)."""
    pid = bwrap_pid
    for _ in range(3):
        try:
            kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            break
        if not kids:
            break
        ns = os.readlink(f"/proc/{pid}/ns/pid")
        child = int(kids[0])
        if os.readlink(f"/proc/{child}/ns/pid") != ns:
            return child
        pid = child
    raise SandboxInitFailed("could not find the sandbox's first process",
                            details=f"below host pid {bwrap_pid}")
