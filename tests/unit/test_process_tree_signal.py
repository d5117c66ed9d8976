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
