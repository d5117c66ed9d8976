"""SecurityPolicy to privilege options (sandbox/docker/_security.py), through the create plan."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sandbox._errors import ConfigError, SandboxInitFailed, SecurityViolation
from sandbox._models import SecurityPolicy
from sandbox.docker._facts import EngineFacts
from tests.unit._plan import host, plan, sec

# --- privileges -----------------------------------------------------------------------------


def test_no_new_privileges_needs_both_flags_off_to_drop() -> None:
    assert sec(no_new_privileges=False)["SecurityOpt"] == ["no-new-privileges:true"]
    assert sec(prevent_escalation=False)["SecurityOpt"] == ["no-new-privileges:true"]
    assert "SecurityOpt" not in sec(no_new_privileges=False, prevent_escalation=False)


def test_capabilities_normalized() -> None:
    h = sec(add_capabilities=("cap_net_admin", "NET_BIND_SERVICE", "net_admin"),
            drop_capabilities=("CAP_CHOWN", "setuid"))
    assert h["CapAdd"] == ["NET_ADMIN", "NET_BIND_SERVICE"]
    assert h["CapDrop"] == ["ALL"]


def test_adding_capabilities_is_an_opt_in() -> None:
    p = plan(security=SecurityPolicy(add_capabilities=("net_raw", "CHOWN")))
    assert p.body["HostConfig"]["CapAdd"] == ["NET_RAW", "CHOWN"]
    assert p.body["HostConfig"]["CapDrop"] == ["ALL"]
    assert p.opt_ins == ("security.add_capabilities: NET_RAW, CHOWN",)


def test_drop_all() -> None:
    h = sec(drop_capabilities=("all", "CHOWN"), add_capabilities=("KILL",))
    assert h["CapDrop"] == ["ALL"]
    assert h["CapAdd"] == ["KILL"]


def test_capability_added_and_dropped_refused() -> None:
    with pytest.raises(ConfigError, match=r"add_capabilities and .*drop_capabilities .*CHOWN"):
        sec(add_capabilities=("CHOWN",), drop_capabilities=("cap_chown",))


def test_unknown_capability_refused() -> None:
    with pytest.raises(ConfigError, match=r"security.add_capabilities: unknown capability 'FLY'"):
        sec(add_capabilities=("FLY",))


@pytest.mark.parametrize(
    "cap", ["SYS_ADMIN", "ALL", "sys_ptrace", "SYS_RESOURCE", "cap_sys_resource"]
)
def test_escalating_capability_needs_prevent_escalation_off(cap: str) -> None:
    with pytest.raises(SecurityViolation, match=r"security.add_capabilities: .*prevent_escal"):
        sec(add_capabilities=(cap,))
    h = sec(add_capabilities=(cap,), prevent_escalation=False)
    assert h["CapAdd"] == [cap.upper().removeprefix("CAP_")]


def test_host_pid() -> None:
    for policy in (
        SecurityPolicy(isolate_process=False),
        SecurityPolicy(isolate_process=False, allow_host_pid=True),
        SecurityPolicy(isolate_process=False, prevent_escalation=False),
    ):
        with pytest.raises(SecurityViolation, match=r"security.isolate_process.*allow_host_pid"):
            plan(security=policy)
    allowed = SecurityPolicy(isolate_process=False, allow_host_pid=True, prevent_escalation=False)
    assert host(security=allowed)["PidMode"] == "host"
    assert "PidMode" not in sec(allow_host_pid=True)
    with pytest.raises(SandboxInitFailed, match=r"gVisor"):
        plan(runtime="runsc", security=allowed)


# --- seccomp, AppArmor, SELinux -------------------------------------------------------------


@pytest.mark.parametrize("profile", ["", "runtime/default"])
def test_seccomp_engine_default(profile: str) -> None:
    assert sec(seccomp_profile=profile)["SecurityOpt"] == ["no-new-privileges:true"]


def test_seccomp_unconfined() -> None:
    h = sec(seccomp_profile="unconfined", prevent_escalation=False)
    assert h["SecurityOpt"] == ["no-new-privileges:true", "seccomp=unconfined"]
    with pytest.raises(SecurityViolation, match=r"security.seccomp_profile: 'unconfined'"):
        sec(seccomp_profile="unconfined")


def test_seccomp_file_sent_inline_compact(tmp_path: Path) -> None:
    profile = tmp_path / "p.json"
    profile.write_text('{\n  "defaultAction": "SCMP_ACT_ALLOW",\n  "syscalls": [\n'
                       '    {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO"}\n  ]\n}\n')
    h = sec(seccomp_profile=str(profile))
    assert h["SecurityOpt"][1] == ('seccomp={"defaultAction":"SCMP_ACT_ALLOW","syscalls":'
                                   '[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}')
    h = sec(seccomp_profile=' {"defaultAction": "SCMP_ACT_ERRNO"}')
    assert h["SecurityOpt"][1] == 'seccomp={"defaultAction":"SCMP_ACT_ERRNO"}'


ALLOW_ALL_PROFILES = [
    {},
    {"defaultAction": None},
    {"defaultAction": "SCMP_ACT_ALLOW"},
    {"defaultAction": "SCMP_ACT_LOG", "syscalls": []},
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": [], "action": "SCMP_ACT_ERRNO"}]},
    {"defaultAction": "SCMP_ACT_ALLOW",
     "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_LOG"}]},
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "includes": {"caps": ["SYS_ADMIN"]}}]},
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
        {"names": ["mkdir"], "action": "SCMP_ACT_ERRNO", "excludes": {"arches": ["amd64"]}}]},
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir"], "action": ["x"]}, 7]},
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": {"names": ["mkdir"]}},
]


@pytest.mark.parametrize("profile", ALLOW_ALL_PROFILES, ids=str)
def test_seccomp_default_allow_profile_needs_prevent_escalation_off(
    tmp_path: Path, profile: dict[str, Any]
) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile))
    for value in (str(path), json.dumps(profile)):
        with pytest.raises(SecurityViolation, match=r"^security.seccomp_profile: .* allows every "
                           r"syscall by default and no rule denies one"):
            sec(seccomp_profile=value)
        h = sec(seccomp_profile=value, prevent_escalation=False)
        assert h["SecurityOpt"][1] == "seccomp=" + json.dumps(profile, separators=(",", ":"))


@pytest.mark.parametrize("profile", [
    {"defaultAction": "SCMP_ACT_ERRNO"},
    {"defaultAction": "SCMP_ACT_KILL_PROCESS", "syscalls": []},
    *({"defaultAction": default, "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_LOG"},
                                              {"names": ["mkdirat"], "action": action}]}
      for default in ("SCMP_ACT_ALLOW", "SCMP_ACT_LOG")
      for action in ("SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                     "SCMP_ACT_KILL_THREAD", "SCMP_ACT_TRAP")),
    {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"name": "mkdir", "action": "SCMP_ACT_ERRNO",
                                                      "includes": {}}]},
], ids=str)
def test_seccomp_profile_that_denies_something_is_allowed(profile: dict[str, Any]) -> None:
    assert sec(seccomp_profile=json.dumps(profile))["SecurityOpt"][1].startswith("seccomp={")


def test_seccomp_file_problems(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    cannot_read = f"security.seccomp_profile: cannot read '{missing}'"
    with pytest.raises(SandboxInitFailed, match=re.escape(cannot_read)):
        sec(seccomp_profile=str(missing))
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(SandboxInitFailed, match=re.escape(f"'{bad}' is not valid JSON")):
        sec(seccomp_profile=str(bad))
    array = tmp_path / "array.json"
    array.write_text("[]")
    with pytest.raises(SandboxInitFailed, match=r"must hold a JSON object"):
        sec(seccomp_profile=str(array))
    with pytest.raises(SandboxInitFailed, match=r"cannot read"):
        sec(seccomp_profile=str(tmp_path))


def test_seccomp_profile_refused_on_runsc(tmp_path: Path) -> None:
    profile = tmp_path / "p.json"
    profile.write_text("{}")
    with pytest.raises(SandboxInitFailed, match=r"gVisor .* ignores seccomp"):
        plan(runtime="runsc", security=SecurityPolicy(seccomp_profile=str(profile)))


def test_apparmor() -> None:
    with pytest.raises(SecurityViolation, match=r"security.apparmor_profile: AppArmor is not"):
        sec(apparmor_profile="docker-default")
    engine = EngineFacts(runtimes=frozenset({"runc", "runsc"}),
                         security_options=("name=apparmor", "name=seccomp,profile=default"))
    h = host(engine, security=SecurityPolicy(apparmor_profile="docker-default"))
    assert h["SecurityOpt"] == ["no-new-privileges:true", "apparmor=docker-default"]
    with pytest.raises(SandboxInitFailed,
                       match=r"^security.apparmor_profile: gVisor \(runsc\) ignores AppArmor"):
        plan(engine, runtime="runsc", security=SecurityPolicy(apparmor_profile="docker-default"))


@pytest.mark.parametrize(
    ("context", "labels"),
    [
        ("type:svirt_t", ["label=type:svirt_t"]),
        ("type:container_t, level:s0:c1,c2", ["label=type:container_t", "label=level:s0:c1,c2"]),
        ("type:", None),
        ("type:t,c2", None),
        ("level:s0:c1,,", None),
        ("level:s0:c1", ["label=level:s0:c1"]),
        ("system_u:system_r:container_t:s0:c1,c2",
         ["label=user:system_u", "label=role:system_r", "label=type:container_t",
          "label=level:s0:c1,c2"]),
        ("disable", ["label=disable"]),
        ("nonsense", None),
    ],
)
def test_selinux(context: str, labels: list[str] | None) -> None:
    with pytest.raises(SecurityViolation, match=r"security.selinux_context: SELinux is not"):
        sec(selinux_context=context)
    engine = EngineFacts(security_options=("name=selinux",))
    policy = SecurityPolicy(selinux_context=context)
    if labels is None:
        with pytest.raises(ConfigError, match=r"security.selinux_context"):
            host(engine, security=policy)
    else:
        assert host(engine, security=policy)["SecurityOpt"] == ["no-new-privileges:true", *labels]
