"""KubernetesBackend: one Pod (and one NetworkPolicy) per sandbox, driven through the API server.

The Pod is planned by `_plan` (every field mapped or refused), its commands run by `_exec`
over the exec websocket, and files move by the same exec'd POSIX tools as on Docker
(``sandbox._helper_files``, which only needs a runner), so a hostile tar or listing meets the
same checks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio

from .. import _constants, _helper_files
from .._backend import ProcessSpec
from .._backend_base import BackendBase
from .._constants import LABEL_MANAGED_BY, LABEL_MANAGED_BY_VALUE, LABEL_SANDBOX_ID
from .._deadline import HelperDeadline
from .._errors import (
    CommandStartFailed,
    ConfigError,
    LimitNotEnforceable,
    SandboxAlreadyExists,
    SandboxError,
    SandboxInitFailed,
    SandboxNotFound,
    SandboxNotRunning,
)
from .._lifecycle import Lifecycle
from .._models import (
    CommandResult,
    FileInfo,
    ResourceLimits,
    ResourceUsage,
    SandboxConfig,
    SandboxInfo,
    SandboxStatus,
)
from .._owner import owner_labels
from .._places import release
from .._protocol import OutputCallback
from .._shield import finish_despite_cancel
from .._wire_time import engine_time
from . import _exec
from ._gateway import (
    Cluster,
    ExecSocket,
    KubeApiError,
    KubeConflict,
    KubeNotFound,
    delete_options,
)
from ._gc import hold_place
from ._plan import CONTAINER, PodPlan, plan_pod

log = logging.getLogger("sandbox.lifecycle")

#: Waiting reasons that will not resolve by waiting longer.
_FATAL_WAITING = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName",
                            "CreateContainerConfigError", "CreateContainerError",
                            "ErrImageNeverPull", "RunContainerError", "CrashLoopBackOff"})
#: The probe run once the Pod runs: learns the exec protocol, whether HOME is writable and,
#: when a tmpfs size was asked for ("$1" = sizes), the tmpfs mounts as the node made them.
_PROBE_SH = ('if [ -n "$HOME" ] && [ -w "$HOME" ]; then echo home; else echo nohome; fi\n'
             '[ "$1" = sizes ] || exit 0\n'
             'while read -r _ mnt fs opts _; do [ "$fs" = tmpfs ] && echo "$mnt $opts"; done '
             '< /proc/mounts; exit 0')
_TMPFS_SIZE = re.compile(r"size=([0-9]{1,20})([kmg]?)")
_QUANTITY = re.compile(r"([0-9.]+)([a-zA-Z]*)")
#: How long a refused exec waits for the API server to show that the Pod ended.
ENDED_PATIENCE = 3.0
_SUFFIX = {"": 1, "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}


def quantity(text: str) -> float:
    """A Kubernetes quantity ("250m", "12345n", "64Mi") as a number; 0 if unreadable."""
    m = _QUANTITY.fullmatch(str(text).strip())
    if m is None or m.group(2) not in _SUFFIX:
        return 0.0
    try:
        return float(m.group(1)) * _SUFFIX[m.group(2)]
    except ValueError:
        return 0.0


def _sized_tmpfs(pod: Mapping[str, Any]) -> dict[str, int]:
    """Mount path -> bytes of every memory emptyDir with a sizeLimit in the planned Pod."""
    spec = pod.get("spec") or {}
    sized = {v["name"]: int(quantity(v["emptyDir"]["sizeLimit"]))
             for v in spec.get("volumes") or []
             if (v.get("emptyDir") or {}).get("medium") == "Memory"
             and v["emptyDir"].get("sizeLimit")}
    return {m["mountPath"]: sized[m["name"]] for c in spec.get("containers") or []
            for m in c.get("volumeMounts") or [] if m.get("name") in sized}


def _check_tmpfs_sizes(sizes: Mapping[str, int], mounts: Sequence[str]) -> None:
    """Refuse a tmpfs whose size the node did not apply (`LimitNotEnforceable`).

    Kubernetes before 1.22 (the SizeMemoryBackedVolumes feature, beta and on by default from
    1.22) mounts a memory emptyDir with the tmpfs default size (half the node's RAM) whatever
    its sizeLimit; the kubelet only evicts the Pod, up to its eviction period later, once the
    volume holds more. The lines come from the Pod before any command of the caller ran
    (its image's shell could only claim a size, never lift one).
    """
    seen: dict[str, int | None] = {}
    for line in mounts:
        path, _, opts = line.partition(" ")
        path = path.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
        m = _TMPFS_SIZE.search(opts)
        seen[path] = int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[
            m.group(2)] if m else None
    for path, want in sizes.items():
        got = seen.get(path)
        if got is None or got > want:
            raise LimitNotEnforceable(
                f"security.tmpfs_paths: the size of {path!r} ({want} bytes) is not enforced on "
                "this cluster: its kubelet mounted the memory emptyDir "
                + (f"with size {got} bytes" if got else "without a size"),
                details="Kubernetes before 1.22 ignores an emptyDir's sizeLimit for the tmpfs "
                        "size (feature gate SizeMemoryBackedVolumes): enable it on the "
                        "kubelets, or drop size= (the Pod's memory limit still bounds it)")


def _count(value: object) -> int:
    """A non-negative integer from a stats field (absent or malformed: 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(0, min(int(value), 1 << 62))


class KubernetesBackend(BackendBase):
    """A sandbox backed by one Pod; use it through `sandbox.Sandbox`.

    ``on_sample`` is called with each usage sample; samples are taken when asked for
    (`get_resource_usage`), from the metrics API (which itself refreshes about every 15 s),
    or without one from the node's summary API.
    """

    def __init__(self, config: SandboxConfig | None = None, *, kubeconfig: str | None = None,
                 context: str | None = None, in_cluster: bool | None = None,
                 namespace: str = "default", runtime_classes: Mapping[str, str] | None = None,
                 start_timeout: float = 300.0,
                 on_sample: Callable[[ResourceUsage], object] | None = None) -> None:
        super().__init__(config)
        if in_cluster is None:
            in_cluster = kubeconfig is None and not os.environ.get("KUBECONFIG") and \
                bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        self.kubeconfig, self.context, self.in_cluster = kubeconfig, context, in_cluster
        self.namespace = namespace
        self.runtime_classes = dict(runtime_classes or {})
        self.start_timeout = start_timeout
        self._on_sample = on_sample
        self._cluster: Cluster | None = None
        ns = quote(namespace)
        self._paths = {"Pod": f"/api/v1/namespaces/{ns}/pods",
                       "NetworkPolicy": f"/apis/networking.k8s.io/v1/namespaces/{ns}/"
                                        "networkpolicies"}
        self._attempted: set[str] = set()  # kinds whose create was sent
        self._made: dict[str, str] = {}  # kind -> uid of what the create made
        self._protocol = ""  # the exec subprotocol the server chose, once known
        self._plan: PodPlan | None = None
        self._pod: dict[str, Any] = {}
        self._samples: deque[ResourceUsage] = deque(maxlen=600)
        self._started = time.monotonic()
        self._place: str | None = None  # the token of the record held (`hold_place`)

    # -- state -------------------------------------------------------------------------------

    @property
    def pod_name(self) -> str:
        """The Pod's name (also the NetworkPolicy's)."""
        return self._name

    @property
    def exec_protocol(self) -> str:
        """The exec subprotocol the API server chose ("" before the first exec)."""
        return self._protocol

    def _cluster_or_raise(self) -> Cluster:
        self._life.require_running()
        assert self._cluster is not None
        return self._cluster

    # -- lifecycle ---------------------------------------------------------------------------

    async def create(self, lifecycle: Lifecycle, config: SandboxConfig | None = None, *,
                     environment: Mapping[str, str] | None = None) -> None:
        """Create the NetworkPolicy and the Pod, wait for it to run, moving ``lifecycle`` to
        RUNNING; on failure `Sandbox` calls `remove`."""
        self.begin_create(lifecycle, config, environment)
        await self._initialize()

    async def _initialize(self) -> None:
        cfg = self._config
        if cfg.type != "kubernetes":
            raise SandboxInitFailed(f"the Kubernetes backend got a config of type {cfg.type!r}",
                                    details="set SandboxConfig.type='kubernetes'")
        labels = {LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE, LABEL_SANDBOX_ID: self.id}
        try:
            # The owner (host, pid, start) as annotations: label values cannot hold a time.
            plan = plan_pod(cfg, name=self._name, namespace=self.namespace, labels=labels,
                            annotations=owner_labels(), runtime_classes=self.runtime_classes)
        except SandboxInitFailed as exc:
            # SecurityViolation is audited by Sandbox; a refusal here too: "field: why".
            self._audit.refused(exc.message.split(":", 1)[0], "initialize", exc)
            raise
        self._plan = plan
        self._user = plan.user
        for opt_in in plan.opt_ins:
            setting, _, granted = opt_in.partition(": ")
            self._audit.opt_in(setting, granted)
        self._cluster = cluster = await Cluster.connect(
            kubeconfig=self.kubeconfig, context=self.context, in_cluster=self.in_cluster)
        ns = self.namespace
        # Before anything exists there: an owner killed after its POST left a Pod only
        # `sandbox.gc` can find, and only by this record of where it is.
        # Held (not dropped by gc) until `remove` has deleted what this sandbox made.
        if self._place is None:
            self._place = hold_place(kubeconfig=self.kubeconfig, context=self.context,
                                     in_cluster=self.in_cluster, namespace=ns)

        async def make(kind: str, body: Mapping[str, Any]) -> dict[str, Any]:
            self._attempted.add(kind)
            try:
                doc = await cluster.call(f"create the sandbox's {kind}", "POST",
                                         self._paths[kind], body=body)
            except KubeConflict as exc:
                raise SandboxAlreadyExists(
                    f"a {kind} named {self._name!r} already exists in namespace {ns!r}",
                    details="choose another SandboxConfig.name, or leave it empty; the "
                            "existing one was not touched", cause=exc) from exc
            self._made[kind] = str((doc.get("metadata") or {}).get("uid") or "")
            return doc

        async def create() -> None:
            # The policy first: the Pod is never up without it.
            await make("NetworkPolicy", plan.policy)
            self._pod = await make("Pod", plan.pod)

        await finish_despite_cancel(create())
        self._created_at = datetime.now(UTC)
        self._life.advance(SandboxStatus.STARTING)
        await self._wait_running()
        self._started = time.monotonic()
        self._life.advance(SandboxStatus.RUNNING)
        sizes = _sized_tmpfs(plan.pod)
        try:
            probe = await self._run_internal(
                ["/bin/sh", "-c", _PROBE_SH, "probe", "sizes" if sizes else ""],
                what="probe the sandbox")
        except SandboxNotRunning as exc:  # e.g. a short wall_time_limit ran out meanwhile
            raise SandboxInitFailed(f"the sandbox Pod ended while starting: {exc.message}",
                                    cause=exc) from exc
        if not probe.success:
            raise SandboxInitFailed("the sandbox Pod runs, but a command in it failed",
                                    details=probe.error or probe.stderr[:2000])
        lines = probe.stdout.splitlines()
        if lines[:1] != ["home"] and "HOME" not in self._env:
            self._env["HOME"] = cfg.working_dir
        if sizes:
            _check_tmpfs_sizes(sizes, lines[1:])

    async def _wait_running(self) -> None:
        """Watch the Pod until it runs; fail fast on an image or config error.

        One watch (a long GET) instead of polling: at thousands of simultaneous starts,
        polling every Pod would be thousands of reads a second. A watch the server ends
        (timeout, a too old resourceVersion) is resumed after one GET.
        """
        assert self._cluster is not None
        cluster, pod = self._cluster, self._pod
        path = f"/api/v1/namespaces/{quote(self.namespace)}/pods"
        with anyio.move_on_after(self.start_timeout) as scope:
            while not self._started_ok(pod):
                version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
                query = [("fieldSelector", f"metadata.name={self._name}")]
                if version:
                    query.append(("resourceVersion", version))
                async with contextlib.aclosing(cluster.watch(
                        "watch the sandbox Pod start", path, query=query)) as events:
                    async for event in events:
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "DELETED":
                            raise SandboxInitFailed("the sandbox Pod was deleted while starting")
                        if kind in ("ADDED", "MODIFIED") and isinstance(obj, dict):
                            pod = self._pod = obj
                            if self._started_ok(pod):
                                return
                        elif kind == "ERROR":
                            break  # e.g. 410 Gone: start again from the current state
                pod = self._pod = await self._get_pod()
        if scope.cancelled_caught:
            status = pod.get("status") or {}
            reason = status.get("reason") or status.get("phase") or "no status"
            raise SandboxInitFailed(
                f"the sandbox Pod did not run within {self.start_timeout:g} s ({reason})",
                details="see `kubectl describe pod` for its events (scheduling, pulls)")

    def _started_ok(self, pod: Mapping[str, Any]) -> bool:
        """Whether the Pod's container runs; raise if it never will."""
        status = pod.get("status") or {}
        phase = status.get("phase", "")
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            waiting = state.get("waiting") or {}
            if waiting.get("reason") in _FATAL_WAITING:
                raise SandboxInitFailed(f"the sandbox Pod cannot start: {waiting['reason']}",
                                        details=str(waiting.get("message") or "")[:2000])
            if phase == "Running" and state.get("running") is not None:
                return True
        if phase in ("Failed", "Succeeded"):
            wall = self._config.resources.wall_time_limit.total_seconds()
            if status.get("reason") == "DeadlineExceeded" and wall > 0:
                # activeDeadlineSeconds counts from the node's acceptance, image pull and
                # container start included: a short limit can end before the Pod runs.
                raise SandboxInitFailed(
                    f"the sandbox Pod reached its wall_time_limit of {wall:g} s before it "
                    "started running", details="the limit counts from when the node accepted "
                    "the Pod (pull and start included): raise wall_time_limit")
            raise SandboxInitFailed(f"the sandbox Pod ended while starting ({phase})",
                                    details=str(status.get("message") or status.get("reason")
                                                or ""))
        return False

    async def _get_pod(self) -> dict[str, Any]:
        assert self._cluster is not None
        return await self._cluster.call("look at the sandbox Pod", "GET",
                                        f"/api/v1/namespaces/{self.namespace}/pods/{self._name}")

    async def health(self) -> str:
        """"" while the Pod runs, else why commands cannot run (asks the API server)."""
        if await self._pod_ended():
            return self._life.reason or "the Pod ended"
        return ""

    async def remove(self) -> None:
        """Delete the Pod and the NetworkPolicy this sandbox made (gone already is fine).

        Only what it made: by the uid the create answered with, or, when a create's answer
        never came, found by this sandbox's id label; never by name alone, which may be
        someone else's object (a name conflict is how that happens). Each delete carries the
        uid as precondition. Idempotent. The API server answers once the deletion is
        accepted; the kubelet then kills the Pod's processes (grace period 0).
        """
        cluster, self._cluster = self._cluster, None
        if cluster is None:
            return
        errors: list[str] = []
        try:
            for kind in ("Pod", "NetworkPolicy"):
                try:
                    await self._delete_own(cluster, kind)
                except SandboxError as exc:
                    errors.append(str(exc))
        finally:
            await cluster.close()
            # Whatever a failed delete left is listed by gc, which keeps the record for it.
            place, self._place = self._place, None
            if place is not None:
                release(place)
        if errors:
            raise SandboxError("cleanup could not remove everything", details="; ".join(errors))

    async def _delete_own(self, cluster: Cluster, kind: str) -> None:
        path = self._paths[kind]
        if kind in self._made:
            own = [(self._name, self._made[kind])]
        elif kind in self._attempted:
            found = await cluster.call(f"look for the sandbox's {kind}", "GET", path, query=[
                ("labelSelector", f"{LABEL_SANDBOX_ID}={self.id}")])
            own = [(str((o.get("metadata") or {}).get("name")),
                    str((o.get("metadata") or {}).get("uid"))) for o in found.get("items") or []]
        else:
            return
        for name, uid in own:
            if not uid:
                continue  # no uid, no proof it is ours
            try:
                await cluster.call(f"delete the sandbox's {kind}", "DELETE", f"{path}/{name}",
                                   body=delete_options(uid))
            except KubeNotFound:
                pass  # gone already
            except KubeConflict:
                pass  # the name now belongs to another object: not ours to delete

    # -- commands ----------------------------------------------------------------------------

    def _check_user(self, spec: ProcessSpec) -> None:
        if spec.user and spec.user != self._user:
            raise CommandStartFailed(
                f"cannot run {spec.argv[0]!r} as user {spec.user!r}: Kubernetes exec runs every "
                f"command as the Pod's user {self._user!r}",
                details="leave Command.user empty and allow_write=True on this backend; set "
                        "security.run_as_user/run_as_group for the whole sandbox instead")

    async def _open_socket(self, argv: Sequence[str], stdin: bool) -> ExecSocket:
        cluster = self._cluster_or_raise()
        try:
            sock = await cluster.exec(self.namespace, self._name, CONTAINER, argv, stdin=stdin)
        except KubeNotFound as exc:
            self._life.fail("the Pod is gone", gone=True)
            raise SandboxNotFound("the sandbox's Pod is gone", details=exc.details,
                                  cause=exc) from exc
        except KubeApiError as exc:
            # Refused: is the Pod still running? If it ended, that is the news.
            if await self._pod_ended_soon():
                raise self._life.not_running() from exc
            raise
        self._protocol = sock.protocol
        return sock

    async def _pod_ended_soon(self, patience: float = ENDED_PATIENCE) -> bool:
        """`_pod_ended`, asked again for up to ``patience`` s: when the kubelet ends a Pod
        (its deadline, its main process) it stops the container before the API server has the
        Pod's new phase, so an exec refused in that window would otherwise look like a start
        failure of the command."""
        with anyio.move_on_after(patience):
            while not await self._pod_ended():  # noqa: ASYNC110 (polls the API server)
                await anyio.sleep(0.2)
            return True
        return False

    async def _pod_ended(self) -> bool:
        """Look at the Pod; if it ended (deadline, OOM, its main process exited), fail the
        lifecycle with the reason and return True."""
        try:
            pod = self._pod = await self._get_pod()
        except KubeNotFound:
            self._life.fail("the Pod is gone", gone=True)
            return True
        except SandboxError:
            return False
        status = pod.get("status") or {}
        if status.get("phase") not in ("Failed", "Succeeded"):
            return False
        term: dict[str, Any] = {}
        for cs in status.get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or term
        why = str(status.get("reason") or term.get("reason") or status.get("phase"))
        code = term.get("exitCode")
        oom = why == "OOMKilled"
        wall = self._config.resources.wall_time_limit.total_seconds()
        if why == "DeadlineExceeded" and wall > 0:
            reason = f"TimeoutExceeded: wall_time_limit of {wall:g} s reached"
        else:
            reason = f"the Pod ended ({why})" + (f", exit code {code}" if code is not None else "")
        if self._life.fail(reason, exit_code=code if isinstance(code, int) else None,
                           oom_killed=oom):
            if why == "DeadlineExceeded":
                self._audit.limit("wall_time", reason)
            elif oom:
                self._audit.limit("memory", f"the sandbox stopped: {reason}")
        return True

    async def _kill_exec(self, argv: Sequence[str]) -> int | None:
        """Run the kill sweep; its exit code, or None when it did not report one."""
        sock = await self._open_socket(argv, False)
        status = b""
        try:
            with anyio.move_on_after(30):
                async for data in sock.messages():
                    if len(data) > 1 and data[0] == _exec.ERROR:
                        status += data[1:]
        finally:
            await sock.close()
        return _exec.parse_status(status)[0] if status else None

    @contextlib.asynccontextmanager
    async def _open(self, spec: ProcessSpec, *, attach_stdin: bool, iterate: bool = False,
                    on_stdout: OutputCallback | None = None,
                    on_stderr: OutputCallback | None = None,
                    ) -> AsyncIterator[_exec.KubeProcess]:
        self._check_user(spec)
        try:
            async with _exec.open_exec(
                    self._open_socket, spec, killer=self._kill_exec,
                    framed_v4=self._protocol == _exec.V4, attach_stdin=attach_stdin,
                    on_stdout=on_stdout, on_stderr=on_stderr, iterate=iterate) as proc:
                yield proc
        except _exec.ExecRefused as exc:
            # The runtime refused the exec with no exit code: usually the container is gone
            # (the Pod's deadline, its main process ended). Then that is the error.
            with anyio.CancelScope(shield=True):
                ended = await self._pod_ended_soon()
            if ended:
                raise self._life.not_running() from exc
            raise

    async def run_process(self, spec: ProcessSpec, *, on_stdout: OutputCallback | None = None,
                          on_stderr: OutputCallback | None = None) -> CommandResult:
        self._life.require_running()
        async with self._open(spec, attach_stdin=spec.stdin is not None, on_stdout=on_stdout,
                              on_stderr=on_stderr) as proc:
            return await proc.wait()

    @contextlib.asynccontextmanager
    async def open_process(self, spec: ProcessSpec) -> AsyncIterator[_exec.KubeProcess]:
        self._life.require_running()
        if spec.tty:
            raise ConfigError("tty=True is not supported by the Kubernetes backend yet: it "
                              "runs commands without a terminal")
        async with self._open(spec, attach_stdin=True, iterate=True) as proc:
            yield proc

    async def _run_internal(
        self, argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
        on_stdout: Callable[[bytes], object] | None = None, what: str = "a helper command",
    ) -> CommandResult:
        """Run a helper (file operation, probe) with the Docker backend's deadline rule:
        HELPER_TIMEOUT plus 1 s per HELPER_MIN_RATE bytes moved, at most HELPER_MAX_TIME."""
        self._life.require_running()
        deadline = HelperDeadline()
        with deadline.scope:
            spec = ProcessSpec(argv=argv, env={}, workdir="/", user=self._user,
                               stdin=deadline.counted_in(stdin),
                               max_output_bytes=(64 << 10) if on_stdout else 1 << 20)
            async with self._open(spec, attach_stdin=stdin is not None,
                                  on_stdout=deadline.counted_out(on_stdout)) as proc:
                return await proc.wait()
        raise deadline.expired(what, argv)

    def _helper(self, what: str) -> Callable[..., Awaitable[CommandResult]]:
        async def run(argv: Sequence[str], *,
                      stdin: bytes | AsyncIterator[bytes] | None = None,
                      on_stdout: Callable[[bytes], object] | None = None,
                      user: str | None = None) -> CommandResult:
            return await self._run_internal(argv, stdin=stdin, on_stdout=on_stdout, what=what)
        return run

    # -- files: tar and POSIX tools over exec, the Docker backend's hostile-input checks ------

    async def write_file(self, target: str, content: bytes, mode: int = 0o644) -> None:
        await _helper_files.write_file(self._helper(f"write {target!r}"), target, content, mode)

    async def read_file(self, target: str, max_bytes: int | None = None) -> bytes:
        return await _helper_files.read_file(self._helper(f"read {target!r}"), target,
                                      max_bytes=max_bytes)

    async def list_files(self, target: str) -> list[FileInfo]:
        return await _helper_files.list_files(self._helper(f"list {target!r}"), target)

    async def copy_in(self, source: Path, target: str) -> None:
        await _helper_files.copy_to_sandbox(self._helper(f"copy into {target!r}"), source, target)

    async def copy_out(self, target: str, dest: Path, *, max_bytes: int,
                       max_entries: int) -> None:
        await _helper_files.copy_from_sandbox(self._helper(f"copy from {target!r}"), target, dest,
                                       max_bytes=max_bytes, max_entries=max_entries)

    async def path_kind(self, target: str) -> str:
        return await _helper_files.path_kind(self._helper(f"inspect {target!r}"), target)

    # -- info --------------------------------------------------------------------------------

    async def get_resource_usage(self) -> ResourceUsage:
        """A sample from the metrics API (metrics-server) when the cluster has one, else from
        the node's own summary API (the kubelet's, through the API server's node proxy: what
        metrics-server itself reads). Never read from inside the Pod, whose code may lie.

        Raises:
            KubeApiError: Neither answered (no metrics-server, and no ``get`` on
                ``nodes/proxy`` for this user): usage is unknown here, not zero.
        """
        cluster = self._cluster_or_raise()
        now = datetime.now(UTC)
        uptime = timedelta(seconds=time.monotonic() - self._started)
        limit = self._config.resources.memory_limit or _constants.DEFAULT_MEMORY_LIMIT
        try:
            doc = await cluster.call(
                "read the sandbox's metrics", "GET",
                f"/apis/metrics.k8s.io/v1beta1/namespaces/{self.namespace}/pods/{self._name}")
        except KubeNotFound as exc:
            sample = await self._usage_from_node(cluster, now, uptime, limit, exc)
        else:
            usage: dict[str, Any] = {}
            for c in doc.get("containers") or []:
                if isinstance(c, dict) and c.get("name") == CONTAINER:
                    usage = c.get("usage") or {}
            memory = int(quantity(usage.get("memory", "0")))
            sample = ResourceUsage(
                timestamp=engine_time(doc.get("timestamp")) or now,
                cpu_usage=quantity(usage.get("cpu", "0")) * 100, memory_usage=memory,
                memory_percent=100.0 * memory / limit, uptime=uptime)
        self._samples.append(sample)
        if self._on_sample is not None:
            try:
                self._on_sample(sample)
            except Exception:  # a callback's bug must not break the caller's sample
                log.exception("on_sample raised")
        return sample

    async def _usage_from_node(self, cluster: Cluster, now: datetime, uptime: timedelta,
                               limit: int, no_metrics: KubeApiError) -> ResourceUsage:
        """This Pod's container in the node's ``/stats/summary`` (cpu and memory only)."""
        node = str((self._pod.get("spec") or {}).get("nodeName") or "")
        if not node:
            self._pod = await self._get_pod()
            node = str((self._pod.get("spec") or {}).get("nodeName") or "")
        try:
            doc = await cluster.call(
                "read the node's usage summary", "GET",
                f"/api/v1/nodes/{quote(node)}/proxy/stats/summary",
                query=[("only_cpu_and_memory", "true")])
        except KubeApiError as exc:
            raise KubeApiError(
                "cannot read the sandbox's resource usage: the cluster has no metrics API "
                f"(metrics-server) and the node's summary API refused (HTTP {exc.status})",
                status=exc.status, reason=exc.reason,
                details="install metrics-server, or grant get on nodes/proxy; "
                        f"{no_metrics.details}; {exc.details}", cause=exc) from exc
        for pod in doc.get("pods") or []:
            ref = (pod.get("podRef") or {}) if isinstance(pod, dict) else {}
            if ref.get("name") != self._name or ref.get("namespace") != self.namespace:
                continue
            for c in pod.get("containers") or []:
                if not isinstance(c, dict) or c.get("name") != CONTAINER:
                    continue
                cpu, mem = c.get("cpu") or {}, c.get("memory") or {}
                memory = _count(mem.get("workingSetBytes"))
                return ResourceUsage(
                    timestamp=engine_time(mem.get("time") or cpu.get("time")) or now,
                    cpu_usage=_count(cpu.get("usageNanoCores")) / 1e7,
                    cpu_time=timedelta(microseconds=_count(cpu.get("usageCoreNanoSeconds"))
                                       / 1000),
                    memory_usage=memory, memory_percent=100.0 * memory / limit,
                    uptime=uptime)
        raise KubeApiError(
            "cannot read the sandbox's resource usage: the cluster has no metrics API and "
            f"node {node!r}'s summary does not list the sandbox's container yet",
            status=404, details="the kubelet's stats lag a new container by a few seconds")

    def usage_history(self) -> list[ResourceUsage]:
        return list(self._samples)

    async def get_info(self) -> SandboxInfo:
        pod = self._pod
        if self._cluster is not None and self._life.status is SandboxStatus.RUNNING:
            with contextlib.suppress(SandboxError):
                pod = self._pod = await self._get_pod()
        meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
        limits = ((spec.get("containers") or [{}])[0].get("resources") or {}).get("limits") or {}
        allocated = ResourceLimits(cpu_limit=quantity(limits.get("cpu", "0")),
                                   memory_limit=int(quantity(limits.get("memory", "0")))) \
            if limits else self._config.resources
        arch = self._config.architecture
        return SandboxInfo(
            id=self.id, name=self._name, type="kubernetes", status=self._life.status,
            created_at=engine_time(meta.get("creationTimestamp")) or self._created_at,
            started_at=engine_time(status.get("startTime")),
            runtime=spec.get("runtimeClassName", "") or self._config.runtime,
            image=self._config.image, platform=f"linux/{arch}" if arch else "linux",
            ip_address=status.get("podIP", "") or "", hostname=self._name,
            allocated_resources=allocated, config=self._config,
            labels=meta.get("labels") or {}, annotations=dict(self._config.annotations),
            status_reason=self._life.reason, exit_code=self._life.exit_code)
