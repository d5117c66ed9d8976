"""The local cluster (scripts/kube.sh) sends nothing anywhere but loopback and unix sockets.

The kubelet's in-tree AWS credential provider queried the cloud metadata address at start-up,
and a Pod naming an image containerd lacked made containerd look the public registry's name up
through the host's resolver. These tests play that Pod and watch the components: the sockets
they hold (/proc/<pid>/fd against /proc/<pid>/net/*) and every connect(2) they make while a Pod
starts, runs a command and asks for images nobody imported (strace -f).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubernetes._cluster import KUBE_CACHE, LOCAL_IMAGE, local_kubeconfig

pytestmark = pytest.mark.slow

RUN = KUBE_CACHE / "run"
KUBECTL = KUBE_CACHE / "bin" / "kubectl"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
              "containerd", "kubelet")
DEAD_REGISTRY = "127.0.0.1:9"
"""Where scripts/kube.sh sends every registry: a loopback port nothing listens on."""


def _kubeconfig() -> Path:
    path = local_kubeconfig()
    if path is None:
        pytest.skip("the local cluster is not running (make kube)")
    return path


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run([str(KUBECTL), f"--kubeconfig={_kubeconfig()}", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def pids() -> dict[str, int]:
    """The cluster's processes, from scripts/kube.sh's pidfiles, plus containerd's shims."""
    found = {}
    for name in COMPONENTS:
        pid = int((RUN / f"{name}.pid").read_text())
        assert str(KUBE_CACHE) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        found[name] = pid
    sock = str(KUBE_CACHE / "state" / "containerd" / "containerd.sock")
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and sock.encode() in argv:
                found[f"shim {entry.name}"] = int(entry.name)
    return found


# ---- what a socket may be -------------------------------------------------------------------


def _proc_addr(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """An address of /proc/net/tcp* ("0100007F:1F90", or 32 hex digits for IPv6)."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1]), int(port, 16)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return ipaddress.IPv6Address(words), int(port, 16)


def _local(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def socket_violations(pid: int) -> list[str]:
    """Every inet socket PID holds that is not loopback on both ends (listening: local end)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    bad = []
    for table in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            cols = line.split()
            if cols[9] not in inodes:
                continue
            (lip, lport), (rip, rport) = _proc_addr(cols[1]), _proc_addr(cols[2])
            if table.startswith("raw"):
                bad.append(f"{table} socket {lip} -> {rip}")
            elif not _local(lip) or not (_local(rip) or (rip.is_unspecified and rport == 0)):
                bad.append(f"{table} {lip}:{lport} -> {rip}:{rport}")
    return bad


_FAMILY = re.compile(r"sa_family=(AF_\w+)")
_V4 = re.compile(r'inet_addr\("([^"]+)"\)')
_V6 = re.compile(r'inet_pton\(AF_INET6, "([^"]+)"')


def connect_violations(trace: str) -> tuple[list[str], int]:
    """The connect(2) calls of an `strace -f -e trace=connect` log that go anywhere but
    loopback or a unix socket, and how many inet connects went to loopback."""
    bad, loopback = [], 0
    for line in trace.splitlines():
        if "connect(" not in line:
            continue
        family = _FAMILY.search(line)
        if family is None:
            continue  # "resumed" halves, and connect(fd, NULL, ...) on a datagram socket
        name = family.group(1)
        if name in ("AF_UNIX", "AF_UNSPEC", "AF_NETLINK"):
            continue
        match = _V4.search(line) if name == "AF_INET" else _V6.search(line)
        if name in ("AF_INET", "AF_INET6") and match is not None \
                and _local(ipaddress.ip_address(match.group(1))):
            loopback += 1
            continue
        bad.append(line.strip())
    return bad, loopback


def test_the_checkers_see_an_outside_address() -> None:
    """The checks below fail on what the unsafe cluster did: a DNS query to the host's
    resolver, the metadata address, a socket with a remote end outside."""
    def v4(fd: int, port: int, ip: str) -> str:
        return (f"7 connect({fd}, {{sa_family=AF_INET, sin_port=htons({port}), "
                f'sin_addr=inet_addr("{ip}")}}, 16) = 0')

    trace = "\n".join([
        '7 connect(9, {sa_family=AF_UNIX, sun_path="/run/x.sock"}, 110) = 0',
        v4(3, 16443, "127.0.0.1"), v4(5, 53, "10.255.255.53"), v4(6, 80, "169.254.169.254"),
        '9 connect(7, {sa_family=AF_INET6, sin6_port=htons(443), sin6_flowinfo=htonl(0), '
        'inet_pton(AF_INET6, "2600::1", &sin6_addr), sin6_scope_id=0}, 28) = -1 ENETUNREACH',
        '9 connect(8, {sa_family=AF_INET6, sin6_port=htons(9), sin6_flowinfo=htonl(0), '
        'inet_pton(AF_INET6, "::ffff:127.0.0.1", &sin6_addr), sin6_scope_id=0}, 28) = 0',
    ])
    bad, loopback = connect_violations(trace)
    assert [b.split("connect(")[1][:2] for b in bad] == ["5,", "6,", "7,"]
    assert loopback == 2
    assert _proc_addr("0100007F:3F0B") == (ipaddress.IPv4Address("127.0.0.1"), 16139)
    assert not _local(_proc_addr("35FFFF0A:0035")[0])  # 10.255.255.53:53
    assert _local(_proc_addr("0000000000000000FFFF00000100007F:0050")[0])  # ::ffff:127.0.0.1


def test_kubelet_links_no_cloud_credential_provider() -> None:
    """The kubelet binary has none of the in-tree cloud credential providers (the AWS one
    queried 169.254.169.254 at start-up) nor cAdvisor's cloud-info probes: their packages'
    symbols are absent."""
    kubelet = KUBE_CACHE / "bin" / "kubelet"
    if not kubelet.exists():
        pytest.skip("the cluster is not built (make kube)")
    data = kubelet.read_bytes()
    assert b"k8s.io/kubernetes/pkg/kubelet" in data  # symbols are there to look at
    for provider in (b"pkg/credentialprovider/aws", b"pkg/credentialprovider/azure",
                     b"pkg/credentialprovider/gcp", b"legacy-cloud-providers/aws",
                     b"cadvisor/utils/cloudinfo/aws", b"cadvisor/utils/cloudinfo/azure",
                     b"cadvisor/utils/cloudinfo/gce"):
        assert provider not in data


def test_kubelet_environment_disables_metadata_and_cloud() -> None:
    """The kubelet runs with AWS_EC2_METADATA_DISABLED=true, no cloud provider, and every
    component's outside HTTP proxy is a dead loopback port."""
    _kubeconfig()
    procs = pids()
    env = dict(item.split("=", 1) for item in
               Path(f"/proc/{procs['kubelet']}/environ").read_text().split("\0") if "=" in item)
    assert env["AWS_EC2_METADATA_DISABLED"] == "true"
    argv = Path(f"/proc/{procs['kubelet']}/cmdline").read_text().split("\0")
    assert [a for a in argv if a.startswith("--cloud-provider") and a != "--cloud-provider="] == []
    for name in ("kubelet", "containerd", "kube-apiserver"):
        environ = Path(f"/proc/{procs[name]}/environ").read_text().split("\0")
        assert f"HTTPS_PROXY=http://{DEAD_REGISTRY}" in environ, name


def test_components_hold_loopback_sockets_only() -> None:
    """Every inet socket of etcd, the API server, controller-manager, scheduler, containerd,
    its shims and the kubelet is loopback at both ends (or listening on loopback)."""
    _kubeconfig()
    found = {name: socket_violations(pid) for name, pid in pids().items()}
    assert {name: bad for name, bad in found.items() if bad} == {}


@pytest.fixture
def namespace() -> Iterator[str]:
    ns = f"net-safety-{uuid.uuid4().hex[:6]}"
    kubectl("create", "namespace", ns)
    try:
        deadline = time.monotonic() + 60
        while not kubectl("-n", ns, "get", "serviceaccount", "default", "--ignore-not-found",
                          "-o", "name").strip():
            assert time.monotonic() < deadline, "no default ServiceAccount in the test namespace"
            time.sleep(0.2)
        yield ns
    finally:
        kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _pod(name: str, image: str, pull: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "automountServiceAccountToken": False,
                 "containers": [{"name": "c", "image": image, "imagePullPolicy": pull,
                                 "command": ["sleep", "3600"]}]}})


def _wait_pod(ns: str, name: str, done: str, what: str) -> str:
    """Wait until the jsonpath DONE of Pod NAME is non-empty; return it."""
    deadline = time.monotonic() + 120
    while True:
        value = kubectl("-n", ns, "get", "pod", name, "-o", f"jsonpath={done}").strip()
        if value:
            return value
        assert time.monotonic() < deadline, f"pod {name}: {what} did not happen"
        time.sleep(0.2)


def _pull_failure(ns: str, name: str) -> str:
    """The message of the kubelet's first "Failed to pull image" event for Pod NAME."""
    deadline = time.monotonic() + 120
    while True:
        events = json.loads(kubectl("-n", ns, "get", "events", "-o", "json",
                                    f"--field-selector=involvedObject.name={name}"))
        for event in events["items"]:
            message = str(event.get("message", ""))
            if event.get("reason") == "Failed" and "Failed to pull image" in message:
                return message
        assert time.monotonic() < deadline, f"pod {name}: no pull failure"
        time.sleep(0.2)


def test_no_connection_leaves_loopback_while_pods_run_and_pull(namespace: str,
                                                               tmp_path: Path) -> None:
    """Under strace, a Pod starts from a local image and runs a command through the API
    server and kubelet, and two Pods name images containerd lacks (Docker Hub's default
    registry, and a made-up one) with imagePullPolicy Always, as a hostile spec would: every
    connect of the kubelet, containerd and the API server goes to loopback or a unix socket,
    and the pulls fail against the dead loopback registry."""
    procs = pids()
    traced = [procs["kubelet"], procs["containerd"], procs["kube-apiserver"]]
    log = tmp_path / "connect.trace"
    messages = tmp_path / "strace.err"
    with messages.open("w") as err:
        strace = subprocess.Popen(
            ["strace", "-f", "-e", "trace=connect", "-e", "signal=none", "-o", str(log),
             *[arg for pid in traced for arg in ("-p", str(pid))]], stderr=err)
    try:
        # "Process N attached [with M threads]" for each: the window is open.
        while not {int(p) for p in re.findall(r"Process (\d+) attached", messages.read_text())} \
                >= set(traced):
            assert strace.poll() is None, messages.read_text()
            time.sleep(0.05)

        kubectl("-n", namespace, "apply", "-f", "-", stdin=_pod("local", LOCAL_IMAGE, "Never"))
        kubectl("-n", namespace, "apply", "-f", "-",
                stdin=_pod("hub", "docker.io/library/sandbox-net-probe:1", "Always"))
        kubectl("-n", namespace, "apply", "-f", "-",
                stdin=_pod("elsewhere", "registry.example.org/probe/net:2", "Always"))
        _wait_pod(namespace, "local", '{.status.containerStatuses[0].state.running.startedAt}',
                  "start")
        out = kubectl("-n", namespace, "exec", "local", "--", "sh", "-c", "echo ok-$((6*7))")
        assert out.strip() == "ok-42"
        for name in ("hub", "elsewhere"):
            # containerd tried the dead loopback registry, not the image's own host.
            failure = _pull_failure(namespace, name)
            assert f'"http://{DEAD_REGISTRY}/v2/' in failure, failure
            assert f"dial tcp {DEAD_REGISTRY}: connect: connection refused" in failure, failure
    finally:
        strace.send_signal(signal.SIGINT)
        strace.wait(timeout=60)
    trace = log.read_text()
    bad, loopback = connect_violations(trace)
    assert bad == []
    # The trace saw the inet connects it judges: at least the pulls to the dead registry
    # and the kubelet's stream connection to containerd for the exec.
    assert loopback >= 3, trace[-2000:]
    assert f'htons({DEAD_REGISTRY.split(":")[1]})' in trace


def test_pod_bridge_gives_the_host_no_address() -> None:
    """The pods' bridge carries no host address, IPv4 or IPv6 (the kernel's automatic fe80::
    link-local would let a pod reach host services listening on [::])."""
    _kubeconfig()
    out = subprocess.run(["ip", "-j", "addr", "show", "dev", "sbxkube0"], capture_output=True,
                         text=True, check=True).stdout
    (bridge,) = json.loads(out)
    assert bridge["addr_info"] == []
    assert Path("/proc/sys/net/ipv6/conf/sbxkube0/disable_ipv6").read_text().strip() == "1"


def test_dead_registry_answers_nobody() -> None:
    """Nothing listens on the dead registry port (else a pull could reach a real service)."""
    _kubeconfig()
    out = subprocess.run(["ss", "-Hltn", "sport = :9"], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == ""
