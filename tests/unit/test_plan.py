"""The config → create-request mapping: every field, every refusal, no engine needed."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import attrs
import pytest

from sandbox._constants import DEFAULT_FILE_LIMIT, DEFAULT_PROCESS_LIMIT
from sandbox._errors import ConfigError, SandboxInitFailed
from sandbox._models import (
    NetworkConfig,
    PortMapping,
    ResourceLimits,
    SandboxConfig,
    SecurityPolicy,
)
from sandbox.docker._facts import EngineFacts
from sandbox.docker._plan import plan_container
from sandbox.docker._rootfs import DOCKER_MASKED_PATHS, DOCKER_READONLY_PATHS
from tests.unit._plan import CMD, ENGINE, LABELS, NETWORKED, OPEN, MiB, host, plan, res, sec

#: Every container gets the default open-file limit (issue 25: the engine's own is 20,000).
NOFILE = {"Name": "nofile", "Soft": DEFAULT_FILE_LIMIT, "Hard": DEFAULT_FILE_LIMIT}

DATA = Path(__file__).parent / "data"


# --- engine facts ---------------------------------------------------------------------------


def test_engine_facts_from_recorded_info() -> None:
    info = json.loads((DATA / "engine_info.json").read_text())
    facts = EngineFacts.from_info(info)
    assert facts == EngineFacts(
        runtimes=frozenset({"io.containerd.runc.v2", "io.containerd.runtime.v1.linux", "runc",
                            "runsc"}),
        runtime_paths={"io.containerd.runc.v2": "runc", "io.containerd.runtime.v1.linux": "runc",
                       "runc": "runc", "runsc": "/usr/bin/runsc"},
        runtime_args={"runsc": ("--network=none",)},
        default_runtime="runc",
        cgroup_version="1",
        storage_driver="overlay2",
        backing_filesystem="extfs",
        security_options=("name=seccomp,profile=default",),
        architecture="amd64",
        mem_total=info["MemTotal"],
        ncpu=2,
        api_version="",
    )
    assert facts.has_security_option("seccomp")
    assert not facts.has_security_option("apparmor")
    assert facts.is_gvisor("runsc") and not facts.is_gvisor("runc")
    assert not facts.ignores_cgroups("runsc")
    hash(facts)


IGNORE_CGROUPS_INFO = {
    "Runtimes": {
        "runc": {"path": "runc"},
        "runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none", "--ignore-cgroups"]},
        "gvisor": {"path": "/usr/local/bin/runsc", "runtimeArgs": ["-ignore-cgroups=true"]},
        "runsc-cg": {"path": "/usr/bin/runsc",
                     "runtimeArgs": ["--ignore-cgroups", "--ignore-cgroups=false"]},
    },
    "DefaultRuntime": "runc",
}


def test_engine_facts_keep_runtime_args() -> None:
    facts = EngineFacts.from_info(IGNORE_CGROUPS_INFO)
    assert facts.runtime_args["runsc"] == ("--network=none", "--ignore-cgroups")
    assert facts.ignores_cgroups("runsc") and facts.ignores_cgroups("gvisor")
    assert not facts.ignores_cgroups("runsc-cg")  # the last flag wins, as in Go's flag package
    assert not facts.ignores_cgroups("runc") and not facts.ignores_cgroups("nope")
    assert facts.is_gvisor("gvisor")  # known by its binary, not its name


@pytest.mark.parametrize("runtime", ["runsc", "gvisor"])
@pytest.mark.parametrize("field", ["cpu_limit", "cpu_request", "memory_limit", "memory_request"])
def test_cgroup_limits_refused_under_ignore_cgroups(runtime: str, field: str) -> None:
    facts = EngineFacts.from_info(IGNORE_CGROUPS_INFO)
    value = 64 * MiB if field.startswith("memory") else 0.5
    limits = ResourceLimits(**{field: value})
    with pytest.raises(SandboxInitFailed, match=rf"^resources.{field}: runtime '{runtime}' runs "
                       r"with --ignore-cgroups"):
        plan(facts, runtime=runtime, resources=limits)
    assert host(facts, runtime="runsc-cg", resources=limits)  # cgroups on: allowed
    assert host(facts, runtime="runc", resources=limits)


def test_ignore_cgroups_names_every_field_and_keeps_nproc() -> None:
    facts = EngineFacts.from_info(IGNORE_CGROUPS_INFO)
    limits = ResourceLimits(memory_limit=64 * MiB, cpu_limit=1)
    with pytest.raises(SandboxInitFailed,
                       match=r"^resources.cpu_limit, resources.memory_limit: runtime"):
        plan(facts, runtime="runsc", resources=limits)
    # process_limit is RLIMIT_NPROC inside gVisor, not a cgroup: still enforced.
    h = host(facts, runtime="runsc", resources=ResourceLimits(process_limit=64))
    assert h["Ulimits"] == [{"Name": "nproc", "Soft": 64, "Hard": 64},
                            {"Name": "nofile", "Soft": 512, "Hard": 512}]


def test_default_limits_left_out_under_ignore_cgroups() -> None:
    # Nothing would enforce them there; refusing them would refuse every default config.
    h = host(EngineFacts.from_info(IGNORE_CGROUPS_INFO), runtime="runsc")
    assert "Memory" not in h and "NanoCpus" not in h
    assert h["Ulimits"] == [{"Name": "nproc", "Soft": DEFAULT_PROCESS_LIMIT,
                             "Hard": DEFAULT_PROCESS_LIMIT}, NOFILE]


def test_engine_default_runtime_rules_apply() -> None:
    facts = attrs.evolve(EngineFacts.from_info(IGNORE_CGROUPS_INFO), default_runtime="runsc")
    with pytest.raises(SandboxInitFailed, match=r"^resources.memory_limit: runtime 'runsc'"):
        plan(facts, runtime="", resources=ResourceLimits(memory_limit=64 * MiB))
    with pytest.raises(SandboxInitFailed, match=r"^security.masked_paths: gVisor"):
        plan(facts, runtime="", security=SecurityPolicy(masked_paths=("/etc",)))
    h = host(facts, runtime="")
    assert "Runtime" not in h and "PidsLimit" not in h
    assert h["Ulimits"] == [{"Name": "nproc", "Soft": DEFAULT_PROCESS_LIMIT,
                             "Hard": DEFAULT_PROCESS_LIMIT}, NOFILE]


def test_engine_facts_prefer_version() -> None:
    facts = EngineFacts.from_info(
        {"Architecture": "aarch64"}, {"Arch": "arm64", "ApiVersion": "1.43"}
    )
    assert facts.architecture == "arm64"
    assert facts.api_version == "1.43"
    assert facts.api_at_least((1, 43))
    assert not EngineFacts(api_version="1.41").api_at_least((1, 43))
    assert not EngineFacts().api_at_least((1, 0))
    assert EngineFacts.from_info({"Architecture": "aarch64"}).architecture == "arm64"
    assert EngineFacts.from_info({}) == EngineFacts(runtimes=frozenset())


# --- defaults -------------------------------------------------------------------------------


def test_default_config_is_isolated_and_unprivileged() -> None:
    p = plan()
    assert p.params == {"name": "sbx-1"}
    assert p.pids_limit == DEFAULT_PROCESS_LIMIT
    assert p.writable_paths == ()
    assert not p.networked
    assert not p.needs_network
    assert p.body == {
        "Image": SandboxConfig().image,
        "Cmd": CMD,
        "Env": [],
        "Labels": LABELS,
        "StopTimeout": 2,
        "Healthcheck": {"Test": ["NONE"]},
        "Hostname": "sbx-1",
        "WorkingDir": "/workspace",
        "HostConfig": {
            "Init": True,
            "Runtime": "runc",
            # min(2 CPUs, the engine's 4) and min(2 GiB, a quarter of its 8 GiB).
            "NanoCpus": 2 * 10**9,
            "Memory": 2 * 2**30,
            "MemorySwap": 2 * 2**30,
            "PidsLimit": DEFAULT_PROCESS_LIMIT,
            "Ulimits": [NOFILE],
            "NetworkMode": "none",
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges:true"],
        },
        "User": "1000:1000",
    }
    assert p.opt_ins == ()


def test_hostname_is_cut_to_63_characters() -> None:
    name = "a" * 62 + "-b"
    p = plan_container(SandboxConfig(), name=name, labels={}, engine=ENGINE, command=CMD)
    assert p.body["Hostname"] == "a" * 62
    assert p.params["name"] == name


# --- environment, labels, annotations, platform ---------------------------------------------


def test_environment_and_proxies() -> None:
    net = NetworkConfig(http_proxy="http://p:3128", no_proxy="localhost")
    env = plan(network=net, environment={"A": "1", "no_proxy": "mine"}).body["Env"]
    assert env == [
        "http_proxy=http://p:3128",
        "HTTP_PROXY=http://p:3128",
        "no_proxy=mine",
        "NO_PROXY=localhost",
        "A=1",
    ]
    env = plan(network=NetworkConfig(https_proxy="http://s")).body["Env"]
    assert env == ["https_proxy=http://s", "HTTPS_PROXY=http://s"]


def test_labels_merge_sdk_labels_win() -> None:
    assert plan(labels={"team": "x"}).body["Labels"] == {"team": "x", **LABELS}


def test_reserved_label_prefix_refused() -> None:
    with pytest.raises(ConfigError, match=r"labels: .*io\.sandbox\.managed-by"):
        plan(labels={"io.sandbox.managed-by": "me"})


def test_annotations_are_labels_on_api_141() -> None:
    p = plan(annotations={"k": "v"})
    assert p.body["Labels"]["io.sandbox.annotation.k"] == "v"
    assert "Annotations" not in p.body["HostConfig"]


def test_annotations_also_sent_on_api_143() -> None:
    engine = EngineFacts(runtimes=frozenset({"runc"}), api_version="1.43")
    p = plan(engine, annotations={"k": "v"})
    assert p.body["HostConfig"]["Annotations"] == {"k": "v"}
    assert p.body["Labels"]["io.sandbox.annotation.k"] == "v"


@pytest.mark.parametrize(("arch", "platform"), [("amd64", "linux/amd64"),
                                                ("linux/arm64", "linux/arm64")])
def test_architecture_sets_platform(arch: str, platform: str) -> None:
    assert plan(architecture=arch).params == {"name": "sbx-1", "platform": platform}


def test_working_dir() -> None:
    assert plan(working_dir="/src/").body["WorkingDir"] == "/src"
    assert "WorkingDir" not in plan(working_dir="").body
    with pytest.raises(ConfigError, match=r"working_dir: 'src' must be an absolute path"):
        plan(working_dir="src")


# --- runtime --------------------------------------------------------------------------------


def test_runtime_runsc() -> None:
    h = host(runtime="runsc")
    assert h["Runtime"] == "runsc"


def test_unknown_runtime_lists_available() -> None:
    with pytest.raises(SandboxInitFailed, match=r"runtime: .*'kata'") as info:
        plan(runtime="kata")
    assert info.value.details == "available: io.containerd.runc.v2, runc, runsc"


def test_empty_runtime_uses_engine_default() -> None:
    assert "Runtime" not in host(runtime="")


# --- resources ------------------------------------------------------------------------------


def test_cpu_limit_and_request() -> None:
    h = res(cpu_limit=1.5, cpu_request=0.5)
    assert h["NanoCpus"] == 1_500_000_000
    assert h["CpuShares"] == 512
    assert res(cpu_request=0.001)["CpuShares"] == 2


def test_cpu_limit_bounds() -> None:
    with pytest.raises(SandboxInitFailed, match=r"resources.cpu_limit: 5 .* engine's 4 CPUs"):
        res(cpu_limit=5)
    with pytest.raises(SandboxInitFailed, match=r"resources.cpu_limit: 0.001 cores .* 0.01"):
        res(cpu_limit=0.001)
    with pytest.raises(SandboxInitFailed, match=r"resources.cpu_request: 8 .* 4 CPUs"):
        res(cpu_request=8)
    with pytest.raises(ConfigError, match=r"cpu_request .* must not exceed .*cpu_limit"):
        res(cpu_limit=1, cpu_request=2)


def test_cpu_limit_unchecked_when_engine_cpus_unknown() -> None:
    assert host(EngineFacts(), resources=ResourceLimits(cpu_limit=64))["NanoCpus"] == 64 * 10**9


def test_memory_limit_and_request() -> None:
    h = res(memory_limit=256 * MiB, memory_request=128 * MiB)
    assert h["Memory"] == h["MemorySwap"] == 256 * MiB
    assert h["MemoryReservation"] == 128 * MiB
    # Without a limit, the default one (2 GiB here), or the request if that is more.
    assert res(memory_request=128 * MiB)["Memory"] == 2 * 2**30
    assert res(memory_request=3 * 2**30)["Memory"] == 3 * 2**30


@pytest.mark.parametrize(
    ("mem_total", "ncpu", "memory", "nano_cpus"),
    [(8 * 2**30, 4, 2 * 2**30, 2 * 10**9), (2 * 2**30, 1, 2**29, 10**9),
     (16 * MiB, 0, 6 * MiB, 10**9), (0, 64, 2 * 2**30, 2 * 10**9)],
)
def test_default_limits_sized_from_host(mem_total: int, ncpu: int, memory: int,
                                        nano_cpus: int) -> None:
    h = host(EngineFacts(mem_total=mem_total, ncpu=ncpu))
    assert h["Memory"] == h["MemorySwap"] == memory
    assert h["NanoCpus"] == nano_cpus
    assert h["PidsLimit"] == DEFAULT_PROCESS_LIMIT


def test_default_cpu_limit_at_least_the_request() -> None:
    assert res(cpu_request=3)["NanoCpus"] == 3 * 10**9


def test_explicit_limits_win_over_defaults() -> None:
    h = res(memory_limit=64 * MiB, cpu_limit=0.5)
    assert (h["Memory"], h["NanoCpus"]) == (64 * MiB, 5 * 10**8)


@pytest.mark.parametrize("field", ["memory_limit", "memory_request"])
def test_memory_bounds(field: str) -> None:
    with pytest.raises(SandboxInitFailed, match=rf"resources.{field}: the engine's minimum is 6"):
        res(**{field: 6 * MiB - 1})
    with pytest.raises(SandboxInitFailed, match=f"resources.{field}: .*{8 * 2**30} bytes"):
        res(**{field: 9 * 2**30})
    res(**{field: 6 * MiB})


def test_memory_request_above_limit_refused() -> None:
    with pytest.raises(ConfigError, match=r"memory_request .* must not exceed .*memory_limit"):
        res(memory_limit=64 * MiB, memory_request=128 * MiB)


def test_process_limit_runc() -> None:
    assert res(process_limit=64)["PidsLimit"] == 64
    assert plan(resources=ResourceLimits(process_limit=64)).pids_limit == 64


def test_process_limit_runsc_uses_nproc_not_pids_cgroup() -> None:
    p = plan(runtime="runsc")
    assert "PidsLimit" not in p.body["HostConfig"]
    assert p.body["HostConfig"]["Ulimits"] == [
        {"Name": "nproc", "Soft": DEFAULT_PROCESS_LIMIT, "Hard": DEFAULT_PROCESS_LIMIT}, NOFILE
    ]
    assert p.pids_limit == DEFAULT_PROCESS_LIMIT
    h = host(runtime="runsc", resources=ResourceLimits(process_limit=100))
    assert h["Ulimits"] == [{"Name": "nproc", "Soft": 100, "Hard": 100}, NOFILE]


def test_process_limit_minimum() -> None:
    with pytest.raises(SandboxInitFailed, match=r"resources.process_limit: 3 is below .* 8"):
        res(process_limit=3)


def test_file_and_cpu_time_ulimits() -> None:
    h = res(file_limit=256, cpu_time_limit=timedelta(seconds=2.1))
    assert h["Ulimits"] == [
        {"Name": "nofile", "Soft": 256, "Hard": 256},
        {"Name": "cpu", "Soft": 3, "Hard": 4},
    ]


def test_cpu_time_limit_refused_on_runsc() -> None:
    with pytest.raises(SandboxInitFailed, match=r"resources.cpu_time_limit: gVisor"):
        host(runtime="runsc", resources=ResourceLimits(cpu_time_limit=timedelta(seconds=5)))


def test_wall_time_limit_is_not_a_create_option() -> None:
    assert res(wall_time_limit=timedelta(minutes=5)) == host()


def test_disk_limit_refused_on_overlay2_extfs() -> None:
    with pytest.raises(SandboxInitFailed, match=r"resources.disk_limit: .*overlay2 on extfs"):
        res(disk_limit=2**30)


@pytest.mark.parametrize(
    ("driver", "backing"), [("overlay2", "xfs"), ("btrfs", "btrfs"), ("zfs", "zfs"),
                            ("devicemapper", "")]
)
def test_disk_limit_where_supported(driver: str, backing: str) -> None:
    engine = EngineFacts(storage_driver=driver, backing_filesystem=backing)
    h = host(engine, resources=ResourceLimits(disk_limit=2**30))
    assert h["StorageOpt"] == {"size": str(2**30)}


@pytest.mark.parametrize("field", ["disk_request"])
def test_unenforceable_resources_refused(field: str) -> None:
    with pytest.raises(SandboxInitFailed, match=f"resources.{field}: "):
        res(**{field: 1000})


# --- network --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("network", "security"),
    [
        (NetworkConfig(), OPEN),
        (NETWORKED, SecurityPolicy()),
        (NETWORKED, SecurityPolicy(allow_networking=True)),
        (NETWORKED, SecurityPolicy(isolate_network=False)),
    ],
)
def test_network_none_unless_all_three_allow(
    network: NetworkConfig, security: SecurityPolicy
) -> None:
    p = plan(network=network, security=security)
    assert p.body["HostConfig"]["NetworkMode"] == "none"
    assert not p.networked
    assert not p.needs_network


def test_networked_without_bridge_needs_backend_network() -> None:
    p = plan(network=NETWORKED, security=OPEN)
    assert p.networked
    assert p.needs_network
    assert p.body["HostConfig"]["NetworkMode"] == ""


def test_networked_with_bridge() -> None:
    p = plan(network=NetworkConfig(isolated=False, bridge="agents"), security=OPEN)
    assert p.body["HostConfig"]["NetworkMode"] == "agents"
    assert p.networked
    assert not p.needs_network


def test_dns() -> None:
    h = host(network=NetworkConfig(dns_servers=("10.0.0.2",), dns_search=("corp",)))
    assert h["Dns"] == ["10.0.0.2"]
    assert h["DnsSearch"] == ["corp"]


def test_port_mappings() -> None:
    net = NetworkConfig(
        isolated=False,
        port_mappings=(
            PortMapping(container_port=80, host_port=8080),
            PortMapping(container_port=80, host_port=8081, host_ip="0.0.0.0"),
            PortMapping(container_port=53, protocol="udp"),
            PortMapping(container_port=9000, host_ip=""),
        ),
    )
    p = plan(network=net, security=OPEN)
    assert p.body["HostConfig"]["PortBindings"] == {
        "80/tcp": [
            {"HostIp": "127.0.0.1", "HostPort": "8080"},
            {"HostIp": "0.0.0.0", "HostPort": "8081"},
        ],
        "53/udp": [{"HostIp": "127.0.0.1", "HostPort": ""}],
        "9000/tcp": [{"HostIp": "127.0.0.1", "HostPort": ""}],
    }
    assert p.body["ExposedPorts"] == {"80/tcp": {}, "53/udp": {}, "9000/tcp": {}}


def test_port_mappings_on_isolated_sandbox_refused() -> None:
    net = NetworkConfig(port_mappings=(PortMapping(container_port=80),))
    with pytest.raises(SandboxInitFailed, match=r"network.port_mappings"):
        plan(network=net)


def test_same_host_port_twice_refused() -> None:
    net = NetworkConfig(
        isolated=False,
        port_mappings=(
            PortMapping(container_port=80, host_port=8080),
            PortMapping(container_port=81, host_port=8080),
        ),
    )
    with pytest.raises(ConfigError, match=r"127.0.0.1:8080/tcp is mapped twice"):
        plan(network=net, security=OPEN)


def test_tools_and_mcp_servers_are_not_create_options() -> None:
    """Sandbox checks and starts them after the container is up (sandbox/_provisions.py)."""
    p = plan(tools=("git",), mcp_servers=("fs",))
    assert "git" not in str(p.body) and "fs" not in str(p.body["Cmd"])


def test_empty_protocol_means_tcp() -> None:
    """Go writes "" for a PortMapping.Protocol never set."""
    net = NetworkConfig(isolated=False, port_mappings=(PortMapping(container_port=80,
                                                                   protocol=""),))
    p = plan(network=net, security=OPEN)
    assert p.body["ExposedPorts"] == {"80/tcp": {}}


# --- user and filesystem --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "group", "expected"),
    [("", "", "1000:1000"), ("1000", "", "1000:1000"), ("1234", "", "1234:1234"),
     ("sandbox", "users", "sandbox:users"), ("sandbox", "", "sandbox"),
     ("", "100", "1000:100")],
)
def test_user(user: str, group: str, expected: str | None) -> None:
    p = plan(security=SecurityPolicy(run_as_user=user, run_as_group=group))
    assert p.body.get("User") == expected
    assert p.opt_ins == ()


@pytest.mark.parametrize(
    ("image_user", "expected"),
    [("", "1000:1000"), ("0", "1000:1000"), ("root", "1000:1000"), ("1000:0", "1000:1000"),
     ("app", "app"), ("2000", "2000:2000"), ("2000:3000", "2000:3000"),
     ("app:staff", "app:staff")],
)
def test_default_user_is_the_images_own_non_root_user(image_user: str, expected: str) -> None:
    p = plan_container(SandboxConfig(), name="s", labels={}, engine=ENGINE, command=CMD,
                       image_user=image_user)
    assert p.body["User"] == expected
    assert p.opt_ins == ()


@pytest.mark.parametrize(
    ("user", "group", "expected", "opt_ins"),
    [("root", "", "root", ("security.run_as_user: root (root)",)),
     ("0", "", "0:0", ("security.run_as_user: 0 (root)",)),
     ("", "0", "1000:0", ("security.run_as_group: 0 (root group)",)),
     # spelled as the engine reads it (issue 25): still root, still an audited opt-in
     ("+00", "", "+00", ("security.run_as_user: +00 (root)",)),
     ("1000", "-0", "1000:-0", ("security.run_as_group: -0 (root group)",))],
)
def test_root_is_an_opt_in(user: str, group: str, expected: str,
                           opt_ins: tuple[str, ...]) -> None:
    p = plan(security=SecurityPolicy(run_as_user=user, run_as_group=group))
    assert p.body["User"] == expected
    assert p.opt_ins == opt_ins


def test_user_with_colon_refused() -> None:
    with pytest.raises(ConfigError, match=r"security.run_as_user: '1:2'"):
        sec(run_as_user="1:2")


def test_read_only_root_mounts_workdir_and_tmp() -> None:
    p = plan(security=SecurityPolicy(read_only_root=True))
    h = p.body["HostConfig"]
    assert h["ReadonlyRootfs"] is True
    owned = "rw,exec,nosuid,nodev,uid=1000,gid=1000"
    assert h["Tmpfs"] == {"/workspace": owned, "/tmp": owned}
    assert p.writable_paths == ("/workspace", "/tmp")


def test_read_only_root_tmpfs_owned_by_numeric_user() -> None:
    h = sec(read_only_root=True, run_as_user="1000", run_as_group="1000")
    assert h["Tmpfs"]["/workspace"] == "rw,exec,nosuid,nodev,uid=1000,gid=1000"
    assert h["Tmpfs"]["/tmp"] == "rw,exec,nosuid,nodev,uid=1000,gid=1000"
    h = sec(read_only_root=True, run_as_user="sandbox", run_as_group="1000")
    assert h["Tmpfs"]["/workspace"] == "rw,exec,nosuid,nodev,gid=1000"


def test_tmpfs_paths() -> None:
    p = plan(security=SecurityPolicy(tmpfs_paths=("/cache", "/run/x/:size=64m,noexec")))
    assert p.body["HostConfig"]["Tmpfs"] == {
        "/cache": "rw,exec,nosuid,nodev",
        "/run/x": "rw,exec,nosuid,nodev,size=64m,noexec",
    }
    assert "ReadonlyRootfs" not in p.body["HostConfig"]
    assert p.writable_paths == ("/cache", "/run/x")


def test_tmpfs_path_given_wins_over_read_only_default() -> None:
    h = sec(read_only_root=True, tmpfs_paths=("/tmp:size=8m",))
    assert h["Tmpfs"] == {
        "/tmp": "rw,exec,nosuid,nodev,size=8m",
        "/workspace": "rw,exec,nosuid,nodev,uid=1000,gid=1000",
    }


@pytest.mark.parametrize(("paths", "message"), [
    (("rel",), "'rel' must be an absolute path"),
    (("/",), "'/' must be an absolute path other than /"),
    (("/a", "/a/"), "'/a' is listed twice"),
])
def test_bad_tmpfs_paths(paths: tuple[str, ...], message: str) -> None:
    with pytest.raises(ConfigError, match=f"security.tmpfs_paths: {message}"):
        sec(tmpfs_paths=paths)


def test_read_only_and_masked_paths_extend_docker_defaults() -> None:
    h = sec(read_only_paths=("/etc",), masked_paths=("/proc/cpuinfo", "/proc/keys"))
    assert h["ReadonlyPaths"] == [*DOCKER_READONLY_PATHS, "/etc"]
    assert h["MaskedPaths"] == [*DOCKER_MASKED_PATHS, "/proc/cpuinfo"]
    assert "MaskedPaths" not in host()
    assert "ReadonlyPaths" not in host()
    with pytest.raises(ConfigError, match=r"security.masked_paths: 'x' must be an absolute"):
        sec(masked_paths=("x",))


@pytest.mark.parametrize(("field", "shown"), [
    ("masked_paths", "visible"), ("read_only_paths", "writable"),
])
def test_listed_paths_refused_under_runsc(field: str, shown: str) -> None:
    policy = SecurityPolicy(**{field: ("/etc",)})
    with pytest.raises(SandboxInitFailed,
                       match=rf"^security.{field}: gVisor \(runsc\) ignores it: .* stay {shown}"):
        plan(runtime="runsc", security=policy)
    # Docker's defaults alone are fine: no key is sent, and gVisor's /proc covers them.
    h = host(runtime="runsc", security=SecurityPolicy(read_only_root=True))
    assert "MaskedPaths" not in h and "ReadonlyPaths" not in h
    assert h["ReadonlyRootfs"] is True
