"""SandboxConfig -> Pod + NetworkPolicy: every field mapped, or refused with its reason."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from sandbox import SandboxConfig
from sandbox._errors import ConfigError, SandboxInitFailed, SecurityViolation
from sandbox._models import (
    NetworkConfig,
    PortMapping,
    RepositoryConfig,
    ResourceLimits,
    SecurityPolicy,
)
from sandbox.kubernetes._plan import KEEPALIVE, PodPlan, plan_pod

LABELS = {"io.sandbox.managed-by": "sandbox-sdk", "io.sandbox.id": "abc"}
NETWORKED = {"network": NetworkConfig(isolated=False),
             "security": SecurityPolicy(allow_networking=True, isolate_network=False)}


def plan(runtime_classes: dict[str, str] | None = None, **fields: Any) -> PodPlan:
    return plan_pod(SandboxConfig(type="kubernetes", image="busybox:1.36", **fields),
                    name="sandbox-abc", namespace="ns", labels=LABELS,
                    annotations={"io.sandbox.owner.pid": "1"},
                    runtime_classes=runtime_classes or {})


def container(p: PodPlan) -> dict[str, Any]:
    result: dict[str, Any] = p.pod["spec"]["containers"][0]
    return result


def test_defaults_are_locked_down() -> None:
    p = plan(environment={"SECRET": "x"}, labels={"team": "a"}, annotations={"note": "n"})
    spec, c = p.pod["spec"], container(p)
    assert c["command"] == list(KEEPALIVE) and c["image"] == "busybox:1.36"
    assert c["securityContext"] == {
        "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
        "readOnlyRootFilesystem": False, "allowPrivilegeEscalation": False,
        "privileged": False, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}}
    assert c["resources"] == {"limits": {"cpu": "2000m", "memory": str(2 << 30)}}
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False and spec["hostPID"] is False
    assert spec["restartPolicy"] == "Never" and "runtimeClassName" not in spec
    assert spec["securityContext"] == {"fsGroup": 1000, "runAsNonRoot": True}
    # The working dir is an emptyDir the sandbox group owns; the config's variables are
    # given per exec (so set_environment can remove them), never in the Pod.
    assert c["workingDir"] == "/workspace"
    assert {"name": "workdir", "mountPath": "/workspace"} in c["volumeMounts"]
    assert c["env"] == []
    assert p.pod["metadata"]["labels"] == {"team": "a", **LABELS}
    assert p.pod["metadata"]["annotations"] == {"note": "n", "io.sandbox.owner.pid": "1"}
    assert p.user == "1000:1000" and p.opt_ins == ()
    # Deny everything, both ways, for exactly this Pod.
    assert p.policy["spec"] == {"podSelector": {"matchLabels": LABELS},
                                "policyTypes": ["Ingress", "Egress"], "ingress": [],
                                "egress": []}


def test_resources_runtime_and_limits() -> None:
    p = plan(runtime="runsc", architecture="arm64", resources=ResourceLimits(
        cpu_limit=0.5, cpu_request=0.25, memory_limit=256 << 20, memory_request=128 << 20,
        disk_limit=1 << 30, disk_request=1 << 20, wall_time_limit=timedelta(seconds=90.5)))
    spec = p.pod["spec"]
    assert container(p)["resources"] == {
        "limits": {"cpu": "500m", "memory": str(256 << 20), "ephemeral-storage": str(1 << 30)},
        "requests": {"cpu": "250m", "memory": str(128 << 20),
                     "ephemeral-storage": str(1 << 20)}}
    assert spec["runtimeClassName"] == "gvisor"
    assert spec["activeDeadlineSeconds"] == 91
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert plan({"runsc": "gvisor-ptrace", "kata": "kata-qemu"},
                runtime="kata").pod["spec"]["runtimeClassName"] == "kata-qemu"


def test_root_spelled_as_numbers_is_an_audited_opt_in() -> None:
    p = plan(security=SecurityPolicy(run_as_user="00", run_as_group="+0"))
    sc = container(p)["securityContext"]
    assert (sc["runAsUser"], sc["runAsGroup"], p.user) == (0, 0, "0:0")
    assert p.opt_ins == ("security.run_as_user: 00 (root)", "security.run_as_group: +0 (root)")
    p = plan(security=SecurityPolicy(run_as_user="+01234"))
    assert (container(p)["securityContext"]["runAsUser"], p.opt_ins) == (1234, ())


def test_security_mapping() -> None:
    p = plan(security=SecurityPolicy(
        run_as_user="0", run_as_group="0", read_only_root=True, prevent_escalation=False,
        no_new_privileges=False, add_capabilities=("cap_net_bind_service",),
        seccomp_profile="localhost/profiles/deny.json", apparmor_profile="my-profile",
        selinux_context="system_u:system_r:container_t:s0",
        tmpfs_paths=("/cache:size=64m",)))
    sc = container(p)["securityContext"]
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is True
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}
    assert sc["seccompProfile"] == {"type": "Localhost",
                                    "localhostProfile": "profiles/deny.json"}
    assert sc["appArmorProfile"] == {"type": "Localhost", "localhostProfile": "my-profile"}
    assert sc["seLinuxOptions"] == {"user": "system_u", "role": "system_r",
                                    "type": "container_t", "level": "s0"}
    vols = {m["mountPath"]: m["name"] for m in container(p)["volumeMounts"]}
    dirs = {v["name"]: v["emptyDir"] for v in p.pod["spec"]["volumes"]}
    assert dirs[vols["/cache"]] == {"medium": "Memory", "sizeLimit": "64Mi"}
    assert dirs[vols["/tmp"]] == {"medium": "Memory"}
    assert dirs[vols["/workspace"]] == {"medium": "Memory"}
    assert p.user == "0:0"
    assert len(p.opt_ins) == 3  # root user, root group, a capability


def test_egress_policy_from_cidrs_and_ports() -> None:
    p = plan(network=NetworkConfig(isolated=False, allowed_hosts=("10.0.0.0/8",),
                                   blocked_hosts=("10.1.0.0/16",), allowed_ports=(443,),
                                   http_proxy="http://proxy:3128"),
             security=SecurityPolicy(allow_networking=True, isolate_network=False))
    assert p.policy["spec"]["egress"] == [{
        "to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}],
        "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "UDP", "port": 443}]}]
    assert {"name": "HTTP_PROXY", "value": "http://proxy:3128"} in container(p)["env"]
    open_egress = plan(**NETWORKED).policy["spec"]["egress"]
    assert open_egress == [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}},
                                   {"ipBlock": {"cidr": "::/0"}}]}]


@pytest.mark.parametrize(("fields", "field"), [
    ({"repository": RepositoryConfig(local_path="/src")}, "repository"),
    ({"tools": ("git",)}, "tools"),
    ({"resources": ResourceLimits(process_limit=100)}, "resources.process_limit"),
    ({"resources": ResourceLimits(file_limit=100)}, "resources.file_limit"),
    ({"resources": ResourceLimits(cpu_time_limit=timedelta(seconds=5))},
     "resources.cpu_time_limit"),
    ({"resources": ResourceLimits(network_in_limit=1000)}, "network_"),
    ({"network": NetworkConfig(bridge="br0")}, "network.bridge"),
    ({"network": NetworkConfig(isolated=False, port_mappings=(PortMapping(container_port=80),)),
      "security": NETWORKED["security"]}, "network.port_mappings"),
    ({"security": SecurityPolicy(masked_paths=("/etc",))}, "masked_paths"),
    ({"security": SecurityPolicy(run_as_user="nobody")}, "security.run_as_user"),
    ({"security": SecurityPolicy(seccomp_profile="/etc/profile.json")},
     "security.seccomp_profile"),
    ({"security": SecurityPolicy(tmpfs_paths=("/x:noexec",))}, "security.tmpfs_paths"),
    ({"runtime": "kata"}, "runtime"),
    ({"runtime": "runsc", "security": SecurityPolicy(apparmor_profile="p")},
     "security.apparmor_profile"),
    ({"network": NetworkConfig(isolated=False, allowed_hosts=("pypi.org",)),
      "security": NETWORKED["security"]}, "network.allowed_hosts"),
    ({"network": NetworkConfig(allowed_ports=(443,))}, "allowed_ports"),
])
def test_unmappable_fields_are_refused_with_the_field_named(fields: dict[str, Any],
                                                            field: str) -> None:
    with pytest.raises(SandboxInitFailed) as info:
        plan(**fields)
    assert field in info.value.message


@pytest.mark.parametrize("security", [
    SecurityPolicy(add_capabilities=("SYS_ADMIN",)),
    SecurityPolicy(seccomp_profile="unconfined"),
    SecurityPolicy(isolate_process=False, allow_host_pid=True),
])
def test_escalation_is_a_security_violation(security: SecurityPolicy) -> None:
    with pytest.raises(SecurityViolation):
        plan(security=security)


def test_bad_values_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="Pod name"):
        plan_pod(SandboxConfig(type="kubernetes"), name="Bad_Name", namespace="ns",
                 labels=LABELS, annotations={}, runtime_classes={})
    with pytest.raises(ConfigError, match="reserved"):
        plan(labels={"io.sandbox.id": "forged"})
    with pytest.raises(ConfigError, match="absolute"):
        plan(working_dir="rel")
