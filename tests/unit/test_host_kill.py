"""The container seen from the host (`_host`: its cgroup, its /proc) and which processes a kill
from the host takes, read from a fake /proc and cgroup (pure logic), and the exec gate's
order: a checkpoint waits for starts, and holds new ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from sandbox.docker import _checkpoint
from sandbox.docker._checkpoint import runc_init_inside
from sandbox.docker._exec_gate import ExecGate
from sandbox.docker._host import ContainerCgroup, find_container_cgroup, read_process, read_stat
from sandbox.docker._host_kill import _targets

MARK = b"SANDBOX_EXEC_ID=abc"


def fake(tmp: Path, procs: dict[int, tuple[int, str, bytes]]) -> ContainerCgroup:
    """procs: pid -> (ppid, state, environ); all in the container's cgroup."""
    for pid, (ppid, state, env) in procs.items():
        d = tmp / "proc" / str(pid)
        d.mkdir(parents=True)
        rest = " ".join(["0"] * 17)  # pgrp .. itrealvalue
        (d / "stat").write_text(f"{pid} (some (name)) {state} {ppid} {rest} {1000 + pid} 0\n")
        (d / "environ").write_bytes(env)
    (tmp / "cg").mkdir()
    (tmp / "cg" / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
    (tmp / "cg" / "freezer.state").write_text("THAWED\n")
    return ContainerCgroup(procs=tmp / "cg" / "cgroup.procs",
                           freeze=tmp / "cg" / "freezer.state", v2=False)


def test_targets_are_the_marked_the_exec_root_and_their_descendants(tmp_path: Path) -> None:
    cg = fake(tmp_path, {
        10: (5, "S", b"PATH=/bin\0"),           # the container's init (parent: the shim)
        20: (4, "S", b"HOME=/\0"),              # the exec's root, environment scrubbed
        21: (20, "S", b"X=1\0"),                # its child, unmarked
        30: (10, "S", MARK + b"\0"),            # double-forked, re-parented to init, marked
        31: (30, "R", b"\0"),                   # its child
        32: (30, "Z", MARK + b"\0"),            # a zombie: already dead
        40: (10, "S", b"SANDBOX_EXEC_ID=abcd\0"),  # another command's marker
    })
    found = _targets(cg, MARK, 20, tmp_path / "proc")
    assert found is not None and set(found) == {20, 21, 30, 31}
    assert found[20] == 1020  # start time, to tell a reused pid apart
    # A root pid that is not an exec's (its parent is in the container) is not a seed.
    found = _targets(cg, MARK, 21, tmp_path / "proc")
    assert found is not None and set(found) == {30, 31}


def test_a_session_commands_subshells_up_to_its_shell_are_targets(tmp_path: Path) -> None:
    """A subshell the command forked execs nothing, so /proc shows it without the marker: it
    is taken when a marked process is below it and the chain reaches the session's shell
    (pid 7 in the container); the shell and an earlier command's job are not."""
    cg = fake(tmp_path, {
        50: (5, "S", b"PATH=/bin\0"),              # the session's shell (parent: the shim)
        51: (50, "S", b"PATH=/bin\0"),             # the command's subshell: shell's environ
        52: (51, "S", MARK + b"\0"),               # its program, marked
        53: (51, "S", b"PATH=/bin\0"),             # its nested subshell, not yet running one
        60: (50, "S", b"PATH=/bin\0"),             # an earlier command's subshell
        61: (60, "S", b"SANDBOX_EXEC_ID=abcd\0"),  # its program: the earlier marker
        70: (5, "S", b"PATH=/bin\0"),              # not below the shell
        71: (70, "S", MARK + b"\0"),
    })
    for pid, inner in {50: 7, 51: 8, 52: 9, 53: 10, 60: 11, 61: 12, 70: 13, 71: 14}.items():
        (tmp_path / "proc" / str(pid) / "status").write_text(f"Name:\tx\nNSpid:\t{pid}\t{inner}\n")
    found = _targets(cg, MARK, 0, tmp_path / "proc", shell=7)
    assert found is not None and set(found) == {51, 52, 53, 71}
    # Without the shell's pid, the marked alone (and below them), as before.
    found = _targets(cg, MARK, 0, tmp_path / "proc")
    assert found is not None and set(found) == {52, 71}


def test_a_session_shells_children_since_the_send_are_targets(tmp_path: Path) -> None:
    """A subshell of builtins alone (no marked process anywhere below it) that the shell
    forked once the command was sent is taken, with all below it; an earlier command's job
    is not, nor one started in the send's own tick that carries the exact marker of a command
    that ended in that tick (start ticks here: 1000 + pid, the command sent in tick 1055)."""
    cmd = b"SANDBOX_SESSION_CMD=new"
    shell_env = b"PATH=/bin\0SANDBOX_EXEC_ID=sh\0"  # the session's shell is an exec
    cg = fake(tmp_path, {
        50: (5, "S", shell_env),                   # the session's shell (parent: the shim)
        51: (50, "S", shell_env),                  # an earlier command's subshell
        55: (50, "S", shell_env + b"SANDBOX_SESSION_CMD=old\0"),  # earlier job, send's tick
        56: (50, "R", shell_env),                  # the command's subshell of builtins
        57: (56, "R", shell_env),                  # its own subshell
        58: (57, "Z", shell_env),                  # a zombie: already dead
        60: (5, "S", b"PATH=/bin\0SANDBOX_EXEC_ID=x\0"),  # another exec, and
        61: (60, "S", b"PATH=/bin\0"),            # its child since the send
    })
    for pid, inner in {50: 7, 51: 8, 55: 9, 56: 10, 57: 11, 58: 12, 60: 13, 61: 14}.items():
        (tmp_path / "proc" / str(pid) / "status").write_text(f"Name:\tx\nNSpid:\t{pid}\t{inner}\n")
    found = _targets(cg, cmd, 0, tmp_path / "proc", shell=7, since=1055,
                     spare=(b"SANDBOX_SESSION_CMD=old",))
    assert found is not None and set(found) == {56, 57}
    # No command ended in the send's tick: every child of the shell since then is this
    # command's, whatever marker it shows (a forged one, or one of a command ended earlier).
    found = _targets(cg, cmd, 0, tmp_path / "proc", shell=7, since=1055)
    assert found is not None and set(found) == {55, 56, 57}
    found = _targets(cg, cmd, 0, tmp_path / "proc", shell=7, since=1055,
                     spare=(b"SANDBOX_SESSION_CMD=ol",))
    assert found is not None and set(found) == {55, 56, 57}
    # Unknown send tick or shell: nothing of them (no marked process either).
    assert _targets(cg, cmd, 0, tmp_path / "proc", shell=7) == {}
    assert _targets(cg, cmd, 0, tmp_path / "proc", since=1055) == {}


def test_only_an_execs_own_process_is_taken_for_the_shell(tmp_path: Path) -> None:
    """A ``$$`` that names a process without the exec's marker (gVisor's own processes seen
    from the host, the container's init and keepalive) or one whose parent is in the
    container (not an exec's own process) selects none of its children."""
    cg = fake(tmp_path, {
        50: (5, "S", b"PATH=/bin\0"),                     # no exec marker
        51: (50, "S", b"PATH=/bin\0"),
        52: (50, "S", b"SANDBOX_EXEC_ID=x\0"),            # an exec's marker, parent inside
        53: (52, "S", b"SANDBOX_EXEC_ID=x\0"),
    })
    for pid, inner in {50: 7, 51: 8, 52: 9, 53: 10}.items():
        (tmp_path / "proc" / str(pid) / "status").write_text(f"Name:\tx\nNSpid:\t{pid}\t{inner}\n")
    for shell in (7, 9):
        assert _targets(cg, b"SANDBOX_SESSION_CMD=new", 0, tmp_path / "proc", shell=shell,
                        since=1040) == {}


def test_an_unreadable_cgroup_is_no_answer(tmp_path: Path) -> None:
    cg = ContainerCgroup(procs=tmp_path / "missing", freeze=None, v2=False)
    assert _targets(cg, MARK, 1, tmp_path) is None
    assert cg.state() == "" and not cg.set_frozen(True)


def test_a_cgroup_is_only_trusted_when_it_names_the_container(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "7").mkdir(parents=True)
    (proc / "7" / "cgroup").write_text("9:freezer:/docker/aaaa\n1:pids:/docker/aaaa\n")
    (tmp_path / "cg" / "freezer" / "docker" / "aaaa").mkdir(parents=True)
    (tmp_path / "cg" / "freezer" / "docker" / "aaaa" / "freezer.state").write_text("THAWED")
    found = find_container_cgroup(7, "aaaa", proc=proc, root=tmp_path / "cg")
    assert found is not None and found.freeze is not None and found.state() == "THAWED"
    assert find_container_cgroup(7, "bbbb", proc=proc, root=tmp_path / "cg") is None
    assert find_container_cgroup(8, "aaaa", proc=proc, root=tmp_path / "cg") is None


class FakeEngine:
    def __init__(self) -> None:
        self.pid = 0

    async def inspect_exec(self, exec_id: str, *, deadline: float | None = None) -> Any:
        return {"Pid": self.pid, "ExitCode": None}


@pytest.mark.asyncio
async def test_a_checkpoint_waits_for_starts_and_holds_new_execs() -> None:
    gate, engine, order = ExecGate(), FakeEngine(), []
    await gate.enter()  # an exec is being started

    async def checkpoint() -> None:
        async with gate.closed(engine):  # type: ignore[arg-type]
            order.append("frozen")
            await anyio.sleep(0.05)
        order.append("thawed")

    async def late_exec() -> None:
        await gate.enter()
        order.append("late exec starts")
        gate.started(None)

    async with anyio.create_task_group() as tg:
        tg.start_soon(checkpoint)
        await anyio.sleep(0.02)
        assert order == []  # the start is still in flight
        gate.started("e1")  # the engine answered; not yet seen running
        await anyio.sleep(0.02)
        assert order == []
        engine.pid = 42  # now the engine reports its process
        with anyio.fail_after(10):
            while not order:  # noqa: ASYNC110 (the checkpoint reports through a list)
                await anyio.sleep(0.005)
        assert gate.closed_now
        tg.start_soon(late_exec)
    assert order == ["frozen", "thawed", "late exec starts"]


def test_an_exec_caught_starting_in_the_freeze_is_seen(tmp_path: Path) -> None:
    cg = fake(tmp_path, {10: (5, "S", b""), 11: (10, "S", b"")})
    assert not runc_init_inside(cg, tmp_path / "proc")
    (tmp_path / "proc" / "11" / "stat").write_text(  # named so by a command: parent inside
        "11 (runc:[2:INIT]) S 10 " + " ".join(["0"] * 20) + "\n")
    assert not runc_init_inside(cg, tmp_path / "proc")
    (tmp_path / "proc" / "12").mkdir()
    (tmp_path / "proc" / "12" / "stat").write_text(  # runc's own: its parent is outside
        "12 (runc:[2:INIT]) D 999 " + " ".join(["0"] * 20) + "\n")
    (tmp_path / "cg" / "cgroup.procs").write_text("10\n11\n12\n")
    assert runc_init_inside(cg, tmp_path / "proc")


@pytest.mark.asyncio
async def test_a_freeze_stuck_freezing_is_thawed_and_the_commit_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cg = fake(tmp_path, {10: (5, "S", b"")})
    assert cg.freeze is not None
    cg.freeze.write_text("FREEZING\n")
    monkeypatch.setattr(_checkpoint, "WEDGE_FREEZING", 0.3)
    monkeypatch.setattr(_checkpoint, "RECOVER_WAIT", 0.1)
    watch = _checkpoint.FreezeWatch(cg)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch.run, tg.cancel_scope)
            await anyio.sleep_forever()  # the engine's commit, never coming back
    assert "FREEZING" in watch.wedged and cg.freeze.read_text() == "THAWED"


@pytest.mark.parametrize("freeze", [True, False])
def test_a_kill_freezes_only_when_the_starts_settled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, freeze: bool,
) -> None:
    """An exec of the SDK still starting must not be frozen (its `runc init` can wedge the
    engine, and runc refuses execs into a frozen container): the kill then goes unfrozen."""
    import shutil

    from sandbox.docker import _host_kill

    cg = fake(tmp_path, {10: (5, "S", b"\0"), 20: (4, "S", MARK + b"\0")})
    writes: list[str] = []
    real_set = ContainerCgroup.set_frozen

    def set_frozen(self: ContainerCgroup, frozen: bool) -> bool:
        writes.append("FROZEN" if frozen else "THAWED")
        return real_set(self, frozen)

    def kill(pid: int, _sig: int) -> None:  # a fake /proc: never signal a real process
        shutil.rmtree(tmp_path / "proc" / str(pid))
        (tmp_path / "cg" / "cgroup.procs").write_text("10\n")

    monkeypatch.setattr(ContainerCgroup, "set_frozen", set_frozen)
    monkeypatch.setattr(_host_kill.os, "kill", kill)
    monkeypatch.setattr(_host_kill, "_wait_frozen", lambda cg: None)
    assert _host_kill.kill_from_host(cg, MARK.decode(), 20, freeze=freeze,
                                     proc=tmp_path / "proc") is True
    # Each round that freezes thaws again (the last round's look finds none left).
    assert writes == (["FROZEN", "THAWED"] * 2 if freeze else [])


def test_the_pools_listing_walks_cgroups_the_container_made(tmp_path: Path) -> None:
    """A process moved into a sub-cgroup leaves the top cgroup.procs: the pool's reset must
    still find it (`tree_pids`); the kill's `pids` reads the top listing only."""
    cg = fake(tmp_path, {10: (5, "S", b""), 11: (10, "S", b"")})
    (tmp_path / "cg" / "hide" / "deeper").mkdir(parents=True)
    (tmp_path / "cg" / "hide" / "deeper" / "cgroup.procs").write_text("12\n")
    assert cg.tree_pids() == {10, 11, 12}
    assert cg.pids() == [10, 11]


def test_a_v2_freeze_counts_only_once_the_kernel_reports_it(tmp_path: Path) -> None:
    base = tmp_path / "cg"
    base.mkdir()
    (base / "cgroup.freeze").write_text("0\n")
    (base / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    cg = ContainerCgroup(procs=base / "cgroup.procs", freeze=base / "cgroup.freeze", v2=True)
    with cg.hold_frozen(0.05) as frozen:  # asked, but the kernel never says frozen
        assert not frozen and (base / "cgroup.freeze").read_text() == "1"
    assert (base / "cgroup.freeze").read_text() == "0"  # thawed after
    (base / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    with cg.hold_frozen(0.05) as frozen:
        assert frozen


def test_a_v2_freeze_the_kernel_has_not_reported_reads_as_freezing(tmp_path: Path) -> None:
    """The kill's wait and FreezeWatch read state(): on v2 an asked-for freeze is not yet a
    freeze (as v1's FREEZING), so a stuck one is seen there too."""
    base = tmp_path / "cg"
    base.mkdir()
    (base / "cgroup.freeze").write_text("1\n")
    (base / "cgroup.events").write_text("populated 1\nfrozen 0\n")
    cg = ContainerCgroup(procs=base / "cgroup.procs", freeze=base / "cgroup.freeze", v2=True)
    assert cg.state() == "FREEZING"
    (base / "cgroup.events").write_text("populated 1\nfrozen 1\n")
    assert cg.state() == "FROZEN"
    (base / "cgroup.freeze").write_text("0\n")
    assert cg.state() == "THAWED"


def test_a_host_process_is_read_with_its_ids_and_command_line(tmp_path: Path) -> None:
    fake(tmp_path, {10: (5, "S", b"")})
    proc = tmp_path / "proc"
    (proc / "10" / "status").write_text("Name:\tsh\nUid:\t0\t0\t0\t0\nGid:\t1\t1\t1\t1\n"
                                        "Groups:\t2 3\n")
    (proc / "10" / "cmdline").write_bytes(b"sleep\x003600\x00")
    got = read_process(10, proc)
    assert got is not None and (got.ppid, got.start, got.cmdline) == (5, 1010,
                                                                      b"sleep\x003600\x00")
    assert got.identity.is_root and got.identity.groups == {2, 3}
    st = read_stat(10, proc)
    assert st is not None and st.comm == "some (name)" and not st.zombie
    assert read_process(11, proc) is None and read_stat(11, proc) is None  # gone
