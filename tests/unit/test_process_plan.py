"""The process backend's plan: every config field mapped or refused with its name (pure)."""

from __future__ import annotations

import json
import os
import resource
from datetime import timedelta
from pathlib import Path

import pytest

from sandbox import (
    ConfigError,
    LimitNotEnforceable,
    NetworkConfig,
    ResourceLimits,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
    SecurityViolation,
)
from sandbox._constants import DEFAULT_FILE_LIMIT, DEFAULT_PROCESS_LIMIT
from sandbox._limits import default_limits
from sandbox.process import _bwrap
from sandbox.process._plan import ProcessPlan, plan_sandbox


def lookup(kind: str, name: str) -> int | None:
    return {("passwd", "app"): 1234, ("passwd-gid", "app"): 1235,
            ("group", "staff"): 50}.get((kind, name))


def plan(cfg: SandboxConfig, problem: str = "", image_user: str = "") -> object:
    return plan_sandbox(cfg, image_user=image_user, lookup=lookup, cgroup_problem=problem,
                        architecture="amd64")


def cfg(**kw: object) -> SandboxConfig:
    return SandboxConfig(type="process", **kw)  # type: ignore[arg-type]


def test_defaults_and_users() -> None:
    p = plan_sandbox(cfg(), lookup=lookup, cgroup_problem="", architecture="amd64")
    assert (p.uid, p.gid, p.host_network, p.rlimits) == (1000, 1000, False, ())
    assert p.cgroup is not None and p.cgroup.process_limit == DEFAULT_PROCESS_LIMIT
    p = plan_sandbox(cfg(security=SecurityPolicy(run_as_user="app", run_as_group="staff")),
                     lookup=lookup, cgroup_problem="")
    assert (p.uid, p.gid) == (1234, 50)
    p = plan_sandbox(cfg(), image_user="app", lookup=lookup, cgroup_problem="")
    assert (p.uid, p.gid) == (1234, 1235)
    p = plan_sandbox(cfg(), image_user="root", lookup=lookup, cgroup_problem="")
    assert (p.uid, p.gid) == (1000, 1000)  # an image's root user is never taken
    with pytest.raises(ConfigError, match="not in the image's /etc/passwd"):
        plan(cfg(security=SecurityPolicy(run_as_user="ghost")))


@pytest.mark.parametrize(("config", "field"), [
    (cfg(security=SecurityPolicy(run_as_user="0")), "security.run_as_user"),
    (cfg(security=SecurityPolicy(run_as_group="root")), "security.run_as_group"),
    (cfg(runtime="runsc"), "runtime"),
    (cfg(architecture="arm64"), "architecture"),
    (cfg(pull_policy="always"), "pull_policy"),
    (cfg(resources=ResourceLimits(disk_limit=1)), "resources.disk_limit"),
    (cfg(resources=ResourceLimits(network_out_limit=1)), "resources.network_out_limit"),
    (cfg(security=SecurityPolicy(add_capabilities=("NET_ADMIN",))),
     "security.add_capabilities"),
    (cfg(security=SecurityPolicy(apparmor_profile="x")), "security.apparmor_profile"),
    (cfg(security=SecurityPolicy(isolate_process=False, allow_host_pid=True)),
     "security.isolate_process"),
    (cfg(network=NetworkConfig(dns_servers=("1.1.1.1",))), "network.dns_servers"),
    (cfg(security=SecurityPolicy(allowed_hosts=("x",))), "security.allowed_hosts"),
    (cfg(tools=("git",)), "tools"),
    (cfg(security=SecurityPolicy(allow_networking=True, isolate_network=False),
         network=NetworkConfig(isolated=False)), "security.allow_networking"),
    (cfg(security=SecurityPolicy(tmpfs_paths=("/x:uid=5",))), "security.tmpfs_paths"),
])
def test_what_cannot_be_enforced_is_refused_by_name(config: SandboxConfig, field: str) -> None:
    with pytest.raises(SandboxInitFailed, match=f"^{field}: "):
        plan(config)


NO_CGROUP = "the cgroup v1 hierarchies under /sys/fs/cgroup are not writable by uid 65534"
GiB = 1 << 30


def limits(config: SandboxConfig, problem: str, host: tuple[int, int]) -> ProcessPlan:
    return plan_sandbox(config, lookup=lookup, cgroup_problem=problem, host=host)


def test_defaults_are_dockers_in_a_cgroup() -> None:
    """Issue 25: a default process sandbox had no memory, CPU, process or file limit."""
    p = limits(cfg(), "", (8, 64 * GiB))
    assert p.cgroup == default_limits(8, 64 * GiB)
    assert (p.cgroup.cpu_limit, p.cgroup.memory_limit) == (2.0, 2 * GiB)
    assert p.sandbox_rlimits == ((resource.RLIMIT_NOFILE, DEFAULT_FILE_LIMIT,
                                  DEFAULT_FILE_LIMIT),)
    assert p.rlimits == () and p.unbounded == ()  # no fork per command for the defaults
    assert dict(p.limits)["process_limit"] == "1024 processes (pids cgroup)"
    small = limits(cfg(), "", (1, 2 * GiB))  # sized from the host, as on Docker
    assert small.cgroup is not None
    assert (small.cgroup.cpu_limit, small.cgroup.memory_limit) == (1.0, GiB // 2)
    asked = limits(cfg(resources=ResourceLimits(memory_limit=1 << 26, process_limit=9)), "",
                   (2, 8 * GiB))
    assert asked.cgroup is not None
    assert (asked.cgroup.memory_limit, asked.cgroup.process_limit) == (1 << 26, 9)


def test_without_a_cgroup_rlimits_hold_and_say_so() -> None:
    p = limits(cfg(), NO_CGROUP, (2, 8 * GiB))
    assert p.cgroup is None
    assert p.rlimits == ((resource.RLIMIT_AS, 2 * GiB, 2 * GiB),)
    assert p.sandbox_rlimits == ((resource.RLIMIT_NOFILE, 512, 512),
                                 (resource.RLIMIT_NPROC, 1024, 1024))
    held = dict(p.limits)
    assert held["memory_limit"].endswith("per process (RLIMIT_AS), not a total: no cgroup")
    assert "RLIMIT_NPROC of uid 1000" in held["process_limit"]
    assert held["cpu_limit"] == "2 cores: all of this host's, nothing to hold"
    assert held["file_limit"] == "512 open files per process (RLIMIT_NOFILE)"
    asked = limits(cfg(resources=ResourceLimits(memory_limit=1 << 26, process_limit=9,
                                                file_limit=64,
                                                cpu_time_limit=timedelta(seconds=1.5))),
                   NO_CGROUP, (2, 8 * GiB))
    assert asked.rlimits == ((resource.RLIMIT_NOFILE, 64, 64), (resource.RLIMIT_CPU, 2, 3),
                             (resource.RLIMIT_AS, 1 << 26, 1 << 26))
    assert asked.sandbox_rlimits == ((resource.RLIMIT_NPROC, 9, 9),)


def test_what_no_rlimit_holds_is_refused_unless_accepted() -> None:
    # A CPU rate: on a host with more CPUs than the default, nothing but a cgroup bounds it.
    with pytest.raises(LimitNotEnforceable, match=r"^resources.cpu_limit: the default of 2 "
                       r"cores \(of this host's 8 CPUs\) needs a cgroup.*not writable") as info:
        limits(cfg(), NO_CGROUP, (8, 8 * GiB))
    assert "allow_unbounded=('cpu_limit',)" in info.value.details
    accepted = cfg(resources=ResourceLimits(allow_unbounded=("cpu_limit",)))
    p = limits(accepted, NO_CGROUP, (8, 8 * GiB))
    assert p.unbounded == ("cpu_limit",)
    assert dict(p.limits)["cpu_limit"].startswith("unbounded")
    assert limits(accepted, "", (8, 8 * GiB)).unbounded == ()  # held anyway where it can be
    for field in ("cpu_limit", "cpu_request", "memory_request"):
        asked = cfg(resources=ResourceLimits(**{field: 1}))
        with pytest.raises(SandboxInitFailed, match=rf"^resources.{field}: needs a cgroup"):
            limits(asked, NO_CGROUP, (2, 8 * GiB))
    with pytest.raises(ConfigError, match="allow_unbounded: 'disk_limit' is not a limit"):
        ResourceLimits(allow_unbounded=("disk_limit",))


def test_host_network_only_when_chosen() -> None:
    p = plan_sandbox(cfg(security=SecurityPolicy(allow_networking=True, isolate_network=False),
                         network=NetworkConfig(isolated=False, bridge="host",
                                               http_proxy="http://p:1")),
                     lookup=lookup, cgroup_problem="")
    assert p.host_network and p.env["HTTP_PROXY"] == p.env["http_proxy"] == "http://p:1"


def test_bwrap_argv_unshares_everything_and_binds_read_only(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "bin").symlink_to("usr/bin")
    p = plan_sandbox(cfg(security=SecurityPolicy(tmpfs_paths=("/cache:size=1024",),
                                                 masked_paths=("/etc",))),
                     lookup=lookup, cgroup_problem="")
    argv = _bwrap.bwrap_argv("bwrap", p, root, tmp_path / "state", home="")
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
                 "--unshare-cgroup", "--unshare-net", "--die-with-parent", "--new-session"):
        assert flag in argv
    text = " ".join(argv)
    assert f"--ro-bind {root}/etc /etc" in text and "--symlink usr/bin /bin" in text  # no /cache
    assert "--size 1024 --tmpfs /cache" in text and "--tmpfs /etc --remount-ro /etc" in text
    assert argv[argv.index("--chdir") - 2:argv.index("--chdir")] == ["--remount-ro", "/"]


def test_a_missing_bwrap_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_bwrap.shutil, "which", lambda name: None)
    monkeypatch.setattr(_bwrap.os, "access", lambda path, mode: False)
    with pytest.raises(SandboxInitFailed, match="needs bubblewrap") as info:
        _bwrap.find_bwrap()
    assert "apt-get install bubblewrap" in (info.value.details or "")


def test_a_root_with_every_mount_point_is_bound_whole(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for d in ("proc", "dev", "tmp", "workspace", "etc"):
        (root / d).mkdir(parents=True)
    p = plan_sandbox(cfg(), lookup=lookup, cgroup_problem="")
    argv = _bwrap.bwrap_argv("bwrap", p, root, tmp_path / "state", home="")
    text = " ".join(argv)
    assert f"--ro-bind {root} /" in text and "--tmpfs /" not in text
    assert f"--bind {tmp_path}/state/work /workspace" in text


def test_a_writable_root_is_planned_or_refused_by_name() -> None:
    assert plan_sandbox(cfg(), lookup=lookup, cgroup_problem="").writable_root
    ro = cfg(security=SecurityPolicy(read_only_root=True))
    assert not plan_sandbox(ro, lookup=lookup, cgroup_problem="").writable_root
    # Where no overlay can be mounted, False is refused, never quietly read-only.
    assert not plan_sandbox(ro, lookup=lookup, cgroup_problem="",
                            overlay_problem="no root").writable_root
    with pytest.raises(SandboxInitFailed, match=r"^security.read_only_root: .*no root") as info:
        plan_sandbox(cfg(), lookup=lookup, cgroup_problem="", overlay_problem="no root")
    assert "read_only_root=True" in (info.value.details or "")


def test_the_overlay_root_is_bound_writable_with_missing_points_in_upper(
        tmp_path: Path) -> None:
    from sandbox.process import _overlay

    root, state = tmp_path / "root", tmp_path / "state"
    (root / "etc").mkdir(parents=True)
    state.mkdir()
    p = plan_sandbox(cfg(security=SecurityPolicy(tmpfs_paths=("/cache/x",))), lookup=lookup,
                     cgroup_problem="")
    merged = _overlay.prepare_overlay(state, root, _bwrap.mount_points(p))
    upper = state / "overlay" / "upper"
    assert merged == state / "overlay" / "merged"
    assert sorted(os.listdir(upper)) == ["cache", "dev", "proc", "tmp", "workspace"]
    assert (upper / "cache" / "x").is_dir() and not (upper / "etc").exists()
    argv = _bwrap.bwrap_argv("bwrap", p, root, state, home="", overlay=merged)
    text = " ".join(argv)
    assert f"--bind {merged} /" in text and "--ro-bind" not in text
    assert "--remount-ro /" not in text
    assert _overlay.overlay_options(state, root) == \
        f"lowerdir={root},upperdir={upper},workdir={state}/overlay/work"
    with pytest.raises(SandboxInitFailed, match=r"^security.read_only_root: .*','"):
        _overlay.prepare_overlay(tmp_path / "s2", tmp_path / "a,b", [])


def test_a_repository_is_bound_read_only_or_not_and_owners_are_refused(tmp_path: Path) -> None:
    from sandbox import RepositoryConfig
    from sandbox.process._repository import RepoBind

    root = tmp_path / "root"
    for d in ("proc", "dev", "tmp", "workspace"):
        (root / d).mkdir(parents=True)
    p = plan_sandbox(cfg(repository=RepositoryConfig(local_path="/x", mount_point="/src/")),
                     lookup=lookup, cgroup_problem="")
    assert p.repository_mount == "/src" and "/src" in _bwrap.mount_points(p)
    for read_only, flag in ((True, "--ro-bind"), (False, "--bind")):
        argv = _bwrap.bwrap_argv("bwrap", p, root, tmp_path / "state", home="",
                                 repo=RepoBind(Path("/x"), "/src", read_only))
        assert f"{flag} /x /src" in " ".join(argv)
    assert f"--ro-bind {root} /" not in " ".join(argv)  # /src is missing: a tmpfs root
    for field in ("owner", "group"):
        with pytest.raises(SandboxInitFailed, match=f"^repository.{field}: .*one user"):
            plan(cfg(repository=RepositoryConfig(url="u", **{field: "5"})))


def test_seccomp_is_dockers_default_and_profiles_follow_dockers_rules() -> None:
    def seccomp(problem: str = "", **sec: object) -> str:
        return plan_sandbox(cfg(security=SecurityPolicy(**sec)), lookup=lookup,
                            cgroup_problem="", seccomp_problem=problem).seccomp
    assert seccomp() == seccomp(seccomp_profile="runtime/default") == "default"
    assert seccomp("no libseccomp") == ""  # the default needs the library; a profile does not
    with pytest.raises(SecurityViolation, match=r"^security\.seccomp_profile: 'unconfined'"):
        seccomp(seccomp_profile="unconfined")
    assert seccomp(seccomp_profile="unconfined", prevent_escalation=False) == ""
    profile = '{"defaultAction": "SCMP_ACT_ERRNO"}'
    assert json.loads(seccomp(seccomp_profile=profile)) == json.loads(profile)
    with pytest.raises(SandboxInitFailed, match=r"^security\.seccomp_profile: .*libseccomp"):
        seccomp("no libseccomp", seccomp_profile=profile)
