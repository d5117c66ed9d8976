"""The Docker side of the egress policy: a proxy container and a network with no way out.

A networked sandbox whose config names hosts (see `sandbox._egress`) is attached to one
network only, made for it: ``internal``, with ``inhibit_ipv4`` so the host's bridge has no
IPv4 address (the sandbox's default gateway answers nobody, and the host's own services are
not reachable through it) and IPv6 off in the sandbox. Its only peer there is the egress proxy,
a second container the SDK owns (`sandbox._egress_proxy`, stdlib Python in the ``PROXY_IMAGE``),
which is also on the network ``network.bridge`` names: the "outside". The sandbox gets
``HTTP(S)_PROXY`` pointing at the proxy and the proxy's address as its DNS server; the proxy
answers every query REFUSED, so the engine's embedded resolver (which on 20.10 forwards names
it does not know) fails outside names at once (with no answer at all, each lookup waited 10 s,
measured), and resolves only the names of the two containers on that network.

Measured on this engine (20.10, ``--iptables=false``): an internal network still gives its
containers a default route via the bridge's address, which the host then owns, so without
``inhibit_ipv4`` the host is reachable; with it, the route leads nowhere.

The proxy runs as nobody, without capabilities, on a read-only root, with memory, CPU and
process limits, under runc (runsc here has ``--network=none``). Its decisions come back as JSON
lines on its log (capped: `PROXY_LOG`), followed for the counters (`EgressStats`) and the
audit log. It carries the
owner labels, so gc finds it after a crash, and `remove` takes it and the network away.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import anyio

from .. import _egress, _egress_proxy, _egress_wire
from .._audit import Auditor
from .._constants import (
    DEFAULT_CLEANUP_TIMEOUT,
    IMAGE_PYTHON,
    LABEL_PREFIX,
    LABEL_SANDBOX_ID,
)
from .._egress import EgressPolicy, merged_policy
from .._egress_stats import EgressStats
from .._errors import ConfigError, SandboxError, SandboxInitFailed
from .._models import SandboxConfig
from .._shield import finish_despite_cancel
from .._supervisor import Supervisor
from ._gateway import Engine, EngineNotFound

__all__ = ["PROXY_IMAGE", "PROXY_LABEL", "EgressGate", "plan_egress"]

log = logging.getLogger("sandbox.egress")

#: Image the proxy runs in: any image with ``python3`` (3.8+) on its PATH.
PROXY_IMAGE: Final = IMAGE_PYTHON
#: Label naming the sandbox a proxy container serves (not the sandbox-id label: that one
#: finds the sandbox's own container).
PROXY_LABEL: Final = f"{LABEL_PREFIX}egress-proxy-of"
READY_TIMEOUT: Final = 30.0
PROXY_MEMORY: Final = 256 * 1024 * 1024
#: The proxy's log on the host: at most 3 files of 10 MB (a sandbox refused in a loop wrote
#: 1.8 GB an hour before the cap; the proxy also rate-limits its refusal lines). The counters
#: follow it through rotation (json-file: the engine's ``local`` driver lost lines when
#: followed across rotations here, json-file repeats one, which ``seq`` drops).
PROXY_LOG: Final = {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "3"}}
_PROXY_VARS: Final = ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
_NO_PROXY: Final = "localhost,127.0.0.1,::1"


def plan_egress(config: SandboxConfig, *, networked: bool,
                no_network_runtime: bool) -> EgressPolicy | None:
    """The sandbox's egress policy, or None; refuses what cannot go with one (pure)."""
    named = [f"{place}.{f}" for place in ("security", "network")
             for f in ("allowed_hosts", "blocked_hosts", "allowed_ports")
             if getattr(getattr(config, place), f)]
    if named and not networked:
        raise SandboxInitFailed(
            f"{', '.join(named)}: an isolated sandbox reaches no host", details="set network."
            "isolated=False, security.isolate_network=False and security.allow_networking=True")
    try:
        policy = merged_policy(config.security, config.network)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if policy is None:
        return None
    net = config.network
    conflicts = [f"network.{f}" for f in ("http_proxy", "https_proxy", "no_proxy",
                                          "dns_servers", "dns_search", "port_mappings")
                 if getattr(net, f)]
    if conflicts:
        raise SandboxInitFailed(
            f"{', '.join(conflicts)}: cannot go with an egress policy (allowed_hosts)",
            details="the SDK's egress proxy is the sandbox's only proxy and resolver, and its "
                    "network publishes no ports; remove them")
    if no_network_runtime:
        raise SandboxInitFailed(
            "allowed_hosts: this runtime runs sandboxes with --network=none, so the sandbox "
            "could not reach its egress proxy", details="use runtime 'runc'")
    return policy


class EgressGate:
    """One sandbox's egress proxy and internal network; `start`, `apply`, then `remove`."""

    def __init__(self, engine: Engine, *, sandbox_id: str, policy: EgressPolicy, outside: str,
                 labels: Mapping[str, str], audit: Callable[[], Auditor],
                 runtime: str = "") -> None:
        self._engine, self._policy, self._outside = engine, policy, outside
        self._labels = dict(labels)
        self._audit, self._runtime = audit, runtime
        self.sandbox_id = sandbox_id
        self.network_name = f"sandbox-{sandbox_id}-egress"
        self.proxy_name = f"sandbox-{sandbox_id}-proxy"
        self.network_id: str | None = None
        self.container_id: str | None = None
        #: The proxy's address on the sandbox's network, once started.
        self.address = ""
        self._counts = {"allowed": 0, "refused": 0, "failed": 0}
        self._by_rule: dict[str, int] = {}
        self._seq = 0
        self._ready = anyio.Event()
        self._supervisor = Supervisor(f"{sandbox_id} egress proxy", self._follow_failed)

    @property
    def proxy_url(self) -> str:
        """What the sandbox's ``HTTP(S)_PROXY`` say."""
        return f"http://{self.address}:{_egress_proxy.PORT}"

    async def start(self) -> None:
        """Make the network and the proxy, and wait until the proxy serves."""
        await self._check_outside()
        engine = self._engine

        async def create_network() -> None:
            made = await engine.query_json(
                "create the sandbox's egress network", "networks/create", "POST", data={
                    "Name": self.network_name, "CheckDuplicate": True, "Driver": "bridge",
                    "Internal": True, "Labels": self._labels, "Options": {
                        "com.docker.network.bridge.inhibit_ipv4": "true",
                        "com.docker.network.bridge.enable_ip_masquerade": "false"}})
            self.network_id = str(made["Id"])

        await finish_despite_cancel(create_network())
        info = await engine.query_json("inspect the egress network",
                                       f"networks/{self.network_id}")
        subnets = [c.get("Subnet") for c in (info.get("IPAM") or {}).get("Config") or []]
        subnet = next((s for s in subnets if s and ":" not in s), "")
        if not subnet:
            raise SandboxInitFailed("the egress network got no IPv4 subnet",
                                    details=f"IPAM: {info.get('IPAM')!r}")

        async def create_proxy() -> None:
            made = await engine.query_json(
                "create the egress proxy", "containers/create", "POST",
                params={"name": self.proxy_name}, data=self._proxy_body(subnet))
            self.container_id = str(made["Id"])

        await finish_despite_cancel(create_proxy())
        await engine.request(
            "connect the egress proxy to the sandbox's network",
            f"networks/{self.network_id}/connect", "POST",
            data=json.dumps({"Container": self.container_id}),
            headers={"Content-Type": "application/json"})
        await engine.request("start the egress proxy",
                             f"containers/{self.container_id}/start", "POST")
        data = await engine.query_json("inspect the egress proxy",
                                       f"containers/{self.container_id}/json")
        networks = (data.get("NetworkSettings") or {}).get("Networks") or {}
        self.address = str((networks.get(self.network_name) or {}).get("IPAddress") or "")
        if not self.address:
            raise SandboxInitFailed("the egress proxy got no address on the sandbox's network")
        self._supervisor.start([("the egress proxy's log", self._follow)])
        with anyio.move_on_after(READY_TIMEOUT):
            await self._ready.wait()
        if not self._ready.is_set():
            raise SandboxInitFailed(
                f"the egress proxy did not start within {READY_TIMEOUT:g} s",
                details=f"see docker logs {self.proxy_name}; it needs python3 in {PROXY_IMAGE}")

    def apply(self, body: dict[str, Any]) -> None:
        """Put the sandbox on the proxy's network, with the proxy as its only way out."""
        host = body.setdefault("HostConfig", {})
        host["NetworkMode"] = self.network_name
        # The proxy answers every DNS query REFUSED: the embedded resolver's forwarding of
        # outside names fails at once.
        host["Dns"] = [self.address]
        host.setdefault("Sysctls", {})["net.ipv6.conf.all.disable_ipv6"] = "1"
        env = [e for e in body.get("Env") or [] if e.partition("=")[0].lower() not in
               ("http_proxy", "https_proxy", "no_proxy")]
        env += [f"{name}={self.proxy_url}" for name in _PROXY_VARS]
        env += [f"no_proxy={_NO_PROXY}", f"NO_PROXY={_NO_PROXY}"]
        body["Env"] = env

    def stats(self) -> EgressStats:
        """The counters so far (they trail the proxy by its log's latency: milliseconds)."""
        return EgressStats(enforced=True, refused_by_rule=self._by_rule, **self._counts)

    async def remove(self) -> list[str]:
        """Remove the proxy and the network (after the sandbox's container); return errors."""
        await self._supervisor.aclose()
        errors: list[str] = []
        target = self.container_id or await self._find_proxy(errors)
        steps = [("remove the egress proxy", f"containers/{target}", {"force": "1", "v": "1"})
                 ] if target else []
        if self.network_id:
            steps.append(("remove the egress network", f"networks/{self.network_id}", {}))
        for action, path, params in steps:
            try:
                await self._engine.request(action, path, "DELETE", params=params or None,
                                           deadline=DEFAULT_CLEANUP_TIMEOUT)
            except EngineNotFound:
                pass
            except SandboxError as exc:
                errors.append(str(exc))
        if not errors:
            self.container_id = self.network_id = None
        return errors

    # -- inside ----------------------------------------------------------------------------------

    async def _check_outside(self) -> None:
        if not self._outside:
            raise SandboxInitFailed(
                "allowed_hosts: network.bridge is empty and this SDK makes no outside network",
                details="name the network the egress proxy reaches the allowed hosts through "
                        "in network.bridge (docker network create NAME)")
        try:
            info = await self._engine.query_json(f"inspect network {self._outside!r}",
                                                 f"networks/{self._outside}")
        except EngineNotFound as exc:
            raise SandboxInitFailed(f"network.bridge names network {self._outside!r}, which "
                                    "does not exist", details="create it first") from exc
        if info.get("Driver") != "bridge":
            raise SandboxInitFailed(f"network.bridge {self._outside!r} is a "
                                    f"{info.get('Driver')} network, not a bridge")

    def _proxy_body(self, subnet: str) -> dict[str, Any]:
        sources = [Path(m.__file__ or "").read_text() for m in (_egress, _egress_wire,
                                                                    _egress_proxy)]
        settings = json.dumps({"policy": self._policy.to_json(), "client_subnet": subnet,
                               "dns_port": 53})
        host: dict[str, Any] = {
            "NetworkMode": self._outside, "Init": True, "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges:true"], "ReadonlyRootfs": True,
            "Memory": PROXY_MEMORY, "MemorySwap": PROXY_MEMORY, "PidsLimit": 64,
            "NanoCpus": 500_000_000,
            # Port 53 (the DNS refuser) without a capability: the proxy runs as nobody.
            "Sysctls": {"net.ipv4.ip_unprivileged_port_start": "53"},
            "LogConfig": PROXY_LOG,
        }
        if self._runtime:
            host["Runtime"] = self._runtime
        return {
            "Image": PROXY_IMAGE, "User": "65534:65534", "Tty": True,
            "Cmd": ["python3", "-I", "-c", _egress_proxy.BOOT, *sources, settings],
            "Env": ["PYTHONDONTWRITEBYTECODE=1"], "WorkingDir": "/",
            # Not the sandbox-id label: looking for the sandbox's container by it (after a
            # lost create answer) must never find the proxy.
            "Labels": {**{k: v for k, v in self._labels.items() if k != LABEL_SANDBOX_ID},
                       PROXY_LABEL: self.sandbox_id},
            "HostConfig": host,
        }

    async def _find_proxy(self, errors: list[str]) -> str | None:
        """A proxy whose create answer never came back, found by its label."""
        filters = json.dumps({"label": [f"{PROXY_LABEL}={self.sandbox_id}"]})
        try:
            found = await self._engine.query_json(
                "look for the egress proxy", "containers/json",
                params={"all": "1", "filters": filters})
        except SandboxError as exc:
            errors.append(str(exc))
            return None
        return str(found[0]["Id"]) if found else None

    async def _follow(self) -> None:
        async with self._engine.json_lines(
                "follow the egress proxy's log", f"containers/{self.container_id}/logs",
                params={"follow": "1", "stdout": "1", "stderr": "1"}) as lines:
            async for event in lines:
                if isinstance(event, dict):
                    self._record(event)

    def _record(self, event: Mapping[str, Any]) -> None:
        # Following a rotating log, the engine repeats a line at each rotation: drop repeats.
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self._seq:
                return
            self._seq = seq
        if event.get("ready"):
            self._ready.set()
            return
        decision = event.get("decision")
        if decision not in self._counts:
            return
        # Past its log's rate limit the proxy writes one line per rule with a count.
        count = event.get("count", 1)
        count = count if isinstance(count, int) and 0 < count < 1 << 40 else 1
        self._counts[str(decision)] += count
        fields = {k: event.get(k) for k in ("method", "host", "port", "address", "rule",
                                             "reason", "count") if event.get(k) is not None}
        if decision == "refused":
            rule = str(event.get("rule") or "")
            self._by_rule[rule] = self._by_rule.get(rule, 0) + count
        self._audit().egress(str(decision), fields)

    def _follow_failed(self, name: str, exc: Exception) -> None:
        # The proxy goes on enforcing; only the counters and audit events stop.
        log.warning("sandbox %s: %s stopped: %s", self.sandbox_id, name, exc)
