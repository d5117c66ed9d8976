"""Shared set-up for the create-plan unit tests: a recorded engine and plan_container shortcuts."""

from __future__ import annotations

from typing import Any

from sandbox._models import NetworkConfig, ResourceLimits, SandboxConfig, SecurityPolicy
from sandbox.docker._facts import EngineFacts
from sandbox.docker._plan import CreatePlan, plan_container

ENGINE = EngineFacts(
    runtimes=frozenset({"runc", "runsc", "io.containerd.runc.v2"}),
    cgroup_version="1",
    storage_driver="overlay2",
    backing_filesystem="extfs",
    security_options=("name=seccomp,profile=default",),
    architecture="amd64",
    mem_total=8 * 2**30,
    ncpu=4,
    api_version="1.41",
)
LABELS = {"io.sandbox.managed-by": "sandbox-sdk", "io.sandbox.id": "abc"}
CMD = ["sleep", "infinity"]
NETWORKED = NetworkConfig(isolated=False)
OPEN = SecurityPolicy(allow_networking=True, isolate_network=False)
MiB = 2**20


def plan(engine: EngineFacts = ENGINE, **config: Any) -> CreatePlan:
    return plan_container(
        SandboxConfig(**config), name="sbx-1", labels=LABELS, engine=engine, command=CMD
    )


def host(engine: EngineFacts = ENGINE, **config: Any) -> dict[str, Any]:
    result: dict[str, Any] = plan(engine, **config).body["HostConfig"]
    return result


def res(**limits: Any) -> dict[str, Any]:
    return host(resources=ResourceLimits(**limits))


def sec(**policy: Any) -> dict[str, Any]:
    return host(security=SecurityPolicy(**policy))
