"""Which config fields each backend refuses, asked of the backends' own planners.

The docs' "what each backend refuses" table is rendered from here (``python
scripts/refusals.py``: a documentation tool, outside the package, whose core imports no
backend) and a test keeps the docs' copy equal to it, so a claim such as
"``tools`` is refused" cannot outlive the code that refused it. Each probe sets one field to a
typical value and hands the config to the planner each backend runs at ``initialize()``
(Docker's ``plan_container``, the process backend's ``plan_sandbox``, Kubernetes'
``plan_pod``), on a stated host: an engine with runc and runsc (registered with
``--network=none``, as ``scripts/engine.sh`` does) and AppArmor; the process backend run as
root (cgroups, overlay and libseccomp available). Backends are imported only when asked.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import attrs

from sandbox._errors import ConfigError, SandboxInitFailed, SecurityViolation
from sandbox._models import (
    NetworkConfig,
    PortMapping,
    RepositoryConfig,
    ResourceLimits,
    SandboxConfig,
    SecurityPolicy,
)

__all__ = ["BACKENDS", "PROBES", "Probe", "refusals_markdown", "verdict"]

BACKENDS = ("docker", "process", "kubernetes")

_NET = NetworkConfig(isolated=False)


@attrs.frozen
class Probe:
    """One field set to a typical value: ``label`` names it as the docs do."""

    label: str
    config: SandboxConfig


def _cfg(**fields: object) -> SandboxConfig:
    return SandboxConfig(**fields)  # type: ignore[arg-type]


def _sec(**fields: object) -> SandboxConfig:
    return _cfg(security=SecurityPolicy(**fields))  # type: ignore[arg-type]


def _res(**fields: object) -> SandboxConfig:
    return _cfg(resources=ResourceLimits(**fields))  # type: ignore[arg-type]


def _net(**fields: object) -> SandboxConfig:
    network = attrs.evolve(_NET, **fields)  # type: ignore[arg-type]
    return _cfg(network=network,
                security=SecurityPolicy(allow_networking=True, isolate_network=False))


#: The fields some backend cannot enforce (every other field maps on every backend).
PROBES: tuple[Probe, ...] = (
    Probe("`tools`", _cfg(tools=("python3",))),
    Probe("`mcp_servers`", _cfg(mcp_servers=("files=python3 -m server",))),
    Probe("`runtime=\"runsc\"`", _cfg(runtime="runsc")),
    Probe("`pull_policy=\"always\"`", _cfg(pull_policy="always")),
    Probe("`repository` (`local_path`)", _cfg(repository=RepositoryConfig(local_path="/src"))),
    Probe("`repository.owner`", _cfg(repository=RepositoryConfig(local_path="/src",
                                                                  owner="1000"))),
    Probe("`resources.process_limit`", _res(process_limit=256)),
    Probe("`resources.file_limit`", _res(file_limit=256)),
    Probe("`resources.cpu_time_limit`", _res(cpu_time_limit=timedelta(seconds=60))),
    Probe("`resources.disk_limit`", _res(disk_limit=1 << 30)),
    Probe("`network.egress_limit`", _net(egress_limit=1 << 20)),
    Probe("`security.add_capabilities`", _sec(add_capabilities=("CHOWN",))),
    Probe("`security.apparmor_profile`", _sec(apparmor_profile="docker-default")),
    Probe("`security.read_only_paths`", _sec(read_only_paths=("/etc",))),
    Probe("`security.masked_paths`", _sec(masked_paths=("/etc/hostname",))),
    Probe("`network.allowed_hosts` (names)", _net(allowed_hosts=("pypi.org",))),
    Probe("`network.allowed_hosts` (CIDRs)", _net(allowed_hosts=("203.0.113.0/24",))),
    Probe("`network.dns_servers`", _net(dns_servers=("192.0.2.53",))),
    Probe("`network.port_mappings`", _net(port_mappings=(PortMapping(container_port=8000),))),
    Probe("`network.bridge=\"host\"`", _net(bridge="host")),
)


def _docker(cfg: SandboxConfig) -> None:
    from sandbox.docker._facts import EngineFacts
    from sandbox.docker._plan import plan_container

    engine = EngineFacts(
        runtimes=frozenset({"runc", "runsc"}), runtime_args={"runsc": ("--network=none",)},
        cgroup_version="1", storage_driver="overlay2", backing_filesystem="extfs",
        security_options=("name=seccomp,profile=default", "name=apparmor"),
        architecture="amd64", mem_total=8 << 30, ncpu=2, api_version="1.41")
    plan_container(cfg, name="probe", labels={}, engine=engine, command=["sleep", "inf"])


def _process(cfg: SandboxConfig) -> None:
    from sandbox.process._plan import plan_sandbox

    plan_sandbox(cfg, lookup=lambda _db, _name: 1000, cgroup_problem="",
                 architecture="amd64", host=(2, 8 << 30))


def _kubernetes(cfg: SandboxConfig) -> None:
    from sandbox.kubernetes._plan import plan_pod

    plan_pod(cfg, name="probe", namespace="default", labels={}, annotations={},
             runtime_classes={"runsc": "gvisor"})


_PLANNERS: dict[str, Callable[[SandboxConfig], None]] = {
    "docker": _docker, "process": _process, "kubernetes": _kubernetes}


def verdict(backend: str, cfg: SandboxConfig) -> str:
    """``"yes"`` when `backend`'s planner takes `cfg`, else ``"refused: why"``."""
    try:
        _PLANNERS[backend](cfg)
    except (SandboxInitFailed, SecurityViolation, ConfigError) as exc:
        why = exc.message.split(": ", 1)[-1] if ": " in exc.message else exc.message
        return "refused: " + why.replace("|", "\\|").replace("\n", " ")
    return "yes"


def refusals_markdown() -> str:
    """The docs' table: one row per probe, one column per backend."""
    rows = ["| field (probe) | " + " | ".join(BACKENDS) + " |",
            "|---|" + "---|" * len(BACKENDS)]
    for probe in PROBES:
        rows.append(f"| {probe.label} | "
                    + " | ".join(verdict(b, probe.config) for b in BACKENDS) + " |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(refusals_markdown(), end="")
