"""What the engine can do, read once from its ``/info`` (and ``/version``): runtimes, cgroups,
storage, security features, host size, API version.

The create plan (`_plan`, `_resources`, `_security`) decides from these facts alone, so its
rules are unit-tested with recorded ones (tests/unit/data/engine_info.json).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any, Final

import attrs

__all__ = ["EngineFacts"]

#: `uname -m` names to Go's GOARCH names, which platforms use.
_GOARCH: Final = {
    "x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "armv6l": "arm", "i386": "386",
    "i686": "386", "ppc64le": "ppc64le", "s390x": "s390x", "riscv64": "riscv64",
}


@attrs.frozen(kw_only=True)
class EngineFacts:
    """What the engine can do, read once from ``GET /info`` (and ``/version`` if at hand).

    Attributes:
        runtimes: Names of the OCI runtimes the engine has, e.g. ``{"runc", "runsc"}``.
        runtime_paths: Each runtime's binary where reported, e.g. ``{"runsc": "/usr/bin/runsc"}``.
        runtime_args: Each runtime's extra arguments where reported, e.g.
            ``{"runsc": ("--network=none",)}``: ``--ignore-cgroups`` there turns off limits.
        default_runtime: Runtime used when a config names none.
        cgroup_version: ``"1"`` or ``"2"``; ``""`` when unknown.
        storage_driver: Storage driver, e.g. ``"overlay2"``.
        backing_filesystem: Filesystem under the storage driver, e.g. ``"extfs"`` or ``"xfs"``.
        security_options: ``SecurityOptions`` entries, e.g. ``"name=seccomp,profile=default"``.
        architecture: Engine architecture as a platform name (GOARCH), e.g. ``"amd64"``.
        mem_total: Host memory in bytes; 0 when unknown (no upper check).
        ncpu: Host CPUs; 0 when unknown (no upper check).
        api_version: Engine API version, e.g. ``"1.41"``; ``""`` when unknown.
        docker_root_dir: The engine's data root (``DockerRootDir``), e.g.
            ``"/var/lib/docker"``; ``""`` when unknown.
    """

    runtimes: frozenset[str] = frozenset({"runc"})
    runtime_paths: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    runtime_args: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, hash=False)
    default_runtime: str = "runc"
    cgroup_version: str = ""
    storage_driver: str = ""
    backing_filesystem: str = ""
    security_options: tuple[str, ...] = ()
    architecture: str = ""
    mem_total: int = 0
    ncpu: int = 0
    api_version: str = ""
    docker_root_dir: str = ""

    @classmethod
    def from_info(
        cls, info: Mapping[str, Any], version: Mapping[str, Any] | None = None
    ) -> EngineFacts:
        """Build the facts from the engine's /info (and /version) JSON; missing keys are unknown."""
        backing = ""
        for pair in info.get("DriverStatus") or ():
            if len(pair) == 2 and pair[0] == "Backing Filesystem":
                backing = str(pair[1])
        version = version or {}
        machine = str(info.get("Architecture") or "")
        runtimes: Mapping[str, Any] = info.get("Runtimes") or {}
        paths: dict[str, str] = {}
        args: dict[str, tuple[str, ...]] = {}
        for runtime, spec in runtimes.items():
            if isinstance(spec, Mapping):
                if spec.get("path"):
                    paths[runtime] = str(spec["path"])
                if spec.get("runtimeArgs"):
                    args[runtime] = tuple(str(arg) for arg in spec["runtimeArgs"])
        return cls(
            runtimes=frozenset(runtimes),
            runtime_paths=paths,
            runtime_args=args,
            default_runtime=str(info.get("DefaultRuntime") or "runc"),
            cgroup_version=str(info.get("CgroupVersion") or ""),
            storage_driver=str(info.get("Driver") or ""),
            backing_filesystem=backing,
            security_options=tuple(str(o) for o in info.get("SecurityOptions") or ()),
            architecture=str(version.get("Arch") or _GOARCH.get(machine, machine)),
            mem_total=int(info.get("MemTotal") or 0),
            ncpu=int(info.get("NCPU") or 0),
            api_version=str(version.get("ApiVersion") or ""),
            docker_root_dir=str(info.get("DockerRootDir") or ""),
        )

    def is_gvisor(self, runtime: str) -> bool:
        """Tell whether `runtime` is gVisor: named ``runsc*`` or running a ``runsc`` binary."""
        binary = posixpath.basename(self.runtime_paths.get(runtime, ""))
        return runtime.startswith("runsc") or binary.startswith("runsc")

    def ignores_cgroups(self, runtime: str) -> bool:
        """Tell whether `runtime` runs with gVisor's ``--ignore-cgroups`` (the last one wins)."""
        ignored = False
        for arg in self.runtime_args.get(runtime, ()):
            name, _, value = arg.lstrip("-").partition("=")
            if arg.startswith("-") and name == "ignore-cgroups":
                # Go's flag package: a bare flag is true, else 1/t/T/TRUE/true/True.
                ignored = not value or value.lower() in ("1", "t", "true")
        return ignored

    def has_security_option(self, name: str) -> bool:
        """Tell whether the engine reports the security feature `name` (``apparmor``...)."""
        return any(f"name={name}" in option.split(",") for option in self.security_options)

    def api_at_least(self, wanted: tuple[int, int]) -> bool:
        """Compare the API version; an unknown version counts as too old."""
        major, _, minor = self.api_version.partition(".")
        if not (major.isdigit() and minor.isdigit()):
            return False
        return (int(major), int(minor)) >= wanted
