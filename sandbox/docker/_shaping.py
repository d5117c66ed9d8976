"""Bandwidth limits: ``tc`` in the sandbox's network namespace, set from the engine's host.

``network.egress_limit`` / ``resources.network_out_limit`` (bytes per second; either, or both
equal) become a token-bucket (``tbf``) root qdisc on each of the sandbox's interfaces, so what
the sandbox sends waits in a queue. ``ingress_limit`` / ``network_in_limit`` become the same
qdisc on the host's end of each interface's veth pair: what the host sends into the sandbox
is what it receives. (An ingress policer would need the ``act_police`` module, which this
kernel lacks: "Failed to load TC action module", measured.) Loopback is left alone.

The sandbox never gets ``NET_ADMIN`` and cannot reach either qdisc: the SDK enters its
namespace from outside with ``nsenter -t <pid> -n tc ...`` and sets the veth's in its own.
That needs the SDK to run as root on the engine's host (a local engine, in the host's network
namespace), with ``nsenter`` (util-linux), ``tc`` and ``ip`` (iproute2) on its PATH; without
them the fields are refused before anything is made. The busybox ``tc`` applet cannot add
these qdiscs (measured), so a helper container from the test images would not do.

With an egress policy, everything the sandbox sends goes to its proxy: the limits then cap
its traffic through the proxy.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Final

import anyio
import attrs

from .._errors import ConfigError, SandboxInitFailed
from .._models import SandboxConfig
from ._gateway import Engine

__all__ = ["Shaping", "plan_shaping"]

#: Queue a sender may build before tbf drops: generous, so TCP is paced rather than cut.
LATENCY: Final = "400ms"
MIN_BURST: Final = 16 * 1024
_TIMEOUT: Final = 30.0


def _one(config: SandboxConfig, net_field: str, res_field: str) -> int:
    a, b = getattr(config.network, net_field), getattr(config.resources, res_field)
    if a and b and a != b:
        raise ConfigError(f"network.{net_field} ({a}) and resources.{res_field} ({b}) are the "
                          "same limit: give one, or both equal")
    return int(a or b)


@attrs.frozen(kw_only=True)
class Shaping:
    """Bytes per second each way; 0 = no limit."""

    egress: int = 0
    ingress: int = 0

    @staticmethod
    def tbf(device: str, rate: int) -> list[str]:
        """The ``tc`` arguments capping what `device` sends at `rate` bytes per second."""
        burst = max(MIN_BURST, rate // 10)
        return ["qdisc", "replace", "dev", device, "root", "tbf", "rate", f"{rate * 8}bit",
                "burst", str(burst), "latency", LATENCY]

    def check_host(self) -> None:
        """Refuse, before anything is made, when this process cannot set the limits."""
        missing = [tool for tool in ("nsenter", "tc", "ip") if shutil.which(tool) is None]
        if os.geteuid() != 0 or missing:
            why = f"{', '.join(missing)} not found" if missing else "this process is not root"
            raise SandboxInitFailed(
                "network.egress_limit/ingress_limit: the SDK sets them with tc in the sandbox's "
                f"network namespace from the engine's host, and {why}",
                details="run the SDK as root on the engine's host with iproute2 and util-linux "
                        "installed, or remove the bandwidth limits")

    async def apply(self, engine: Engine, container_id: str) -> None:
        """Set the limits in the started container's network namespace."""
        data = await engine.query_json("inspect the sandbox for its network namespace",
                                       f"containers/{container_id}/json")
        pid = int((data.get("State") or {}).get("Pid") or 0)
        proc = Path(f"/proc/{pid}")
        # Init=true makes PID 1 docker-init: a pid of another pid namespace would not be it.
        if not pid or not (proc / "comm").is_file() or \
                (proc / "comm").read_text().strip() != "docker-init":
            raise SandboxInitFailed(
                "network bandwidth limits: the sandbox's process is not visible from here, so "
                "the engine is not on this host", details="remove the limits, or run the SDK "
                "on the engine's host")
        for device in _devices((proc / "net" / "dev").read_text()):
            if self.egress:
                await self._run(["nsenter", "-t", str(pid), "-n", "tc",
                                 *self.tbf(device, self.egress)])
            if self.ingress:
                peer = _host_end(await self._run(["nsenter", "-t", str(pid), "-n", "ip", "-o",
                                                  "link", "show", "dev", device]))
                await self._run(["tc", *self.tbf(peer, self.ingress)])

    @staticmethod
    async def _run(argv: list[str]) -> str:
        with anyio.fail_after(_TIMEOUT):
            done = await anyio.run_process(argv, check=False)
        if done.returncode != 0:
            raise SandboxInitFailed(f"network bandwidth limits: {' '.join(argv)} failed",
                                    details=done.stderr.decode(errors="replace").strip())
        return done.stdout.decode()


def _devices(net_dev: str) -> list[str]:
    """Interface names from a ``/proc/<pid>/net/dev`` (that process's namespace), not lo."""
    names = [line.split(":", 1)[0].strip() for line in net_dev.splitlines()[2:] if ":" in line]
    return [name for name in names if name and name != "lo"]


def _host_end(link: str) -> str:
    """The host's end of a veth from ``ip -o link show`` in the sandbox ("2: eth0@if57: ...")."""
    head = link.split(":", 2)[1].strip() if link.count(":") >= 2 else ""
    index = head.rpartition("@if")[2]
    if index.isdigit():
        for entry in Path("/sys/class/net").iterdir():
            with contextlib.suppress(OSError):
                if (entry / "ifindex").read_text().strip() == index:
                    return entry.name
    raise SandboxInitFailed("network.ingress_limit: the host's end of the sandbox's interface "
                            "was not found here", details=f"ip link says: {link.strip()[:200]}; "
                            "the SDK must run in the engine host's network namespace")


def plan_shaping(config: SandboxConfig) -> Shaping | None:
    """The sandbox's bandwidth limits, or None (pure; `Shaping.check_host` checks the host)."""
    shaping = Shaping(egress=_one(config, "egress_limit", "network_out_limit"),
                      ingress=_one(config, "ingress_limit", "network_in_limit"))
    return shaping if shaping.egress or shaping.ingress else None
