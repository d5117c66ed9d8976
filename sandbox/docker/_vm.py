"""``type="vm"``: the Docker backend with a VM-isolated OCI runtime the engine registers.

Kata Containers (``kata-runtime``, or its containerd shim ``io.containerd.kata.v2``) and
firecracker-containerd (``aws.firecracker``) run each container in its own lightweight VM. The
runtime is picked from the engine's runtime list (`pick_vm_runtime`, pure); an engine with
none refuses the sandbox, naming them. Never silently another isolation level: a ``runtime``
that is not VM-isolated is refused too.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from .._errors import SandboxInitFailed

__all__ = ["VM_RUNTIMES", "pick_vm_runtime"]

#: VM-isolated runtimes, in order of preference, by the names engines register them under.
VM_RUNTIMES: Final = ("kata-runtime", "kata", "io.containerd.kata.v2", "kata-qemu",
                      "kata-fc", "kata-clh", "aws.firecracker", "firecracker")


def pick_vm_runtime(runtimes: Collection[str], asked: str = "") -> str:
    """The runtime a ``type="vm"`` sandbox runs under on an engine with ``runtimes``.

    ``asked`` (``SandboxConfig.runtime``; the default "runc" means no preference) must itself
    be VM-isolated and registered.

    Raises:
        SandboxInitFailed: No VM-isolated runtime is registered, or ``asked`` is not one.
    """
    have = ", ".join(sorted(runtimes)) or "none"
    if asked and asked != "runc":
        if asked not in VM_RUNTIMES:
            raise SandboxInitFailed(
                f"runtime: {asked!r} does not isolate with a VM, and type='vm' never falls "
                "back to another isolation level",
                details=f"use one of {', '.join(VM_RUNTIMES)}, or leave runtime unset")
        if asked not in runtimes:
            raise SandboxInitFailed(f"runtime: {asked!r} is not registered with the engine",
                                    details=f"the engine has: {have}")
        return asked
    for name in VM_RUNTIMES:
        if name in runtimes:
            return name
    raise SandboxInitFailed(
        "type: 'vm' needs a VM-isolated OCI runtime on the engine (Kata Containers' "
        "kata-runtime, or firecracker-containerd), and it has none",
        details=f"the engine's runtimes: {have}; register kata-runtime or firecracker-"
                "containerd with dockerd (it needs hardware or nested virtualization), or use "
                "type='docker' (runsc for gVisor) or type='process'")
