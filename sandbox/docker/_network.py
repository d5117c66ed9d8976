"""Give a networked sandbox its network: one made for it, or a named one that already exists.

A network the SDK makes is ``internal`` (no route off the host) unless ports must be published.
Measured on this engine (20.10, ``--iptables=false --ip-forward=false``): a container on an
internal network gets no published ports at all (``NetworkSettings.Ports`` stays empty, no
docker-proxy starts); on a plain bridge docker-proxy publishes tcp and udp on the mapping's
host address. So with port mappings the network is a plain bridge with IP masquerading off;
whether packets can leave the host is then up to the engine's forwarding settings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .._audit import Auditor
from .._constants import DEFAULT_CLEANUP_TIMEOUT
from .._egress import EgressPolicy
from .._egress_stats import EgressStats
from .._errors import ConfigError, SandboxError, SandboxInitFailed
from .._models import NetworkConfig, SandboxConfig
from .._shield import finish_despite_cancel
from ._egress import EgressGate
from ._gateway import Engine, EngineNotFound
from ._shaping import plan_shaping
from ._wire import host_port

if TYPE_CHECKING:
    from ._facts import EngineFacts
    from ._plan import CreatePlan

_NO_MASQUERADE = {"com.docker.network.bridge.enable_ip_masquerade": "false"}


def _port_key(port: int, protocol: str) -> str:
    return f"{port}/{protocol}"


class SandboxNetwork:
    """The network of one sandbox, and the removal of the one the SDK made for it."""

    def __init__(self, engine: Engine, config: SandboxConfig, *, name: str,
                 labels: Mapping[str, str], audit: Callable[[], Auditor] | None = None,
                 facts: EngineFacts | None = None) -> None:
        self._engine = engine
        self._config = config
        self._name = name
        self._labels = dict(labels)
        self._audit = audit
        # The proxy needs a network: runc, not a runtime like runsc here (--network=none).
        self._proxy_runtime = "runc" if facts is not None and "runc" in facts.runtimes else ""
        #: Id of the network made for this sandbox; cleanup removes it.
        self.created_id: str | None = None
        #: The egress proxy, when the config names hosts.
        self.gate: EgressGate | None = None
        self._networked = False

    @property
    def net(self) -> NetworkConfig:
        """The sandbox's network settings."""
        return self._config.network

    async def set_up(self, body: dict[str, Any], plan: CreatePlan) -> None:
        """`prepare` as the create plan says. A network create cancelled in flight would still
        be made by the engine after cleanup looked for it, so it finishes despite a cancel;
        the egress gate shields its own creates and stays cancellable while it waits."""
        prepare = self.prepare(body, networked=plan.networked,
                               needs_network=plan.needs_network, egress=plan.egress)
        await (prepare if plan.egress else finish_despite_cancel(prepare))

    async def prepare(self, body: dict[str, Any], *, networked: bool,
                      needs_network: bool, egress: EgressPolicy | None = None) -> None:
        """Before create: make the sandbox's network, or check the named one, and use it.

        ``plan_container`` already refused what is not enforced and filled DNS, proxies and
        port bindings; ``needs_network`` means it left ``NetworkMode`` for us. With an
        ``egress`` policy the sandbox goes behind its egress proxy (`_egress`) instead.
        """
        self._networked = networked
        if not networked:
            return
        if (shaping := plan_shaping(self._config)) is not None:
            shaping.check_host()
        if egress is not None:
            self.gate = EgressGate(
                self._engine, sandbox_id=self._name.removeprefix("sandbox-"), policy=egress,
                outside=self.net.bridge, labels=self._labels,
                audit=self._audit or (lambda: Auditor(self._name, self._config.security)),
                runtime=self._proxy_runtime)
            await self.gate.start()
            self.gate.apply(body)
            return
        host = body.setdefault("HostConfig", {})
        if not needs_network:
            await self._check_existing(host.get("NetworkMode") or self.net.bridge)
            return
        created = await self._engine.query_json(
            "create the sandbox's network", "networks/create", "POST",
            data={
                "Name": self._name, "CheckDuplicate": True, "Driver": "bridge",
                # The engine publishes no ports from internal networks (measured).
                "Internal": not self.net.port_mappings, "Options": _NO_MASQUERADE,
                "Labels": self._labels,
            },
        )
        self.created_id = created["Id"]
        host["NetworkMode"] = self._name

    async def _check_existing(self, name: str) -> None:
        try:
            info = await self._engine.query_json(f"inspect network {name!r}", f"networks/{name}")
        except EngineNotFound as exc:
            raise SandboxInitFailed(f"network.bridge names network {name!r}, which does "
                                    "not exist", details="create it first (docker network "
                                    "create --internal NAME) or leave bridge empty") from exc
        if info.get("Driver") in ("host", "null"):
            raise SandboxInitFailed(
                f"network.bridge {name!r} is a {info.get('Driver')} network, not a bridge",
                details="host networking would bypass the sandbox; for no network keep "
                        "network.isolated=True")

    async def shape(self, container_id: str) -> None:
        """After start: set the bandwidth limits (`_shaping`), if any, on a networked one."""
        shaping = plan_shaping(self._config)
        if shaping is not None and self._networked:
            await shaping.apply(self._engine, container_id)

    def egress_stats(self) -> EgressStats:
        """What the egress proxy decided so far (``enforced=False`` without one)."""
        return self.gate.stats() if self.gate is not None else EgressStats()

    async def remove(self) -> list[str]:
        """Remove the network made for this sandbox (after its container); return errors."""
        if self.gate is not None:
            return await self.gate.remove()
        if self.created_id is None:
            return []
        try:
            await self._engine.request("remove the sandbox's network",
                                       f"networks/{self.created_id}", "DELETE",
                                       deadline=DEFAULT_CLEANUP_TIMEOUT)
        except EngineNotFound:
            pass  # already gone
        except SandboxError as exc:
            return [str(exc)]
        self.created_id = None
        return []


async def published_port(engine: Engine, container_id: str, port: int,
                         protocol: str = "tcp") -> int:
    """Return the host port the engine published ``port/protocol`` on."""
    data = await engine.query_json("inspect the sandbox's ports",
                                   f"containers/{container_id}/json")
    published = host_port(data, port, protocol)
    if published is not None:
        return published
    raise ConfigError(f"container port {_port_key(port, protocol)} is not published; add a "
                      "PortMapping for it to network.port_mappings")
