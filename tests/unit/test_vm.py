"""type="vm": the VM-isolated runtime is picked from the engine's list, or refused by name."""

from __future__ import annotations

import pytest

from sandbox import SandboxInitFailed
from sandbox.docker._vm import VM_RUNTIMES, pick_vm_runtime


def test_an_engine_without_a_vm_runtime_refuses_naming_them() -> None:
    with pytest.raises(SandboxInitFailed, match=r"kata-runtime.*firecracker-containerd") as info:
        pick_vm_runtime({"runc", "runsc"})
    assert "runc, runsc" in (info.value.details or "")


@pytest.mark.parametrize(("registered", "picked"), [
    ({"runc", "kata-runtime"}, "kata-runtime"),
    ({"runc", "io.containerd.kata.v2"}, "io.containerd.kata.v2"),
    ({"runsc", "aws.firecracker"}, "aws.firecracker"),
    ({"aws.firecracker", "kata-runtime"}, "kata-runtime"),
])
def test_the_engines_vm_runtime_is_picked(registered: set[str], picked: str) -> None:
    assert pick_vm_runtime(registered) == picked
    assert pick_vm_runtime(registered, "runc") == picked  # the default is no preference


def test_an_asked_runtime_must_isolate_with_a_vm_and_be_registered() -> None:
    with pytest.raises(SandboxInitFailed, match="never falls back"):
        pick_vm_runtime({"runsc", "kata-runtime"}, "runsc")
    with pytest.raises(SandboxInitFailed, match="not registered"):
        pick_vm_runtime({"runc"}, "kata-clh")
    assert pick_vm_runtime({"kata-clh", "kata-runtime"}, "kata-clh") == "kata-clh"
    assert "runsc" not in VM_RUNTIMES and "runc" not in VM_RUNTIMES
