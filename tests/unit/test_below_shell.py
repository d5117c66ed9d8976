"""`sandbox._below_shell`: the subshells between a session command's marked processes and its
shell, by parent links alone, and the shell's children since the command was sent, by their
start (pure)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbox._below_shell import between, boot_tick, forked_since, ns_pid

# pid -> parent: 1 init; 100 the shell; 101 a subshell; 102 its subshell; 103 a marked program;
# 200 a process beside the shell with a marked child 201.
PARENTS = {1: 0, 100: 1, 101: 100, 102: 101, 103: 102, 200: 1, 201: 200}


def test_the_chain_up_to_the_shell_without_the_shell() -> None:
    assert between([103], PARENTS, 100, lambda pid: pid) == {101, 102}


def test_a_chain_that_never_reaches_the_shell_gives_nothing() -> None:
    assert between([201], PARENTS, 100, lambda pid: pid) == set()
    assert between([103], PARENTS, 0, lambda pid: pid) == set()  # the shell unknown


def test_the_shell_is_matched_by_its_pid_inside_the_sandbox() -> None:
    inner = {100: 7, 101: 8, 102: 9}
    assert between([103], PARENTS, 7, lambda pid: inner.get(pid, 0)) == {101, 102}
    assert between([103], PARENTS, 100, lambda pid: inner.get(pid, 0)) == set()


def test_a_parent_loop_ends() -> None:
    assert between([2], {2: 3, 3: 2}, 100, lambda pid: pid) == set()


def test_ns_pid_reads_the_innermost_number(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "status").write_text("Name:\tsh\nNSpid:\t42\t3\n")
    assert ns_pid(42, tmp_path) == 3
    assert ns_pid(43, tmp_path) == 0


def test_a_walk_ends_at_the_sandboxs_init_and_at_its_edge() -> None:
    """Host pids are large, the sandbox's init is not host pid 1, and the SDK may run in a pid
    namespace of its own where its ancestors' numbers are small: a ``$$`` equal to one of
    theirs (or forged to) must not take the sandbox's init or anything above it (the second
    review of round 11: a session timeout killed the whole process sandbox)."""
    # 50 the SDK (inner pid 17 in its own namespace), 8000 bwrap, 8001 the sandbox's init (1),
    # 8002 the real shell (inner 5), 8003 an orphan reparented to init, marked.
    parents = {50: 1, 8000: 50, 8001: 8000, 8002: 8001, 8003: 8001}
    inner = {50: 17, 8000: 0, 8001: 1, 8002: 5, 8003: 9}  # 0: outside the sandbox
    assert between([8003], parents, 17, lambda pid: inner.get(pid, 0)) == set()
    assert between([8003], parents, 5, lambda pid: inner.get(pid, 0)) == set()
    # Below the real shell, the chain is still found.
    parents |= {8004: 8002, 8005: 8004}
    inner |= {8004: 10, 8005: 11}
    assert between([8005], parents, 5, lambda pid: inner.get(pid, 0)) == {8004}


# The shell 100 (inner pid 7) and its children, the command sent in tick 60: 101 an earlier
# job (started 50); 102 a subshell of builtins forked in the send's tick; 103 a program of a
# command that ended in that tick, 104 such a command's subshell in that tick whose program
# 105 carries its marker; 106 started later with such a marker (forged); 107 a
# subshell started later and 108 below it; 200 a process beside the shell and 201 its child.
TREE = {1: 0, 100: 1, 101: 100, 102: 100, 103: 100, 104: 100, 105: 104, 106: 100, 107: 100,
        108: 107, 200: 1, 201: 200}
STARTS = {1: 0, 100: 10, 101: 50, 102: 60, 103: 60, 104: 60, 105: 61, 106: 61, 107: 70,
          108: 75, 200: 20, 201: 80}
OTHER = {103, 105, 106}  # carry the marker of a command that ended in the send's tick


def inner7(pid: int) -> int:
    return {1: 1, 100: 7}.get(pid, pid)


def test_the_shells_children_since_the_send_are_the_commands() -> None:
    """Started after the send's tick: the command's, whatever their environment says; in that
    tick: the command's unless they or one below them carry the marker of a command that
    ended in that tick; before
    it, or not the shell's children: not taken here (the caller adds descendants)."""
    assert forked_since(TREE, STARTS, 7, inner7, 60, OTHER.__contains__) == {102, 106, 107}


def test_no_send_tick_or_no_shell_takes_nothing() -> None:
    assert forked_since(TREE, STARTS, 7, inner7, 0, OTHER.__contains__) == set()
    assert forked_since(TREE, STARTS, 0, inner7, 60, OTHER.__contains__) == set()


def test_a_forged_shell_pid_never_takes_the_sandboxs_init_or_outside() -> None:
    """``$$`` forged to 1 (the sandbox's init: its children are every orphan) or to a number
    that only a process outside the sandbox has (inner pid 0 or less) selects nothing."""
    assert forked_since(TREE, STARTS, 1, inner7, 60, OTHER.__contains__) == set()
    outside = {1: 1, 100: 0, 200: -1}
    assert forked_since(TREE, STARTS, 100, lambda pid: outside.get(pid, pid), 60,
                        OTHER.__contains__) == set()
    # 200 is not the shell: its child started after the send is not taken either.
    assert 201 not in forked_since(TREE, STARTS, 7, inner7, 60, OTHER.__contains__)


def test_the_marker_is_read_only_in_the_sends_own_tick() -> None:
    looked: list[int] = []

    def earlier(pid: int) -> bool:
        looked.append(pid)
        return pid in OTHER

    forked_since(TREE, STARTS, 7, inner7, 60, earlier)
    assert set(looked) <= {102, 103, 104, 105}


def test_boot_tick_is_the_clock_of_a_process_start() -> None:
    """A process started after `boot_tick` shows a start (``/proc/<pid>/stat`` field 22) of
    at least that tick; the test's own process, started before, at most."""
    before = boot_tick()
    with subprocess.Popen(["sleep", "5"]) as child:
        try:
            stat = Path(f"/proc/{child.pid}/stat").read_text()
            started = int(stat.rpartition(")")[2].split()[19])
        finally:
            child.kill()
    after = boot_tick()
    assert before <= started <= after
    own = int(Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19])
    assert own <= before


def test_a_fork_of_the_shell_adopted_by_init_is_the_commands() -> None:
    """A double fork leaves the shell's children: the loop's parent is the sandbox's init.
    Started since the send with the shell's own environment (``shell_fork``), it is the
    command's; the shell itself (started in the send's tick: a first command sent at once)
    and an older fork are not."""
    tree = {**TREE, 300: 1, 301: 1}
    starts = {**STARTS, 100: 60, 300: 65, 301: 40}
    forks = {100, 300, 301}  # the shell's environment, byte for byte
    assert forked_since(tree, starts, 7, inner7, 60, OTHER.__contains__,
                        forks.__contains__) == {102, 106, 107, 300}
    # Without the environment test, the adopted loop is not found.
    assert 300 not in forked_since(tree, starts, 7, inner7, 60, OTHER.__contains__)
