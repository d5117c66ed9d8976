"""A process sandbox's cleanup against trees its code shaped to defeat it: thousands of levels
deep, modes 000, and an entry that cannot go (immutable), which is named and left for gc."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
import pytest_asyncio
from anyio.streams.text import TextReceiveStream

from sandbox import IMAGE_BUSYBOX, CleanupIncomplete, Sandbox, SandboxConfig, gc
from sandbox.process._rootfs import resolve_rootfs
from sandbox.process._state import base_dir
from tests.integration._rootfs import busybox_root_owning

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]
REPO = str(Path(__file__).resolve().parents[2])

#: The attacker, in the sandbox's shell: under ``$1`` a chain ``$2`` directories deep (in 500
#: level segments: a shell cannot cd past PATH_MAX, so each is made apart and moved to the
#: bottom of the next) with a file, a 000 directory and the file ``$3`` (if given) at the
#: bottom; then beside it a read-only (0500) and a locked (000) directory.
HOSTILE = textwrap.dedent("""
    set -e
    cd "$1"
    seg() { mkdir "$1"; cd "$1"; i=0; while [ $i -lt 500 ]; do mkdir d; cd d; i=$((i+1)); done; }
    down=""; i=0; while [ $i -lt 500 ]; do down="$down/d"; i=$((i+1)); done
    ( seg part; echo payload > f; [ -z "$3" ] || echo s > "$3"
      mkdir -p z/in; echo x > z/in/f; chmod 000 z/in z )
    k=500; while [ $k -lt "$2" ]; do
      ( seg next ); mv part "next$down/part"; mv next part; k=$((k+500))
    done
    mv part chain
    mkdir -p ro/sub locked/in; echo x > ro/sub/f; echo y > locked/in/f
    ln -s / ro/root-link; chmod 0500 ro/sub ro; chmod 000 locked/in locked
    echo "$k"
""")


def bottom(top: Path, depth: int) -> Path:
    """Where `HOSTILE` put the bottom of its chain, ``depth`` levels under ``top``."""
    return top / "chain" / "/part/".join(["/".join(["d"] * 500)] * (depth // 500))


def config(**kw: object) -> SandboxConfig:
    return SandboxConfig(type="process", image=IMAGE_BUSYBOX, **kw)  # type: ignore[arg-type]


async def attack(box: Sandbox, where: str, depth: int, stuck: str = "") -> None:
    result = await box.execute_command(["sh", "-c", HOSTILE, "hostile", where, str(depth),
                                        stuck])
    assert result.success and result.stdout == f"{depth}\n", result.stderr


def chattr(flag: str, path: Path) -> None:
    """Set or clear the immutable flag: host root's power, not the sandbox's."""
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@pytest_asyncio.fixture
async def own_root() -> AsyncIterator[Path]:
    """A copy of the busybox root whose /etc the sandbox's user (host nobody) owns, so its
    writes there land in the overlay's upper directory."""
    async with busybox_root_owning("etc") as root:
        yield root


async def test_cleanup_takes_trees_5000_deep_and_000_modes_in_every_writable_place(
        own_root: Path) -> None:
    # shutil.rmtree raised RecursionError at 1,500 levels and left the state directory.
    box = Sandbox(SandboxConfig(type="process", image=str(own_root)))
    await box.initialize()
    state = base_dir() / box.id
    try:
        await attack(box, "/tmp", 1500)            # the state's tmp
        await attack(box, "/workspace", 5000)      # the working directory
        await attack(box, "/etc", 1500)            # the overlay's upper directory
        assert (bottom(state / "overlay" / "upper" / "etc", 1500) / "f").is_file()
        assert bottom(state / "work", 1000).is_dir()  # (PATH_MAX: see only the top part)
    finally:
        await box.cleanup()
    assert not state.exists()


_AS_NOBODY = textwrap.dedent("""
    import asyncio, json, sys
    from sandbox import Sandbox, SandboxConfig, SecurityPolicy
    from sandbox.process._state import base_dir

    async def main():
        sb = Sandbox(SandboxConfig(type="process", image=sys.argv[1],
                                   security=SecurityPolicy(read_only_root=True)))
        await sb.initialize()
        r = await sb.execute_command(["sh", "-c", sys.argv[2], "hostile", "/tmp", "1500"])
        await sb.cleanup()
        print(json.dumps({"made": r.stdout, "err": r.stderr,
                          "left": (base_dir() / sb.id).exists()}))

    asyncio.run(main())
""")


async def test_an_unprivileged_owner_takes_its_000_and_deep_trees_too() -> None:
    # Without root's override, 000 and 0500 directories must be opened up to be emptied.
    if os.getuid() != 0:
        pytest.fail("this test switches to nobody, so it must run as root", pytrace=False)
    root = (await resolve_rootfs(IMAGE_BUSYBOX)).path
    home = Path(tempfile.mkdtemp())
    os.chmod(home, 0o755)
    try:
        proc = await anyio.run_process(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-c", _AS_NOBODY, str(root), HOSTILE],
            env={"PATH": os.environ["PATH"], "HOME": str(home), "PYTHONPATH": REPO},
            check=False)
    finally:
        shutil.rmtree(home)
    assert proc.returncode == 0, proc.stderr.decode()
    out = json.loads(proc.stdout)
    assert out["made"] == "1500\n", out["err"]
    assert out["left"] is False


async def test_what_cannot_go_is_named_kept_for_a_retry_and_owner_json_stays() -> None:
    box = Sandbox(config())
    await box.initialize()
    state = base_dir() / box.id
    stuck = state / "tmp" / "stuck"
    try:
        await attack(box, "/tmp", 1500)
        await box.execute_command("echo x > /tmp/stuck")
        chattr("+i", stuck)  # host root's doing: the sandbox has no CAP_LINUX_IMMUTABLE
        with pytest.raises(CleanupIncomplete) as caught:
            await box.cleanup()
        assert caught.value.left == (str(state),)
        assert f"{stuck}: operation not permitted" in str(caught.value)
        assert sorted(os.listdir(state)) == ["owner.json", "tmp"]
        assert os.listdir(state / "tmp") == ["stuck"]  # everything else went
    finally:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            chattr("-i", stuck)
    await box.cleanup()  # a retry finishes it
    assert not state.exists()


_OWNER = textwrap.dedent("""
    import asyncio, json, sys
    from sandbox import CleanupIncomplete, Sandbox, SandboxConfig

    async def main():
        sb = Sandbox(SandboxConfig(type="process", image=sys.argv[1]))
        await sb.initialize()
        r = await sb.execute_command(["sh", "-c", sys.argv[2], "hostile", "/tmp", "1500",
                                      "stuck"])
        print(json.dumps({"id": sb.id, "made": r.stdout}), flush=True)
        sys.stdin.readline()
        try:
            await sb.cleanup()
            print(json.dumps({"error": ""}))
        except CleanupIncomplete as exc:
            print(json.dumps({"error": str(exc), "left": list(exc.left)}))

    asyncio.run(main())
""")


async def test_gc_finishes_what_a_failed_cleanup_left_after_its_owner_exits() -> None:
    root = (await resolve_rootfs(IMAGE_BUSYBOX)).path
    owner = await anyio.open_process([sys.executable, "-c", _OWNER, str(root), HOSTILE],
                                     env={**os.environ, "PYTHONPATH": REPO})
    stuck: Path | None = None
    try:
        assert owner.stdout is not None and owner.stdin is not None
        lines = TextReceiveStream(owner.stdout)
        buffer = ""
        with anyio.fail_after(120):
            while "\n" not in buffer:
                buffer += await lines.receive()
            made = json.loads(buffer.partition("\n")[0])
            state = base_dir() / made["id"]
            stuck = bottom(state / "tmp", 1500) / "stuck"
            chattr("+i", stuck)
            await owner.stdin.send(b"go\n")
            buffer = buffer.partition("\n")[2]
            while "\n" not in buffer:
                buffer += await lines.receive()
            await owner.wait()
        result = json.loads(buffer)
        assert result["left"] == [str(state)]
        assert "stuck: operation not permitted" in result["error"]
        assert (state / "owner.json").is_file()  # gc can still judge its owner
        chattr("-i", stuck)
        stuck = None
        report = await gc()
        assert made["id"] in [item.id for item in report.removed_process]
        assert not state.exists()
    finally:
        if stuck is not None:
            with contextlib.suppress(OSError, subprocess.CalledProcessError):
                chattr("-i", stuck)
        if owner.returncode is None:
            owner.kill()
            await owner.wait()


@pytest.mark.parametrize("joined", ["all", "last only"])
async def test_cgroup_removal_kills_every_member_even_one_missing_from_the_first_list(
        joined: str) -> None:
    # Removal kills who the first directory lists and lets the kernel's EBUSY say whether
    # anything is left elsewhere: a process only in the last directory (no sandbox process
    # can get there, but removal must not depend on that) is found and killed all the same.
    from sandbox.process._cgroup import available

    if available():
        pytest.skip(available())
    await anyio.to_thread.run_sync(_cgroup_removal, joined)


def _cgroup_removal(joined: str) -> None:
    from sandbox.process._cgroup import SandboxCgroup

    cgroup = SandboxCgroup(f"test-removal-{os.getpid()}-{joined.split()[0]}")
    cgroup.create()
    files = cgroup.procs_files if joined == "all" else cgroup.procs_files[-1:]
    join = "; ".join(f"echo $$ > {f}" for f in files)
    # A shell that ignores what it can, joins, then starts children that inherit the cgroup.
    proc = subprocess.Popen(["sh", "-c", f"trap '' TERM HUP INT; {join}; "
                             "sleep 1000 & sleep 1000 & echo ready; wait"],
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        members = cgroup.procs()
        assert len(members) == 3 and proc.pid in members
        pidfds = [os.pidfd_open(pid) for pid in members]
        assert cgroup.remove() == []
        assert not any(d.exists() for d in cgroup.dirs)
        for fd in pidfds:  # readable: that process has exited (reaped or not yet)
            assert select.select([fd], [], [], 0)[0] == [fd]
            os.close(fd)
        assert proc.wait(timeout=10) == -9
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
        cgroup.remove()
