"""The engine's inspect, list and stats JSON turned into typed values, once.

Engine answers are read leniently: a missing, null or malformed field gives the field's empty
value (None, 0, "", False), never an error, so a newer or older engine cannot break a caller
that only wanted one field. Go writes a time never set as its zero time
(``0001-01-01T00:00:00Z``); that reads as None.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs

from .._wire_time import engine_time

__all__ = [
    "ContainerState", "ContainerView", "container_state", "container_view",
    "host_port", "size_rw",
]

def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@attrs.frozen(kw_only=True)
class ContainerState:
    """A container's ``State`` from inspect."""

    #: "created", "running", "paused", "restarting", "removing", "exited" or "dead".
    status: str = ""
    running: bool = False
    paused: bool = False
    #: The main process's exit code; None while it runs or when the engine gave none.
    exit_code: int | None = None
    #: Whether the OOM killer struck in the container (on 20.10: ever, see engine notes).
    oom_killed: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: The main process's pid in the engine's pid namespace; 0 when it runs none.
    pid: int = 0

    @property
    def ended(self) -> bool:
        """The main process is over: the container exited or died."""
        return self.status in ("exited", "dead")


def container_state(inspect: Mapping[str, Any]) -> ContainerState:
    """The ``State`` of a container inspect answer (all empty when it has none)."""
    state = _mapping(inspect.get("State"))
    return ContainerState(
        status=str(state.get("Status") or ""),
        running=state.get("Running") is True,
        paused=state.get("Paused") is True,
        exit_code=_int(state.get("ExitCode")),
        oom_killed=state.get("OOMKilled") is True,
        started_at=engine_time(state.get("StartedAt")),
        finished_at=engine_time(state.get("FinishedAt")),
        pid=_int(state.get("Pid")) or 0,
    )


def host_port(inspect: Mapping[str, Any], port: int, protocol: str = "tcp") -> int | None:
    """The host port the engine published a container's ``port/protocol`` on, if any."""
    ports = _mapping(_mapping(inspect.get("NetworkSettings")).get("Ports"))
    bindings = ports.get(f"{port}/{protocol}")
    for binding in bindings if isinstance(bindings, list) else ():
        text = str(_mapping(binding).get("HostPort") or "")
        if text.isdigit():
            return int(text)
    return None


def size_rw(inspect: Mapping[str, Any]) -> int:
    """The writable layer's size in bytes from an inspect made with ``size=1`` (else 0)."""
    return _int(inspect.get("SizeRw")) or 0


@attrs.frozen(kw_only=True)
class ContainerView:
    """What `SandboxInfo` shows of a container inspect answer."""

    created_at: datetime | None = None
    started_at: datetime | None = None
    runtime: str | None = None
    os: str = ""
    ip_address: str = ""
    mac_address: str = ""
    hostname: str = ""
    labels: Mapping[str, str] = attrs.field(factory=dict)
    #: HostConfig's limits, or None when the answer had no HostConfig.
    cpu_limit: float | None = None
    memory_limit: int = 0
    memory_request: int = 0
    process_limit: int = 0


def container_view(inspect: Mapping[str, Any]) -> ContainerView:
    """The identity, addresses and limits of a container inspect answer."""
    host = _mapping(inspect.get("HostConfig"))
    config = _mapping(inspect.get("Config"))
    net = _mapping(inspect.get("NetworkSettings"))
    ip, mac = str(net.get("IPAddress") or ""), str(net.get("MacAddress") or "")
    for network in _mapping(net.get("Networks")).values():
        network = _mapping(network)
        ip = ip or str(network.get("IPAddress") or "")
        mac = mac or str(network.get("MacAddress") or "")
    labels = _mapping(config.get("Labels"))
    runtime = host.get("Runtime")
    return ContainerView(
        created_at=engine_time(inspect.get("Created")),
        started_at=container_state(inspect).started_at,
        runtime=str(runtime) if isinstance(runtime, str) else None,
        os=str(inspect.get("Platform") or ""),
        ip_address=ip, mac_address=mac, hostname=str(config.get("Hostname") or ""),
        labels={str(k): str(v) for k, v in labels.items()},
        cpu_limit=(_int(host.get("NanoCpus")) or 0) / 1e9 if host else None,
        memory_limit=_int(host.get("Memory")) or 0,
        memory_request=_int(host.get("MemoryReservation")) or 0,
        process_limit=_int(host.get("PidsLimit")) or 0,
    )
