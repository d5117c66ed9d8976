"""Map `ResourceLimits` to the engine's resource options: CPU, memory, processes, open files,
CPU time and disk, sized from the engine's host when left at 0.

Pure, like the rest of the create plan (`_plan`), whose docstring table lists each field's
mapping. It refuses a limit this engine or runtime would not enforce rather than dropping it.

Measured on this engine (20.10, API 1.41):

* runsc charges the pids cgroup with its own host threads (about 40 idle, some 750 with 100
  guest processes) and, at the limit, the whole sandbox dies instead of fork returning
  EAGAIN. RLIMIT_NPROC is enforced inside gVisor's kernel, per sandbox, for root too (without
  CAP_SYS_ADMIN / CAP_SYS_RESOURCE), so runsc gets ulimit ``nproc`` and no ``PidsLimit``.
* runsc enforces ``Memory``, but going over it kills the whole sandbox (``OOMKilled``), even
  when an exec allocated the memory; under runc only that exec dies.
* runsc with ``--ignore-cgroups`` enforces no memory, CPU or pids cgroup limit (a memory hog
  outlived a 64 MiB limit for 20 s); ``EngineFacts.runtime_args`` shows the flag.
"""

from __future__ import annotations

import math
from typing import Any, Final

from .. import _limits
from .._constants import DEFAULT_FILE_LIMIT, DEFAULT_PROCESS_LIMIT
from .._errors import ConfigError, SandboxInitFailed
from .._models import ResourceLimits
from ._facts import EngineFacts

__all__ = ["default_cpu_limit", "default_memory_limit", "resource_options"]

#: The engine refuses smaller memory limits and reservations.
MIN_MEMORY: Final = _limits.MIN_MEMORY
#: The smallest CPU quota the kernel takes is 1 ms per 100 ms period.
MIN_CPU_LIMIT: Final = 0.01
#: Fewer leaves no room for docker-init, the keep-alive and the SDK's own helper execs.
MIN_PROCESS_LIMIT: Final = 8
#: The kernel's PID_MAX_LIMIT on 64-bit; pids.max refuses anything larger.
MAX_PROCESS_LIMIT: Final = 4 * 1024 * 1024
#: The kernel clamps smaller cgroup v1 shares to 2.
MIN_CPU_SHARES: Final = 2
#: Storage drivers that can cap a container's writable layer (StorageOpt size).
#: Limits that only cgroups enforce; process_limit is RLIMIT_NPROC under gVisor, not a cgroup.
_CGROUP_LIMITS: Final = ("cpu_limit", "cpu_request", "memory_limit", "memory_request")


def resource_options(
    res: ResourceLimits, runtime: str, engine: EngineFacts, host: dict[str, Any]
) -> int:
    """Fill the resource options of `host` and return the process limit in force."""
    gvisor = engine.is_gvisor(runtime)
    if engine.ignores_cgroups(runtime):
        cgroup_limited = [f"resources.{field}" for field in _CGROUP_LIMITS if getattr(res, field)]
        if cgroup_limited:
            raise SandboxInitFailed(
                f"{', '.join(cgroup_limited)}: runtime {runtime!r} runs with --ignore-cgroups, "
                "so the engine would not enforce it",
                details="use runtime 'runc', or register the runtime without --ignore-cgroups",
            )
    # 0 means the SDK's default, sized from the host (the engine's view of it, so a remote
    # engine gets its own numbers); --ignore-cgroups would not enforce it, so none there.
    cpu_limit, memory_limit = res.cpu_limit, res.memory_limit
    if not engine.ignores_cgroups(runtime):
        cpu_limit = cpu_limit or max(default_cpu_limit(engine), res.cpu_request)
        memory_limit = memory_limit or max(default_memory_limit(engine), res.memory_request)
    # Defaults are in range by construction, or equal the request, which is checked below.
    if res.cpu_limit:
        if cpu_limit < MIN_CPU_LIMIT:
            raise SandboxInitFailed(
                f"resources.cpu_limit: {cpu_limit:g} cores is below the minimum of "
                f"{MIN_CPU_LIMIT:g}"
            )
        _check_max("resources.cpu_limit", cpu_limit, engine.ncpu, "CPUs")
    if cpu_limit:
        host["NanoCpus"] = round(cpu_limit * 1e9)
    if res.cpu_request:
        _check_max("resources.cpu_request", res.cpu_request, engine.ncpu, "CPUs")
        if res.cpu_limit and res.cpu_request > res.cpu_limit:
            raise ConfigError(
                f"resources.cpu_request ({res.cpu_request:g}) must not exceed "
                f"resources.cpu_limit ({res.cpu_limit:g})"
            )
        host["CpuShares"] = max(MIN_CPU_SHARES, round(res.cpu_request * 1024))
    if res.memory_limit:
        _check_memory("resources.memory_limit", memory_limit, engine)
    if memory_limit:
        host["Memory"] = memory_limit
        # Equal to Memory: no swap, so the limit is the limit.
        host["MemorySwap"] = memory_limit
    if res.memory_request:
        _check_memory("resources.memory_request", res.memory_request, engine)
        if res.memory_limit and res.memory_request > res.memory_limit:
            raise ConfigError(
                f"resources.memory_request ({res.memory_request}) must not exceed "
                f"resources.memory_limit ({res.memory_limit})"
            )
        host["MemoryReservation"] = res.memory_request

    ulimits: list[dict[str, Any]] = []
    processes = res.process_limit or DEFAULT_PROCESS_LIMIT
    if processes < MIN_PROCESS_LIMIT:
        raise SandboxInitFailed(
            f"resources.process_limit: {processes} is below the minimum of {MIN_PROCESS_LIMIT}",
            details="docker-init, the keep-alive and the SDK's helper commands need processes too",
        )
    if processes > MAX_PROCESS_LIMIT:
        raise SandboxInitFailed(
            f"resources.process_limit: {processes} is more than the kernel's maximum of "
            f"{MAX_PROCESS_LIMIT}", details="the pids cgroup rejects larger values")
    if gvisor:
        # See the module docstring: a pids cgroup limit kills gVisor itself when reached.
        ulimits.append(_ulimit("nproc", processes))
    else:
        host["PidsLimit"] = processes
    # Always: the engine's own default (20,000 here) times the process limit is 8 times the
    # host's fs.file-max (`_constants.DEFAULT_FILE_LIMIT`).
    ulimits.append(_ulimit("nofile", res.file_limit or DEFAULT_FILE_LIMIT))
    if res.cpu_time_limit:
        if gvisor:
            raise SandboxInitFailed(
                "resources.cpu_time_limit: gVisor (runsc) does not enforce RLIMIT_CPU",
                details="use runtime 'runc', or resources.wall_time_limit",
            )
        seconds = math.ceil(res.cpu_time_limit.total_seconds())
        # Soft < hard: the kernel sends SIGXCPU at the soft limit, so the result says why;
        # at soft == hard it sends SIGKILL, which reads like any other kill (measured).
        ulimits.append(_ulimit("cpu", seconds, hard=seconds + 1))
    if ulimits:
        host["Ulimits"] = ulimits
    return processes


def default_cpu_limit(engine: EngineFacts) -> float:
    """The CPU limit a sandbox gets when ``resources.cpu_limit`` is 0 (`_limits`)."""
    return _limits.default_cpu_limit(engine.ncpu)


def default_memory_limit(engine: EngineFacts) -> int:
    """The memory limit a sandbox gets when ``resources.memory_limit`` is 0 (`_limits`),
    sized from the engine's host."""
    return _limits.default_memory_limit(engine.mem_total)


def _ulimit(name: str, value: int, *, hard: int | None = None) -> dict[str, Any]:
    return {"Name": name, "Soft": value, "Hard": value if hard is None else hard}


def _check_max(field: str, value: float, maximum: int, unit: str) -> None:
    if maximum and value > maximum:
        raise SandboxInitFailed(
            f"{field}: {value:g} is more than the engine's {maximum} {unit}"
        )


def _check_memory(field: str, value: int, engine: EngineFacts) -> None:
    if value < MIN_MEMORY:
        raise SandboxInitFailed(f"{field}: the engine's minimum is 6 MiB, got {value} bytes",
                                details="the unit is bytes: 512 MiB is 512 << 20 (536870912)")
    if engine.mem_total and value > engine.mem_total:
        raise SandboxInitFailed(
            f"{field}: {value} bytes is more than the engine's {engine.mem_total} bytes of memory"
        )
