"""`sandbox._below_shell`: the subshells between a session command's marked processes and its
shell, by parent links alone (pure)."""

from __future__ import annotations

from pathlib import Path

from sandbox._below_shell import between, ns_pid

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
