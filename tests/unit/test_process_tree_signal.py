"""The order a non-KILL signal reaches a command's processes (`sandbox.process._tree`)."""

from __future__ import annotations

import signal

import pytest

from sandbox.process import _tree


def test_the_command_gets_a_signal_before_its_children(monkeypatch: pytest.MonkeyPatch) -> None:
    """Signalled after its child, a shell in ``wait`` could see the child end and exit by
    itself (status 143, no signal) before its own signal came: the root goes first. The pids
    are picked so a set iterates the child first."""
    root, child, grandchild = 1006, 1001, 1013
    assert next(iter({root, child, grandchild})) != root
    monkeypatch.setattr(_tree, "members", lambda *_a, **_k: {root, child, grandchild})
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(_tree.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    assert _tree.sweep(root, "m", "ns", signal.SIGTERM)
    assert sent == [(root, signal.SIGTERM), (child, signal.SIGTERM),
                    (grandchild, signal.SIGTERM)]


def test_a_sessions_subshell_of_builtins_is_a_member(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subshell of builtins alone shows no marker anywhere below it: with the session's
    shell (pid 5 in the sandbox) and the tick its command was sent (60), the shell's children
    started since are members with all below them; an earlier job is not."""
    # 900 bwrap (outside), 901 the sandbox's init, 902 the shell, 903 an earlier job, 904 the
    # command's subshell and 905 below it, 906 a process of another namespace, child of 902.
    parents = {900: 1, 901: 900, 902: 901, 903: 902, 904: 902, 905: 904, 906: 902}
    starts = {900: 1, 901: 2, 902: 3, 903: 50, 904: 61, 905: 62, 906: 63}
    inner = {901: 1, 902: 5, 903: 6, 904: 7, 905: 8, 906: 2}
    monkeypatch.setattr(_tree, "_table", lambda: (parents, starts))
    monkeypatch.setattr(_tree, "_pid_ns", lambda pid: "host" if pid in (900, 906) else "ns")
    monkeypatch.setattr(_tree, "ns_pid", lambda pid: inner.get(pid, 0))
    monkeypatch.setattr(_tree, "read_environ", lambda pid: b"PATH=/bin\0")
    entry = "SANDBOX_COMMAND=abc"
    assert _tree.members(set(), "", "ns", entry=entry, shell=5, since=60) == {904, 905}
    assert _tree.members(set(), "", "ns", entry=entry, shell=5) == set()
    assert _tree.members(set(), "", "ns", entry=entry, shell=1, since=60) == set()


def test_a_session_kill_spares_and_adopts_by_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Sent in tick 60: 903, started in that tick with the marker of a command that ended in
    it, is spared only when that marker is in ``spare``; 907, adopted by the sandbox's init
    (a double fork) with the shell's own environment, is a member; 908, adopted too but
    with another environment (a program an earlier job left), is not."""
    parents = {900: 1, 901: 900, 902: 901, 903: 902, 907: 901, 908: 901}
    starts = {900: 1, 901: 2, 902: 3, 903: 60, 907: 61, 908: 62}
    inner = {901: 1, 902: 5, 903: 6, 907: 7, 908: 8}
    shell_env = b"PATH=/bin\0SPAWN=1\0"
    envs = {902: shell_env, 903: b"PATH=/bin\0SANDBOX_COMMAND=old\0", 907: shell_env,
            908: b"PATH=/bin\0SANDBOX_COMMAND=older\0"}
    monkeypatch.setattr(_tree, "_table", lambda: (parents, starts))
    monkeypatch.setattr(_tree, "_pid_ns", lambda pid: "host" if pid == 900 else "ns")
    monkeypatch.setattr(_tree, "ns_pid", lambda pid: inner.get(pid, 0))
    monkeypatch.setattr(_tree, "read_environ", envs.get)
    entry = "SANDBOX_COMMAND=new"
    assert _tree.members(set(), "", "ns", entry=entry, shell=5, since=60,
                         spare=("SANDBOX_COMMAND=old",)) == {907}
    assert _tree.members(set(), "", "ns", entry=entry, shell=5, since=60) == {903, 907}
