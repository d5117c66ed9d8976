"""Security policy proven inside a real container: defaults, each field, and refusals."""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox import (
    IMAGE_BUSYBOX,
    IMAGE_PYTHON,
    Command,
    NetworkAccessDenied,
    NetworkConfig,
    ResourceLimits,
    Sandbox,
    SandboxConfig,
    SandboxInitFailed,
    SecurityPolicy,
    SecurityViolation,
)
from sandbox._backend import ProcessSpec
from sandbox._constants import DEFAULT_PROCESS_LIMIT, LABEL_SANDBOX_ID
from sandbox.docker._facts import EngineFacts
from sandbox.docker._resources import default_memory_limit
from tests.conftest import derived_image, docker_cli
from tests.integration._scripts import EAGAIN, FORK_UNTIL_REFUSED

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

#: Bit numbers (linux/capability.h) of Docker 20.10's default capability set.
DOCKER_DEFAULT_CAPS = {
    "CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6,
    "SETUID": 7, "SETPCAP": 8, "NET_BIND_SERVICE": 10, "NET_RAW": 13, "SYS_CHROOT": 18,
    "MKNOD": 27, "AUDIT_WRITE": 29, "SETFCAP": 31,
}
NET_ADMIN = 12


def mask(*names: str) -> int:
    return sum(1 << DOCKER_DEFAULT_CAPS[n] for n in names)


def sandbox(image: str = IMAGE_BUSYBOX, **security: object) -> Sandbox:
    return Sandbox(SandboxConfig(image=image, security=SecurityPolicy(**security)))  # type: ignore[arg-type]


async def run(sb: Sandbox, script: str, **kw: object) -> str:
    """Run a shell script that must succeed; return its stdout."""
    result = await sb.execute_command(Command.shell(script, **kw))  # type: ignore[arg-type]
    assert result.success, result
    return result.stdout


async def status_field(sb: Sandbox, name: str) -> str:
    out = await run(sb, f"grep '^{name}:' /proc/self/status")
    return out.split(":", 1)[1].strip()


def no_container_with(sandbox_id: str) -> bool:
    return not docker_cli("ps", "-aq", "--filter", f"label={LABEL_SANDBOX_ID}={sandbox_id}").split()


# -- the default policy ----------------------------------------------------------------------------


def host_facts() -> EngineFacts:
    return EngineFacts.from_info(json.loads(docker_cli("info", "--format", "{{json .}}")))


def container_of(sb: Sandbox) -> dict[str, Any]:
    inspect = docker_cli("ps", "-q", "--filter", f"label={LABEL_SANDBOX_ID}={sb.id}").split()
    assert len(inspect) == 1
    result: dict[str, Any] = json.loads(docker_cli("inspect", inspect[0]))[0]
    return result


async def test_default_policy() -> None:
    facts = host_facts()
    async with sandbox() as sb:
        assert (await run(sb, "ls /sys/class/net")).split() == ["lo"]
        assert await status_field(sb, "NoNewPrivs") == "1"
        assert await status_field(sb, "Seccomp") == "2"
        # A non-root user with its own group, and no capability, not even in the bounding set.
        assert await run(sb, "id -u; id -g") == "1000\n1000\n"
        for field in ("CapEff", "CapPrm", "CapBnd"):
            assert int(await status_field(sb, field), 16) == 0, field
        pids_max = await run(sb, "cat /sys/fs/cgroup/pids/pids.max")
        assert pids_max.strip() == str(DEFAULT_PROCESS_LIMIT)
        # Memory: min(2 GiB, a quarter of the host's); CPU: min(2, the host's CPUs).
        memory = min(2 * 2**30, facts.mem_total // 4)
        assert default_memory_limit(facts) == memory
        limits = await run(sb, "cd /sys/fs/cgroup && cat memory/memory.limit_in_bytes "
                               "memory/memory.memsw.limit_in_bytes cpu/cpu.cfs_quota_us "
                               "cpu/cpu.cfs_period_us")
        quota, period = (int(x) for x in limits.split()[2:])
        assert [int(x) for x in limits.split()[:2]] == [memory, memory]
        assert quota / period == min(2, facts.ncpu)
        # The workspace and HOME are the user's to write. The SDK's images hold /workspace as
        # 1000:0 0775 (the user's; root's group so capability-less root writes it too), so a
        # create needs no archive hand-over for the default user.
        assert await run(sb, 'touch mine "$HOME/mine" && echo "$HOME" && stat -c "%u:%g %a" .'
                         ) == "/home/sandbox\n1000:0 775\n"
        assert (await run(sb, "tr '\\0' ' ' < /proc/1/cmdline")).startswith("/sbin/docker-init ")


async def test_default_memory_limit_stops_a_memory_bomb() -> None:
    # A bomb of 64 MiB pieces: at the default limit the kernel kills it, not the host.
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON)) as sb:
        result = await sb.execute_command(Command.shell(
            "python3 -c 'a = []\nwhile True: a.append(bytearray(64 << 20))'",
            timeout=timedelta(seconds=120)))
        assert result.oom_killed and result.signal == "SIGKILL", result
        assert await run(sb, "echo alive") == "alive\n"


@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON])
async def test_defaults_hold_under_gvisor(image: str) -> None:
    facts = host_facts()
    async with Sandbox(SandboxConfig(image=image, runtime="runsc")) as sb:
        assert "gVisor" in await run(sb, "dmesg")
        assert await run(sb, "id -u; id -g") == "1000\n1000\n"
        for field in ("CapEff", "CapBnd"):
            assert int(await status_field(sb, field), 16) == 0, field
        # test -O/-G, not stat or ls: coreutils' statx gets EINVAL from this gVisor.
        # The SDK's images hold /workspace as 1000:0 0775 (see test_default_policy).
        assert await run(sb, 'touch mine "$HOME/mine" && [ -O . ] && [ -w . ] && echo own') == \
            "own\n"
        # gVisor shows no cgroup files inside; the engine holds the limits it enforces.
        host = container_of(sb)["HostConfig"]
        assert host["Memory"] == default_memory_limit(facts)
        assert host["NanoCpus"] == min(2, facts.ncpu) * 10**9
        assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]


async def test_root_is_an_explicit_audited_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox")
    async with sandbox(run_as_user="root", log_security_events=True) as sb:
        assert await run(sb, "id -u; id -g") == "0\n0\n"
        # Root, but without capabilities unless they are added too.
        assert int(await status_field(sb, "CapBnd"), 16) == 0
        result = await sb.execute_command("chown 1000 /tmp")
        assert not result.success and "Operation not permitted" in result.stderr
        assert await run(sb, "echo x > /etc/new && cat /etc/new") == "x\n"  # root-owned files
    audits = [r.audit for r in caplog.records if r.name == "sandbox.audit"]
    assert {"event": "opt_in", "sandbox_id": sb.id, "setting": "security.run_as_user",
            "granted": "root (root)"} in audits
    warnings = [r for r in caplog.records if r.name == "sandbox.security"]
    assert warnings and warnings[0].levelno == logging.WARNING
    assert "root" in warnings[0].getMessage()


async def test_init_reaps_orphaned_zombies() -> None:
    # `sleep 0.1` becomes a zombie child of `sleep 1`, which never waits for it; when
    # `sleep 1` ends the zombie is re-parented to PID 1, which must reap it.
    script = r"""
        zombies() { cat /proc/[0-9]*/stat 2>/dev/null | grep -c ') Z ' || true; }
        sh -c 'sleep 0.1 & exec sleep 1' &
        sleep 0.5; echo "during $(zombies)"
        wait; sleep 0.3; echo "after $(zombies)"
    """
    async with sandbox() as sb:
        assert (await run(sb, script)).split() == ["during", "1", "after", "0"]


# -- filesystem ------------------------------------------------------------------------------------


async def test_read_only_root_keeps_working_dir_and_tmp_writable() -> None:
    async with sandbox(read_only_root=True, run_as_user="1000") as sb:
        result = await sb.execute_command("touch /etc/x")
        assert not result.success and "Read-only file system" in result.stderr
        mounts = await run(sb, "grep -E ' /(workspace|tmp) ' /proc/mounts | cut -d' ' -f2,3")
        assert sorted(mounts.splitlines()) == ["/tmp tmpfs", "/workspace tmpfs"]
        assert await run(sb, "echo hi > here && cat here && echo t > /tmp/t && cat /tmp/t") \
            == "hi\nt\n"
        await sb.write_file("note.txt", "via the file API")
        assert await sb.read_file("/workspace/note.txt") == b"via the file API"


async def test_tmpfs_paths_are_writable_executable_tmpfs() -> None:
    async with sandbox(tmpfs_paths=["/scratch:size=8m"], run_as_user="1000") as sb:
        mounts = await run(sb, "grep ' /scratch ' /proc/mounts")
        fs, options = mounts.split()[2], mounts.split()[3].split(",")
        assert fs == "tmpfs" and "rw" in options and "noexec" not in options
        assert "size=8192k" in options
        script = "printf '#!/bin/sh\\necho ran\\n' > /scratch/x.sh && chmod +x /scratch/x.sh " \
                 "&& /scratch/x.sh"
        assert await run(sb, script) == "ran\n"


async def test_read_only_and_masked_paths() -> None:
    masked = ["/etc/os-release", "/usr/share/doc"]
    # Root, explicitly: it owns /usr and /opt, so only the read-only mount can refuse.
    async with sandbox(IMAGE_PYTHON, read_only_paths=["/opt"], masked_paths=masked,
                       run_as_user="root") as sb:
        result = await sb.execute_command("touch /opt/x")
        assert not result.success and "Read-only file system" in result.stderr
        assert (await run(sb, "touch /usr/x && echo ok")) == "ok\n"  # only the listed path
        assert await run(sb, "cat /etc/os-release") == ""
        assert await run(sb, "ls -A /usr/share/doc") == ""
        result = await sb.execute_command("touch /usr/share/doc/x")
        assert not result.success and "Read-only file system" in result.stderr
        # Docker's own defaults stay masked next to ours.
        assert await run(sb, "cat /proc/keys") == ""


# -- privileges ------------------------------------------------------------------------------------


async def test_capabilities_added_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sandbox")
    async with sandbox(run_as_user="root", add_capabilities=["NET_ADMIN", "cap_net_raw"],
                       log_security_events=True) as sb:
        cap_eff = int(await status_field(sb, "CapEff"), 16)
        assert cap_eff == (1 << NET_ADMIN) | mask("NET_RAW")
    audits = [r.audit for r in caplog.records if r.name == "sandbox.audit"]
    assert {"event": "opt_in", "sandbox_id": sb.id, "setting": "security.add_capabilities",
            "granted": "NET_ADMIN, NET_RAW"} in audits
    # For the default non-root user, added capabilities reach only the bounding set.
    async with sandbox(add_capabilities=["CHOWN"]) as sb:
        assert int(await status_field(sb, "CapEff"), 16) == 0
        assert int(await status_field(sb, "CapBnd"), 16) == mask("CHOWN")


async def test_no_new_privileges_can_be_turned_off_explicitly() -> None:
    async with sandbox(no_new_privileges=False) as sb:  # prevent_escalation still sets it
        assert await status_field(sb, "NoNewPrivs") == "1"
    async with sandbox(no_new_privileges=False, prevent_escalation=False) as sb:
        assert await status_field(sb, "NoNewPrivs") == "0"


async def test_run_as_user_and_group() -> None:
    async with sandbox(IMAGE_PYTHON, run_as_user="1000") as sb:
        assert await run(sb, "id -u; id -g") == "1000\n1000\n"
        assert int(await status_field(sb, "CapEff"), 16) == 0
        assert await run(sb, "stat -c %u .; touch mine && echo ok") == "1000\nok\n"
    async with sandbox(IMAGE_PYTHON, run_as_user="sandbox", run_as_group="100") as sb:
        assert await run(sb, "id -un; id -g") == "sandbox\n100\n"
    async with sandbox(IMAGE_PYTHON, run_as_group="100") as sb:
        assert await run(sb, "id -u; id -g") == "1000\n100\n"
    # A uid the image's passwd lacks: the engine would give it group 0; the SDK its own number.
    async with sandbox(IMAGE_PYTHON, run_as_user="1234") as sb:
        assert await run(sb, "id -u; id -g; stat -c %u:%g .; touch x && echo ok") == \
            "1234\n1234\n1234:1234\nok\n"
        assert await run(sb, "id -g", user="+1234") == "1234\n"  # a command's user too
        with pytest.raises(SecurityViolation, match="uid 4321"):  # but no other uid (issue 25)
            await run(sb, "id -g", user="4321")


async def test_seccomp_profile_file_denies_mkdir(tmp_path: Path) -> None:
    profile = tmp_path / "no-mkdir.json"
    profile.write_text(json.dumps({
        "defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}],
    }))
    async with sandbox(seccomp_profile=str(profile)) as sb:
        assert await status_field(sb, "Seccomp") == "2"
        result = await sb.execute_command("mkdir /tmp/d")
        assert not result.success and "Operation not permitted" in result.stderr
        assert await run(sb, "touch /tmp/f && echo ok") == "ok\n"


# -- gVisor ----------------------------------------------------------------------------------------


async def test_gvisor_runtime_and_its_process_limit() -> None:
    config = SandboxConfig(image=IMAGE_PYTHON, runtime="runsc",
                           resources=ResourceLimits(process_limit=64))
    async with Sandbox(config) as sb:
        assert "gVisor" in await run(sb, "dmesg")
        nproc = "import resource; print(*resource.getrlimit(resource.RLIMIT_NPROC))"
        assert (await run(sb, f"python3 -c '{nproc}'")).split() == ["64", "64"]
        count, err = (await run(sb, f"python3 -c '{FORK_UNTIL_REFUSED}'")).split()
        assert int(err) == EAGAIN and 10 < int(count) < 64
        assert await run(sb, "echo alive") == "alive\n"


async def test_gvisor_enforces_read_only_root_and_hides_what_docker_masks() -> None:
    # runsc ignores MaskedPaths/ReadonlyPaths (so listed ones are refused, below); Docker's
    # defaults need nothing from it: gVisor's own /proc and /sys lack or protect those paths.
    config = SandboxConfig(image=IMAGE_BUSYBOX, runtime="runsc",
                           security=SecurityPolicy(read_only_root=True, run_as_user="root"))
    async with Sandbox(config) as sb:
        result = await sb.execute_command("touch /etc/x")
        assert not result.success and "Read-only file system" in result.stderr
        script = "for p in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug " \
                 "/proc/sysrq-trigger; do [ -e $p ] && echo $p; done; ls -A /sys/firmware"
        assert await run(sb, script) == ""
        result = await sb.execute_command("echo x > /proc/sys/kernel/domainname")
        # EPERM with Docker's default capabilities, EACCES with none: refused either way.
        assert not result.success
        assert re.search("Operation not permitted|Permission denied", result.stderr)


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "field", "error"), [
    (SandboxConfig(resources=ResourceLimits(disk_limit=1 << 30)), "resources.disk_limit",
     SandboxInitFailed),
    (SandboxConfig(resources=ResourceLimits(disk_request=1 << 62)), "resources.disk_request",
     SandboxInitFailed),
    (SandboxConfig(resources=ResourceLimits(network_in_limit=1000)), "resources.network_in_limit",
     SandboxInitFailed),
    (SandboxConfig(resources=ResourceLimits(network_out_limit=1000)),
     "resources.network_out_limit", SandboxInitFailed),
    (SandboxConfig(network=NetworkConfig(allowed_hosts=["example.com"])), "network.allowed_hosts",
     SandboxInitFailed),
    (SandboxConfig(network=NetworkConfig(blocked_hosts=["example.com"])), "network.blocked_hosts",
     SandboxInitFailed),
    (SandboxConfig(network=NetworkConfig(allowed_ports=[443])), "network.allowed_ports",
     SandboxInitFailed),
    (SandboxConfig(network=NetworkConfig(ingress_limit=1000)), "network.ingress_limit",
     SandboxInitFailed),
    (SandboxConfig(network=NetworkConfig(egress_limit=1000)), "network.egress_limit",
     SandboxInitFailed),
    (SandboxConfig(security=SecurityPolicy(apparmor_profile="docker-default")),
     "security.apparmor_profile", SecurityViolation),
    (SandboxConfig(security=SecurityPolicy(selinux_context="type:svirt_t")),
     "security.selinux_context", SecurityViolation),
    (SandboxConfig(runtime="nope"), "runtime", SandboxInitFailed),
    (SandboxConfig(runtime="runsc", security=SecurityPolicy(
        seccomp_profile='{"defaultAction": "SCMP_ACT_ALLOW"}')), "security.seccomp_profile",
     SandboxInitFailed),
    (SandboxConfig(runtime="runsc", resources=ResourceLimits(cpu_time_limit=5)),
     "resources.cpu_time_limit", SandboxInitFailed),
    (SandboxConfig(runtime="runsc", security=SecurityPolicy(masked_paths=["/etc/hostname"])),
     "security.masked_paths", SandboxInitFailed),
    (SandboxConfig(runtime="runsc", security=SecurityPolicy(read_only_paths=["/etc"])),
     "security.read_only_paths", SandboxInitFailed),
    (SandboxConfig(runtime="runsc", security=SecurityPolicy(apparmor_profile="docker-default")),
     "security.apparmor_profile", SandboxInitFailed),
    (SandboxConfig(security=SecurityPolicy(seccomp_profile='{"defaultAction": "SCMP_ACT_LOG"}')),
     "security.seccomp_profile", SecurityViolation),
    (SandboxConfig(security=SecurityPolicy(seccomp_profile="{}")),
     "security.seccomp_profile", SecurityViolation),
    (SandboxConfig(security=SecurityPolicy(add_capabilities=["SYS_RESOURCE"])),
     "security.add_capabilities", SecurityViolation),
    (SandboxConfig(security=SecurityPolicy(seccomp_profile="unconfined")),
     "security.seccomp_profile", SecurityViolation),
    (SandboxConfig(security=SecurityPolicy(isolate_process=False)),
     "security.isolate_process", SecurityViolation),
    (SandboxConfig(security=SecurityPolicy(isolate_process=False, allow_host_pid=True)),
     "security.isolate_process", SecurityViolation),
], ids=lambda v: v if isinstance(v, str) else "")
async def test_unenforceable_fields_are_refused_at_initialize(
    config: SandboxConfig, field: str, error: type[Exception]
) -> None:
    sb = Sandbox(config)
    with pytest.raises(error) as caught:
        await sb.initialize()
    assert re.search(rf"(^| ){re.escape(field)}[:=]", str(caught.value)), str(caught.value)
    if field == "runtime":
        assert "available:" in str(caught.value) and "runsc" in str(caught.value)
    elif config.runtime == "runsc":
        assert "gVisor (runsc)" in str(caught.value)  # the runtime's reason, not another
    assert no_container_with(sb.id)


# -- per-command flags -----------------------------------------------------------------------------


async def test_allow_network_is_refused_before_anything_runs() -> None:
    async with sandbox() as sb:
        with pytest.raises(NetworkAccessDenied):
            await sb.execute_command(Command.shell("touch /tmp/ran", allow_network=True))
        assert await run(sb, "ls /tmp") == ""


async def test_allow_write_false_cannot_write_the_working_dir() -> None:
    async with sandbox(IMAGE_PYTHON, run_as_user="1000") as sb:
        result = await sb.execute_command(Command.shell("id -u; touch x", allow_write=False))
        assert result.stdout == "65534\n" and "Permission denied" in result.stderr
        assert await run(sb, "ls -A") == ""


async def test_root_command_in_non_root_sandbox_is_refused() -> None:
    async with sandbox(IMAGE_PYTHON, run_as_user="1000") as sb:
        for user in ("root", "0", "0:0", "1000:0", "1000:root"):
            with pytest.raises(SecurityViolation, match="root"):
                await sb.execute_command(Command.shell("touch /tmp/ran", user=user))
        assert await run(sb, "ls /tmp") == ""
    # A sandbox in the root group (as OpenShift runs things) keeps that group, not more.
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, security=SecurityPolicy(
            run_as_user="1000", run_as_group="0"))) as sb:
        assert (await sb.execute_command(Command.shell("id -g", user="1000:0"))).stdout == "0\n"
        with pytest.raises(SecurityViolation, match="root"):
            await sb.execute_command(Command.shell("id -u", user="root"))


async def test_the_root_keepalive_never_runs_a_sleep_planted_in_a_path_directory() -> None:
    # The attacker: the sandbox user can write a PATH directory ahead of the system's (as
    # with a conda prefix it owns; here /usr/local/bin opened to all by root) and plants a
    # `sleep` there that notes who ran it. The container's main process is root and loops
    # on `sleep 3600`: once its sleep ends (killed here to skip the hour) the loop must take
    # the system's `sleep`.
    # (Debian's dash looks `sleep` up in PATH; busybox's shell runs its applet whatever PATH.)
    planted = '#!/bin/sh\nid -u >> /tmp/ran\nexec /bin/sleep "$@"\n'
    each_keepalive_sleep = ("for d in /proc/[0-9]*; do [ \"$(tr '\\0' ' ' < $d/cmdline "
                            "2>/dev/null)\" = 'sleep 3600 ' ] && {}; done; true")
    async with Sandbox(SandboxConfig(image=IMAGE_PYTHON, stats_interval=0)) as sb:
        cid = sb.backend.container_id  # type: ignore[attr-defined]
        docker_cli("exec", "-u", "0", cid, "sh", "-c",
                   "mkdir -p /usr/local/bin && chmod 777 /usr/local/bin && "
                   ": > /tmp/ran && chmod 666 /tmp/ran")
        await sb.write_file("/usr/local/bin/sleep", planted, mode=0o755)
        found = await sb.execute_command(Command(
            executable="sh", args=("-c", "sleep 0; cat /tmp/ran; echo $PATH")))
        assert found.stdout.startswith("1000\n") and "/usr/local/bin" in found.stdout, found
        docker_cli("exec", "-u", "0", cid, "sh", "-c",
                   each_keepalive_sleep.format("kill ${d#/proc/}"))
        ran = await sb.execute_command(Command(
            executable="sh",
            args=("-c", "sleep 0.3; cat /tmp/ran; " + each_keepalive_sleep.format("echo slept"))))
    lines = ran.stdout.splitlines()
    # The user's own two calls and no root one; the loop sleeps again (the system's sleep).
    assert lines == ["1000", "1000", "slept"], ran


@pytest.fixture
def user_image(tmp_path: Path) -> Iterator[str]:
    """The busybox image whose own USER is the sandbox user (1000)."""
    yield from derived_image(tmp_path, f"sandbox-test-user-image:{uuid.uuid4().hex[:8]}",
                             "USER 1000:1000\n", base=IMAGE_BUSYBOX)


async def test_the_main_process_is_root_whatever_the_images_user(user_image: str) -> None:
    # The attacker: the sandbox user signals the keepalive (the main process's child). Run as
    # the image's USER it would die and stop the sandbox; as root (no capabilities) it is
    # refused, and commands still run as the image's user.
    kill = "kill -9 $(cat /proc/1/task/1/children) 2>/dev/null; echo $?"
    async with Sandbox(SandboxConfig(image=user_image, stats_interval=0)) as sb:
        shown = await sb.execute_command(Command(
            executable="sh", args=("-c", f"id -u; stat -c %u:%g /proc/1; {kill}; sleep 0.3; "
                                         "echo alive")))
    assert shown.stdout == "1000\n0:0\n1\nalive\n", shown


@pytest.fixture
def health_image(tmp_path: Path) -> Iterator[str]:
    """An image whose HEALTHCHECK notes who ran it, every half second."""
    yield from derived_image(
        tmp_path, f"sandbox-test-health-image:{uuid.uuid4().hex[:8]}",
        "USER 1000:1000\nHEALTHCHECK --interval=500ms "
        "CMD id -u >> /tmp/health-ran\n", base=IMAGE_BUSYBOX)


async def test_an_images_healthcheck_never_runs(health_image: str) -> None:
    # An image's HEALTHCHECK runs as the container's User (root here) with the image's PATH,
    # where the sandbox user may own an entry: the SDK turns it off (its own checks stay).
    async with Sandbox(SandboxConfig(image=health_image, stats_interval=0)) as sb:
        shown = await sb.execute_command(Command(
            executable="sh", args=("-c", "sleep 2; cat /tmp/health-ran 2>&1; id -u")))
    assert shown.stdout.endswith("No such file or directory\n1000\n"), shown


async def test_a_process_spec_without_a_user_runs_as_the_sandbox_user() -> None:
    # ProcessSpec.user "" is "the sandbox's default" on every backend; on Docker the
    # container's own User is root (the keepalive's), which must not be what "" gives.
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX, stats_interval=0)) as sb:
        result = await sb.backend.run_process(ProcessSpec(argv=("id", "-u")))
    assert result.stdout == "1000\n", result
