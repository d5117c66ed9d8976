"""An in-process fake Kubernetes API server that speaks the real wire, for the backend's tests.

REST (JSON) for Pods, NetworkPolicies and pod metrics, with ``Status`` error objects and
bearer-token auth; exec as a websocket with the channel subprotocols ``v5.channel.k8s.io``
and ``v4.channel.k8s.io`` (one channel byte per binary message: 0 stdin, 1 stdout, 2 stderr,
3 error/status JSON, v5's 255 close; an empty "channel open" message per output channel first,
as the API server's wsstream does).

Each Pod is a small real container made of Linux primitives (the suite runs as root):
private mount and PID namespaces (``unshare``) over a root directory in a temp dir, with the
host's /usr and /etc bound read-only (the image is not pulled: host binaries stand in), its own
/proc, /dev bound, each ``emptyDir`` a directory (``medium: Memory``: a tmpfs with its
``sizeLimit``), the root remounted read-only for ``readOnlyRootFilesystem``, and the process
run by ``setpriv`` as ``runAsUser``/``runAsGroup`` with no supplementary groups, no new
privileges when ``allowPrivilegeEscalation`` is false, and the listed capabilities as its
bounding set. Exec enters that namespace and root with ``nsenter`` and runs the same
``setpriv``: so stdin and EOF, stdout and stderr, exit codes, signals and the kill sweep, and
files by tar really happen. Deleting a Pod kills every process whose root is the Pod's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import shutil
import signal
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

V5, V4 = "v5.channel.k8s.io", "v4.channel.k8s.io"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "metadata": {},
                              "status": "Failure", "message": message, "reason": reason,
                              "code": code}, status=code)


async def _precondition(request: web.Request, obj: Mapping[str, Any]) -> web.Response | None:
    """A DeleteOptions uid precondition that does not match: 409, as the API server answers."""
    body = await request.json() if request.body_exists else {}
    want = ((body or {}).get("preconditions") or {}).get("uid")
    have = obj["metadata"].get("uid")
    if want and want != have:
        return _status(409, "Conflict", f"Precondition failed: UID in precondition: {want}, "
                                        f"UID in object meta: {have}")
    return None


def _selected(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, selector.split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


class FakePod:
    """One Pod: its manifest as sent, its status, and the processes that make it."""

    def __init__(self, server: FakeApiServer, manifest: dict[str, Any]) -> None:
        self.server = server
        self.manifest = manifest
        meta = manifest["metadata"]
        self.name, self.namespace = meta["name"], meta["namespace"]
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        self.container = manifest["spec"]["containers"][0]
        sc = self.container.get("securityContext") or {}
        self.uid, self.gid = int(sc.get("runAsUser", 0)), int(sc.get("runAsGroup", 0))
        self.dir = server.root / self.namespace / self.name
        self.root = self.dir / "root"
        self.phase = "Pending"
        self.waiting = "ContainerCreating"
        self.terminated: dict[str, Any] | None = None
        self.reason = ""
        self.keepalive: asyncio.subprocess.Process | None = None
        #: The keep-alive's pid, for nsenter (it is in the Pod's root and namespaces).
        self.target = 0
        self.start_time = ""
        self.ip = f"10.244.0.{len(server.pods) + 2}"
        self.env = {"PATH": PATH, "HOSTNAME": self.name, "HOME": _home(self.uid),
                    **{e["name"]: e.get("value", "") for e in self.container.get("env") or []}}
        self.tasks: set[asyncio.Task[Any]] = set()
        #: The container was stopped (the phase may not say so yet).
        self.stopped = False

    # -- the manifest as the API server would return it ------------------------------------

    def to_json(self) -> dict[str, Any]:
        state: dict[str, Any]
        if self.terminated is not None:
            state = {"terminated": self.terminated}
        elif self.phase == "Running":
            state = {"running": {"startedAt": self.start_time}}
        else:
            state = {"waiting": {"reason": self.waiting}}
        status: dict[str, Any] = {"phase": self.phase, "podIP": self.ip,
                                  "containerStatuses": [{"name": self.container["name"],
                                                         "state": state,
                                                         "ready": self.phase == "Running"}]}
        if self.start_time:
            status["startTime"] = self.start_time
        if self.reason:
            status["reason"] = self.reason
        meta = {**self.manifest["metadata"], "resourceVersion": str(hash(json.dumps(
            status, sort_keys=True)) & 0xFFFFFFF)}
        return {**self.manifest, "metadata": meta, "status": status}

    # -- the container -----------------------------------------------------------------------

    def setpriv(self) -> list[str]:
        sc = self.container.get("securityContext") or {}
        caps = [c.lower() for c in (sc.get("capabilities") or {}).get("add") or []]
        bounding = ",".join(["-all", *(f"+{c}" for c in caps)])
        argv = ["/usr/bin/setpriv", f"--reuid={self.uid}", f"--regid={self.gid}",
                "--clear-groups", f"--bounding-set={bounding}", f"--inh-caps={bounding}"]
        if sc.get("allowPrivilegeEscalation") is False:
            argv.append("--no-new-privs")
        return [*argv, "--"]

    def _mount_script(self) -> str:
        r = str(self.root)
        spec = self.manifest["spec"]
        sc = self.container.get("securityContext") or {}
        fs_group = (spec.get("securityContext") or {}).get("fsGroup")
        lines = ["set -e", f"mount --bind {r} {r}"]
        for d in ("usr", "etc"):
            lines += [f"mount --rbind /{d} {r}/{d}", f"mount -o remount,bind,ro {r}/{d}"]
        # This script is PID 1 of the Pod's own PID namespace: a /proc of that namespace.
        lines += [f"mount -t proc proc {r}/proc", f"mount --rbind /dev {r}/dev"]
        volumes = {v["name"]: v for v in spec.get("volumes") or []}
        for mount in self.container.get("volumeMounts") or []:
            vol = volumes[mount["name"]]
            target = f"{r}{mount['mountPath']}"
            empty = vol.get("emptyDir")
            assert empty is not None, f"the fake has only emptyDir volumes, got {vol}"
            mode = "2777" if fs_group is not None else "777"
            if empty.get("medium") == "Memory":
                size = empty.get("sizeLimit", "")
                opts = f"mode={mode}" + (f",gid={fs_group}" if fs_group is not None else "")
                if size and self.server.sized_memory_volumes:
                    opts += f",size={size.replace('i', '').lower()}"
                lines.append(f"mount -t tmpfs -o nosuid,nodev,{opts} tmpfs {target}")
            else:
                host = self.dir / "volumes" / mount["name"]
                host.mkdir(parents=True, exist_ok=True)
                if fs_group is not None:
                    os.chown(host, 0, int(fs_group))
                host.chmod(int(mode, 8))
                lines.append(f"mount --bind {host} {target}")
        if sc.get("readOnlyRootFilesystem"):
            lines.append(f"mount -o remount,bind,ro {r}")
        workdir = self.container.get("workingDir") or "/"
        keep = " ".join(_sh_quote(a) for a in self.container["command"])
        inner = f"cd {_sh_quote(workdir)} && exec {keep}"
        # Not exec'd: PID 1 stays root so its parent-death signal holds (setpriv's change of
        # user would clear it), and when it dies the kernel kills the whole namespace.
        lines.append(f"chroot {r} {' '.join(self.setpriv())} /bin/sh -c {_sh_quote(inner)} &")
        lines.append('wait "$!"')
        return "\n".join(lines)

    def _make_root(self) -> None:
        self.root.mkdir(parents=True)
        for entry in ("bin", "lib", "lib64", "sbin"):
            host = Path("/") / entry
            if host.is_symlink():
                (self.root / entry).symlink_to(os.readlink(host))
            elif host.is_dir():
                (self.root / entry).mkdir()
        for d in ("usr", "etc", "proc", "dev", "root"):
            (self.root / d).mkdir()
        home = self.env.get("HOME", "/")
        if home.startswith("/home/"):
            # As the test image has: a home for its user (the runtime sets HOME from passwd).
            (self.root / home.lstrip("/")).mkdir(parents=True)
            os.chown(self.root / home.lstrip("/"), self.uid, self.gid)
        (self.root / "tmp").mkdir(mode=0o1777)
        (self.root / "tmp").chmod(0o1777)
        for mount in self.container.get("volumeMounts") or []:
            (self.root / mount["mountPath"].lstrip("/")).mkdir(parents=True, exist_ok=True)

    async def start(self) -> None:
        await asyncio.sleep(self.server.start_delay)
        image = self.container["image"]
        if image in self.server.missing_images:
            self.waiting = "ErrImagePull"
            return
        assert os.geteuid() == 0, "the fake API server runs Pods with namespaces: run as root"
        self._make_root()
        # Its own mount and PID namespaces. Nothing outlives the test process, even killed:
        # unshare dies with it (--pdeathsig), PID 1 with unshare (--kill-child), and every
        # process of the Pod with PID 1.
        self.keepalive = await asyncio.create_subprocess_exec(
            "setpriv", "--pdeathsig", "KILL", "--", "unshare", "--mount", "--pid", "--fork",
            "--kill-child", "--propagation", "private", "/bin/sh", "-c",
            self._mount_script(), env=self.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        # Running once the keep-alive runs in the Pod's root (the mounts are done).
        for _ in range(500):
            found = self.processes()
            if found:
                self.target = min(found)
                break
            if self.keepalive.returncode is not None:
                break
            await asyncio.sleep(0.01)
        self.phase, self.start_time = "Running", _now()
        self._spawn(self._watch())
        deadline = self.manifest["spec"].get("activeDeadlineSeconds")
        if deadline:
            self._spawn(self._deadline(int(deadline)))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _watch(self) -> None:
        assert self.keepalive is not None and self.keepalive.stderr is not None
        err = await self.keepalive.stderr.read()
        code = await self.keepalive.wait()
        if self.phase == "Running" and not self.stopped:
            self.phase = "Succeeded" if code == 0 else "Failed"
            self.terminated = {"exitCode": code if code >= 0 else 128 - code,
                               "reason": "Completed" if code == 0 else "Error",
                               "message": err.decode(errors="replace")[-500:]}

    async def _deadline(self, seconds: int) -> None:
        await asyncio.sleep(seconds)
        # As a real node: the container is stopped first, the API server learns the phase
        # a moment later (``status_lag``); an exec in between is refused by the runtime.
        self.stopped = True
        self.kill_all()
        await asyncio.sleep(self.server.status_lag)
        self.phase, self.reason = "Failed", "DeadlineExceeded"
        self.terminated = {"exitCode": 137, "reason": "Error"}

    def processes(self) -> list[int]:
        """Every process whose root is this Pod's."""
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "root") == str(self.root):
                        pids.append(int(entry.name))
        return pids

    def kill_all(self) -> None:
        for _ in range(20):
            pids = self.processes()
            if self.keepalive is not None and self.keepalive.returncode is None:
                pids.append(self.keepalive.pid)
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    async def delete(self) -> None:
        self.kill_all()
        if self.keepalive is not None:
            with contextlib.suppress(ProcessLookupError):
                await asyncio.wait_for(self.keepalive.wait(), 10)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.to_thread(shutil.rmtree, self.dir, True)

    def resolves(self, program: str) -> bool:
        """Whether the container runtime would find ``program`` (as exec's first argument)."""
        paths = [program] if "/" in program else \
            [f"{d}/{program}" for d in self.env.get("PATH", PATH).split(":")]
        return any(self._exists(p) for p in paths)

    def _exists(self, path: str) -> bool:
        """``path`` as seen inside: /usr (and the links into it) and /etc are the host's."""
        top = path.lstrip("/").split("/", 1)[0]
        base = Path("/") if top in ("usr", "bin", "lib", "lib64", "sbin", "etc") else self.root
        return (base / path.lstrip("/")).exists()

    def rss(self) -> int:
        total = 0
        for pid in self.processes():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * 4096
        return total


def _state(pid: int) -> str:
    """A process's state letter ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def _home(uid: int) -> str:
    """HOME as a container runtime sets it: the passwd entry's, else "/"."""
    try:
        return pwd.getpwuid(uid).pw_dir or "/"
    except KeyError:
        return "/"


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


class FakeApiServer:
    """The fake API server: start it, point a kubeconfig at it, inspect what it recorded.

    Attributes:
        protocols: The exec subprotocols it accepts (drop v5 to test the v4 path).
        metrics: Whether the metrics API answers.
        node_stats: Whether the node proxy's summary API answers (else 403).
        status_lag: Seconds between a node stopping a Pod and its phase showing it.
        sized_memory_volumes: Whether a memory emptyDir's tmpfs gets its sizeLimit as size
            (Kubernetes 1.22+; False is a 1.20 kubelet).
        missing_images: Images whose Pods stay waiting in ErrImagePull.
        requests: (method, path) of every request, in order.
    """

    def __init__(self, root: Path, *, protocols: tuple[str, ...] = (V5, V4),
                 metrics: bool = True, start_delay: float = 0.05,
                 status_lag: float = 0.0, sized_memory_volumes: bool = True) -> None:
        self.root = root
        self.protocols = protocols
        self.metrics = metrics
        self.start_delay = start_delay
        self.status_lag = status_lag
        self.sized_memory_volumes = sized_memory_volumes
        self.node_stats = True
        self.missing_images: set[str] = set()
        self.token = uuid.uuid4().hex
        self.pods: dict[tuple[str, str], FakePod] = {}
        self.policies: dict[tuple[str, str], dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.exec_protocols: list[str] = []
        self.exec_sockets: set[web.WebSocketResponse] = set()
        self.watches = 0  # watch requests served
        self._stopping = False
        #: Per exec, every binary message the client sent, in order.
        self.client_frames: list[list[bytes]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    # -- running it --------------------------------------------------------------------------

    async def start(self) -> str:
        app = web.Application(middlewares=[self._auth])
        ns = "/api/v1/namespaces/{ns}"
        net = "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies"
        app.add_routes([
            web.post(f"{ns}/pods", self.create_pod), web.get(f"{ns}/pods", self.list_pods),
            web.get(f"{ns}/pods/{{name}}", self.get_pod),
            web.delete(f"{ns}/pods/{{name}}", self.delete_pod),
            web.get(f"{ns}/pods/{{name}}/exec", self.exec),
            web.post(f"{ns}/pods/{{name}}/exec", self.exec),
            web.post(net, self.create_policy), web.get(net, self.list_policies),
            web.get(f"{net}/{{name}}", self.get_policy),
            web.delete(f"{net}/{{name}}", self.delete_policy),
            web.get("/apis/metrics.k8s.io/v1beta1/namespaces/{ns}/pods/{name}", self.metrics_of),
            web.get("/api/v1/nodes/{node}/proxy/stats/summary", self.summary),
        ])
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        self._stopping = True
        for pod in list(self.pods.values()):
            await pod.delete()
        self.pods.clear()
        if self._runner is not None:
            await self._runner.cleanup()

    def kubeconfig(self, path: Path, namespace: str = "sandboxes") -> Path:
        """Write a kubeconfig for this server (bearer token, plain HTTP on loopback)."""
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": self.token}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                         "namespace": namespace}}]}
        path.write_text(json.dumps(doc))
        return path

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _status(401, "Unauthorized", "Unauthorized")
        result: web.StreamResponse = await handler(request)
        return result

    # -- pods --------------------------------------------------------------------------------

    async def create_pod(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        manifest = await request.json()
        meta = manifest.setdefault("metadata", {})
        meta["namespace"] = ns
        name = meta.get("name", "")
        if (ns, name) in self.pods:
            return _status(409, "AlreadyExists", f'pods "{name}" already exists')
        if not manifest.get("spec", {}).get("containers"):
            return _status(422, "Invalid", "spec.containers: Required value")
        manifest["spec"].setdefault("nodeName", "fake-node")
        pod = FakePod(self, manifest)
        self.pods[(ns, name)] = pod
        pod._spawn(pod.start())
        return web.json_response(pod.to_json(), status=201)

    def _pod(self, request: web.Request) -> FakePod | None:
        return self.pods.get((request.match_info["ns"], request.match_info["name"]))

    async def get_pod(self, request: web.Request) -> web.Response:
        pod = self._pod(request)
        if pod is None:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        return web.json_response(pod.to_json())

    def _listed(self, request: web.Request) -> dict[str, dict[str, Any]]:
        selector = request.query.get("labelSelector", "")
        field = request.query.get("fieldSelector", "")
        name = field.removeprefix("metadata.name=") if field.startswith("metadata.name=") \
            else None
        return {p.name: p.to_json() for (ns, _), p in self.pods.items()
                if ns == request.match_info["ns"] and name in (None, p.name)
                and _selected(p.manifest["metadata"].get("labels") or {}, selector)}

    async def list_pods(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("watch") in ("true", "1"):
            return await self._watch_pods(request)
        items = list(self._listed(request).values())
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "items": items})

    async def _watch_pods(self, request: web.Request) -> web.StreamResponse:
        """A watch: one JSON event per line (ADDED, MODIFIED, DELETED) as the Pods change."""
        self.watches += 1
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        seen: dict[str, dict[str, Any]] = {}
        with contextlib.suppress(ConnectionError, RuntimeError):
            while not self._stopping:
                now = self._listed(request)
                events = [("DELETED", seen[n]) for n in seen if n not in now]
                events += [("ADDED" if n not in seen else "MODIFIED", o)
                           for n, o in now.items() if seen.get(n) != o]
                for kind, obj in events:
                    await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")
                seen = now
                await asyncio.sleep(0.02)
        return resp

    async def delete_pod(self, request: web.Request) -> web.Response:
        pod = self._pod(request)
        if pod is None:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        if (conflict := await _precondition(request, pod.manifest)) is not None:
            return conflict
        options = await request.json() if request.body_exists else {}
        grace = (options or {}).get("gracePeriodSeconds")
        if grace is None:
            grace = pod.manifest["spec"].get("terminationGracePeriodSeconds", 30)
        if grace > 0:
            # Graceful: the Pod stays, Terminating, for its grace period (as on a real node
            # when its main process ignores SIGTERM, as a PID 1 without a handler does).
            if "deletionTimestamp" not in pod.manifest["metadata"]:
                pod.manifest["metadata"].update(deletionTimestamp=_now(),
                                                deletionGracePeriodSeconds=grace)
                pod._spawn(self._delete_later(pod, grace))
            return web.json_response(pod.to_json())
        del self.pods[(pod.namespace, pod.name)]
        body = pod.to_json()
        await pod.delete()
        return web.json_response(body)

    async def _delete_later(self, pod: FakePod, grace: float) -> None:
        await asyncio.sleep(grace)
        if self.pods.get((pod.namespace, pod.name)) is pod:
            del self.pods[(pod.namespace, pod.name)]
        pod.kill_all()
        await asyncio.to_thread(shutil.rmtree, pod.dir, True)

    # -- network policies --------------------------------------------------------------------

    async def create_policy(self, request: web.Request) -> web.Response:
        ns = request.match_info["ns"]
        doc = await request.json()
        doc.setdefault("metadata", {})["namespace"] = ns
        name = doc["metadata"].get("name", "")
        if (ns, name) in self.policies:
            return _status(409, "AlreadyExists",
                           f'networkpolicies.networking.k8s.io "{name}" already exists')
        doc["metadata"].update(uid=str(uuid.uuid4()), creationTimestamp=_now())
        spec = doc.setdefault("spec", {})
        for key in ("ingress", "egress"):  # omitempty: the API server drops empty rule lists
            if spec.get(key) == []:
                del spec[key]
        self.policies[(ns, name)] = doc
        return web.json_response(doc, status=201)

    async def get_policy(self, request: web.Request) -> web.Response:
        doc = self.policies.get((request.match_info["ns"], request.match_info["name"]))
        if doc is None:
            return _status(404, "NotFound", "networkpolicy not found")
        return web.json_response(doc)

    async def list_policies(self, request: web.Request) -> web.Response:
        selector = request.query.get("labelSelector", "")
        items = [d for (ns, _), d in self.policies.items() if ns == request.match_info["ns"]
                 and _selected(d["metadata"].get("labels") or {}, selector)]
        return web.json_response({"kind": "NetworkPolicyList", "items": items})

    async def delete_policy(self, request: web.Request) -> web.Response:
        key = (request.match_info["ns"], request.match_info["name"])
        doc = self.policies.get(key)
        if doc is None:
            return _status(404, "NotFound", "networkpolicy not found")
        if (conflict := await _precondition(request, doc)) is not None:
            return conflict
        del self.policies[key]
        return web.json_response(doc)

    async def metrics_of(self, request: web.Request) -> web.Response:
        pod = self._pod(request)
        if not self.metrics or pod is None:
            return _status(404, "NotFound", "the server could not find the requested resource")
        return web.json_response({
            "kind": "PodMetrics", "apiVersion": "metrics.k8s.io/v1beta1",
            "metadata": {"name": pod.name, "namespace": pod.namespace}, "timestamp": _now(),
            "window": "10s", "containers": [{"name": pod.container["name"], "usage": {
                "cpu": "2500000n", "memory": f"{pod.rss() // 1024}Ki"}}]})

    async def summary(self, request: web.Request) -> web.Response:
        """The kubelet's summary API through the node proxy (cpu and memory only)."""
        if not self.node_stats:
            return _status(403, "Forbidden", 'nodes "fake-node" is forbidden: User cannot get '
                                             'resource "nodes/proxy"')
        if request.match_info["node"] != "fake-node":
            return _status(404, "NotFound", f'nodes "{request.match_info["node"]}" not found')
        now = _now()
        pods = [{"podRef": {"name": p.name, "namespace": p.namespace, "uid": p.manifest[
                    "metadata"]["uid"]},
                 "containers": [{"name": p.container["name"], "startTime": p.start_time,
                                 "cpu": {"time": now, "usageNanoCores": 2500000,
                                         "usageCoreNanoSeconds": 123456789},
                                 "memory": {"time": now, "workingSetBytes": p.rss()}}]}
                for p in self.pods.values() if p.phase == "Running"]
        return web.json_response({"node": {"nodeName": "fake-node"}, "pods": pods})

    # -- exec --------------------------------------------------------------------------------

    async def exec(self, request: web.Request) -> web.StreamResponse:
        pod = self._pod(request)
        if pod is None:
            return _status(404, "NotFound", f'pods "{request.match_info["name"]}" not found')
        if pod.phase != "Running" or pod.keepalive is None:
            return _status(400, "BadRequest", "cannot exec into a container in a completed "
                                              f"pod; current phase is {pod.phase}")
        accept = request.headers.get("Accept", "")
        if accept and "*/*" not in accept:
            # As the 1.20 kubelet's exec route does: its stream is not what was asked for.
            return web.Response(status=406, text="406: Not Acceptable")
        argv = request.query.getall("command", [])
        want_stdin = request.query.get("stdin") == "true"
        ws = web.WebSocketResponse(protocols=self.protocols, max_msg_size=0)
        if not ws.can_prepare(request).ok:
            return _status(400, "BadRequest", "no supported exec subprotocol")
        await ws.prepare(request)
        self.exec_sockets.add(ws)
        assert ws.ws_protocol is not None
        self.exec_protocols.append(ws.ws_protocol)
        for channel in (1, 2, 3):  # wsstream's "channel open" messages
            await ws.send_bytes(bytes([channel]))
        if pod.stopped:
            await ws.send_bytes(b"\x03" + json.dumps({
                "metadata": {}, "status": "Failure",
                "message": "cannot exec in a stopped state: unknown"}).encode())
            await ws.close()
            return ws
        if not argv or not pod.resolves(argv[0]):
            await ws.send_bytes(b"\x03" + json.dumps({
                "metadata": {}, "status": "Failure",
                "message": f'OCI runtime exec failed: exec failed: unable to start container '
                           f'process: exec: "{argv[0] if argv else ""}": executable file not '
                           'found in $PATH: unknown'}).encode())
            await ws.close()
            return ws
        proc = await asyncio.create_subprocess_exec(
            "nsenter", "-t", str(pod.target), "--mount", "--pid", "--root", "--wd",
            *pod.setpriv(), *argv, env=pod.env,
            stdin=asyncio.subprocess.PIPE if want_stdin else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)

        async def forward(stream: asyncio.StreamReader, channel: int) -> None:
            while chunk := await stream.read(32 << 10):
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_bytes(bytes([channel]) + chunk)

        frames: list[bytes] = []
        self.client_frames.append(frames)

        async def take_stdin() -> None:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY or not msg.data:
                    continue
                frames.append(bytes(msg.data))
                channel, data = msg.data[0], msg.data[1:]
                if proc.stdin is None:
                    continue
                if channel == 0 and data:
                    with contextlib.suppress(ConnectionError):
                        proc.stdin.write(data)
                        await proc.stdin.drain()
                elif channel == 255 and ws.ws_protocol == V5 and data[:1] == b"\x00":
                    proc.stdin.close()
            # The client went away: like the kubelet, stop the process's input.
            if proc.stdin is not None:
                proc.stdin.close()

        async def unstick() -> None:
            # nsenter forks into the PID namespace and stops itself when its child is stopped
            # (the kill sweep's SIGSTOP); a runtime's exec has no such parent. Once the child
            # is dead, continue nsenter so it reports the exit as the runtime would.
            while proc.returncode is None:
                await asyncio.sleep(0.05)
                if _state(proc.pid) == "T" and all(_state(c) in ("Z", "") for c in
                                                   _children(proc.pid)):
                    with contextlib.suppress(OSError):
                        os.kill(proc.pid, signal.SIGCONT)

        assert proc.stdout is not None and proc.stderr is not None
        reader = asyncio.ensure_future(take_stdin())
        helper = asyncio.ensure_future(unstick())
        try:
            await asyncio.gather(forward(proc.stdout, 1), forward(proc.stderr, 2))
            code = await proc.wait()
        finally:
            for task in (reader, helper):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        code = code if code >= 0 else 128 - code
        if code == 0:
            status: dict[str, Any] = {"metadata": {}, "status": "Success"}
        else:
            status = {"metadata": {}, "status": "Failure",
                      "message": f"command terminated with non-zero exit code: error "
                                 f"executing command {argv}, exit code {code}",
                      "reason": "NonZeroExitCode",
                      "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}
        with contextlib.suppress(ConnectionError, RuntimeError):
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
            await ws.close()
        self.exec_sockets.discard(ws)
        return ws

    async def drop_exec_streams(self) -> None:
        """Break every exec stream as a restarting API server would: no status, processes
        left running (closing an exec does not end its process)."""
        for ws in list(self.exec_sockets):
            self.exec_sockets.discard(ws)
            await ws.close(code=1011, message=b"going away")
