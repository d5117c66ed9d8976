"""The default resource limits of every backend, defined once, and how each backend holds them.

A limit left 0 in `ResourceLimits` gets the value `default_limits` gives for the host the
sandbox runs on; the Docker backend (`docker._resources`) and the process backend
(`process._plan`) both read it from here. `ENFORCEMENT` says how each backend holds each
default, and `defaults_markdown` renders that table for the README
(``python -m sandbox._limits``).
"""

from __future__ import annotations

import os
from typing import Final

import attrs

from ._constants import (
    DEFAULT_CPU_LIMIT,
    DEFAULT_FILE_LIMIT,
    DEFAULT_MEMORY_HOST_FRACTION,
    DEFAULT_MEMORY_LIMIT,
    DEFAULT_PROCESS_LIMIT,
)
from ._models import ResourceLimits

__all__ = ["ENFORCEMENT", "MIN_MEMORY", "Enforcement", "default_cpu_limit", "default_limits",
           "default_memory_limit", "defaults_markdown", "host_size", "with_defaults"]

#: Docker refuses smaller memory limits; no default is below it.
MIN_MEMORY: Final = 6 * 2**20


def default_cpu_limit(ncpu: int) -> float:
    """min(2, the host's CPUs) cores; 1 when the host's count is unknown (0)."""
    return min(DEFAULT_CPU_LIMIT, float(ncpu)) if ncpu else 1.0


def default_memory_limit(mem_total: int) -> int:
    """min(2 GiB, a quarter of the host's memory), at least 6 MiB; 2 GiB when unknown (0)."""
    if not mem_total:
        return DEFAULT_MEMORY_LIMIT
    return max(MIN_MEMORY, min(DEFAULT_MEMORY_LIMIT, mem_total // DEFAULT_MEMORY_HOST_FRACTION))


def default_limits(ncpu: int, mem_total: int) -> ResourceLimits:
    """The defaulted limits on a host with ``ncpu`` CPUs and ``mem_total`` bytes of memory."""
    return ResourceLimits(cpu_limit=default_cpu_limit(ncpu),
                          memory_limit=default_memory_limit(mem_total),
                          process_limit=DEFAULT_PROCESS_LIMIT, file_limit=DEFAULT_FILE_LIMIT)


def with_defaults(res: ResourceLimits, ncpu: int, mem_total: int) -> ResourceLimits:
    """``res`` with each defaulted limit left 0 set to its default (a request above the
    default memory or CPU limit raises the limit to the request, as on Docker)."""
    base = default_limits(ncpu, mem_total)
    return attrs.evolve(
        res, cpu_limit=res.cpu_limit or max(base.cpu_limit, res.cpu_request),
        memory_limit=res.memory_limit or max(base.memory_limit, res.memory_request),
        process_limit=res.process_limit or base.process_limit,
        file_limit=res.file_limit or base.file_limit)


def host_size() -> tuple[int, int]:
    """This host's (CPUs, bytes of memory), for a backend that runs here (0 when unknown)."""
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    return os.cpu_count() or 0, mem


@attrs.frozen(kw_only=True)
class Enforcement:
    """One defaulted limit: its default and how each backend holds it."""

    field: str
    default: str
    docker: str
    process_cgroup: str  # the process backend where the SDK can make a cgroup (root)
    process_rlimit: str  # where it cannot (an unprivileged user on cgroup v1)
    kubernetes: str


ENFORCEMENT: Final = (
    Enforcement(field="memory_limit", default="min(2 GiB, host memory / 4)",
                docker="cgroup memory (+swap) limit: the sandbox's total; OOM kill (none under "
                       "a runtime registered with --ignore-cgroups)",
                process_cgroup="cgroup memory (+swap) limit: the sandbox's total; OOM kill",
                process_rlimit="RLIMIT_AS per process (MemoryError / ENOMEM), not a total",
                kubernetes="Pod memory limit, 2 GiB (the node's size is not known)"),
    Enforcement(field="process_limit", default=str(DEFAULT_PROCESS_LIMIT),
                docker="pids cgroup (gVisor: RLIMIT_NPROC); fork fails with EAGAIN",
                process_cgroup="pids cgroup; fork fails with EAGAIN",
                process_rlimit="RLIMIT_NPROC of the sandbox user in the sandbox's own user "
                               "namespace (counts only that sandbox); fork fails with EAGAIN",
                kubernetes="the kubelet's podPidsLimit, not the SDK's (refused when set)"),
    Enforcement(field="cpu_limit", default="min(2, host CPUs) cores",
                docker="CFS quota (NanoCpus; none under --ignore-cgroups)",
                process_cgroup="cgroup CFS quota, 100 ms period",
                process_rlimit="none: refused unless the default is all of the host's CPUs "
                               "or `allow_unbounded` names it",
                kubernetes="Pod CPU limit, 2 cores"),
    Enforcement(field="file_limit", default=str(DEFAULT_FILE_LIMIT),
                docker="ulimit nofile (soft = hard)",
                process_cgroup="RLIMIT_NOFILE (soft = hard)",
                process_rlimit="RLIMIT_NOFILE (soft = hard)",
                kubernetes="the container runtime's default, not the SDK's (refused when "
                           "set)"),
)


def defaults_markdown() -> str:
    """The defaults table as Markdown, for the README."""
    rows = ["| limit (`ResourceLimits`) | default | Docker | process, as root (cgroup) | "
            "process, unprivileged (rlimits) | Kubernetes |", "|---|---|---|---|---|---|"]
    rows += [f"| `{e.field}` | {e.default} | {e.docker} | {e.process_cgroup} | "
             f"{e.process_rlimit} | {e.kubernetes} |" for e in ENFORCEMENT]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(defaults_markdown(), end="")
