"""`settle_by_commit`: which checkpoints' working dirs a create takes as settled (no look, no
hand-over), and that anything else is still looked at."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from sandbox.docker import _workdir
from sandbox.docker._netless import hosts_entry
from sandbox.docker._workdir import Handover, give_workdir_before_start, settle_by_commit

IMAGE = "sha256:" + "ab" * 32
MOUNTS = '[null, null]'


class Engine:
    """Records the engine calls; the look finds a missing directory (a hand-over due)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def request(self, action: str, path: str, method: str = "GET", **_: Any) -> bytes:
        self.calls.append((action, method))
        if method == "GET":
            raise _workdir.EngineNotFound("no such path", status=404)
        return b""


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_workdir, "_SETTLED", set())
    monkeypatch.setattr(_workdir, "_WORKDIR_ENTRIES", _workdir.SingleFlight(8))


def give(user: str = "1000:1000", cwd: str = "/workspace", image: str = IMAGE,
         mounts: str = MOUNTS) -> tuple[Handover, list[tuple[str, str]]]:
    engine = Engine()

    async def go() -> Handover:
        return await give_workdir_before_start(
            engine, "cid", cwd, user, image_id=image, mounts=mounts,  # type: ignore[arg-type]
            extra=[hosts_entry()])

    return anyio.run(go), engine.calls


def test_a_noted_checkpoint_alike_is_neither_looked_at_nor_handed_over() -> None:
    settle_by_commit(IMAGE, "1000:1000", "/workspace", MOUNTS)
    done, calls = give()
    assert calls == [] and done == Handover(dealt=True, wrote_extra=False)


@pytest.mark.parametrize("change", [
    {"user": "2000:2000"}, {"cwd": "/home/work"}, {"image": "sha256:" + "cd" * 32},
    {"mounts": '[true, null]'},
])
def test_anything_else_is_looked_at(change: dict[str, str]) -> None:
    settle_by_commit(IMAGE, "1000:1000", "/workspace", MOUNTS)
    done, calls = give(**change)
    assert [a for a, _ in calls] == ["look at the working directory",
                                     "give the working directory to the sandbox user"]
    assert done == Handover(dealt=True, wrote_extra=True)  # /etc/hosts rode in the PUT


@pytest.mark.parametrize(("image", "user", "cwd"), [
    ("", "1000:1000", "/workspace"), (IMAGE, "0:0", "/workspace"), (IMAGE, "1000:0", "/w"),
    (IMAGE, "sandbox", "/workspace"), (IMAGE, "1000", "/workspace"), (IMAGE, "1000:1000", "/"),
])
def test_only_a_numeric_non_root_user_and_a_real_directory_are_noted(
        image: str, user: str, cwd: str) -> None:
    settle_by_commit(image, user, cwd, MOUNTS)
    assert set() == _workdir._SETTLED


def test_the_notes_are_bounded() -> None:
    for n in range(_workdir._PROBES_KEPT + 5):
        settle_by_commit(f"sha256:{n:064x}", "1000:1000", "/workspace", MOUNTS)
    assert 0 < len(_workdir._SETTLED) <= _workdir._PROBES_KEPT
