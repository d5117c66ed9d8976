"""gc's owner verdicts, without an engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from sandbox import ConfigError, GcItem, GcReport, gc
from sandbox._constants import (
    LABEL_CREATED,
    LABEL_MANAGED_BY,
    LABEL_OWNER_BOOT_ID,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
    LABEL_OWNER_START,
)
from sandbox._owner import Here, owner_verdict, pid_start
from sandbox._owner import owner_labels as _owner_labels

HERE = Here.current()
NOW = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)


def labels_of(pid: int, **changes: str) -> dict[str, str]:
    alive, ticks = pid_start(pid)
    assert alive
    labels = {
        LABEL_MANAGED_BY: "sandbox-sdk", LABEL_OWNER_HOST: HERE.host,
        LABEL_OWNER_PID: str(pid), LABEL_OWNER_START: ticks or "",
        LABEL_OWNER_BOOT_ID: HERE.boot_id,
        LABEL_CREATED: (NOW - timedelta(hours=3)).isoformat(timespec="seconds"),
    }
    labels.update(changes)
    return labels


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_labels_of_this_process_mean_alive() -> None:
    remove, reason = owner_verdict(_owner_labels(), here=HERE)
    assert not remove and "alive" in reason and "this process" in reason


def test_exited_owner_is_gone() -> None:
    pid = dead_pid()
    labels = labels_of(os.getpid(), **{LABEL_OWNER_PID: str(pid)})
    remove, reason = owner_verdict(labels, here=HERE)
    assert remove and f"pid {pid}" in reason and "exited" in reason


def test_reused_pid_with_other_start_ticks_is_gone() -> None:
    labels = labels_of(os.getpid(), **{LABEL_OWNER_START: "1"})
    remove, reason = owner_verdict(labels, here=HERE)
    assert remove and "newer process" in reason


def test_zombie_owner_is_gone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        # Not reaped yet: the pid exists as a zombie.
        for _ in range(200):
            state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state == "Z":
                break
            os.sched_yield()
            import time

            time.sleep(0.01)
        labels = labels_of(os.getpid(), **{LABEL_OWNER_PID: str(proc.pid),
                                            LABEL_OWNER_START: ""})
        assert owner_verdict(labels, here=HERE)[0]
    finally:
        proc.wait()


def test_other_boot_means_gone_even_if_pid_is_alive() -> None:
    labels = labels_of(os.getpid(), **{LABEL_OWNER_BOOT_ID: "another-boot"})
    remove, reason = owner_verdict(labels, here=HERE)
    assert remove and "rebooted" in reason


def test_other_host_is_never_removed_whatever_its_age() -> None:
    labels = labels_of(os.getpid(), **{LABEL_OWNER_HOST: "elsewhere",
                                        LABEL_OWNER_PID: str(dead_pid())})
    remove, reason = owner_verdict(labels, here=HERE, now=NOW)
    assert not remove and "another host" in reason and "cannot be proven" in reason
    remove, reason = owner_verdict(labels, here=HERE, now=NOW, older_than=timedelta(0))
    assert not remove


def test_live_owner_never_removed_whatever_older_than() -> None:
    labels = labels_of(os.getpid())
    remove, _ = owner_verdict(labels, here=HERE, now=NOW, older_than=timedelta(0))
    assert not remove


def test_missing_owner_labels_never_removed() -> None:
    labels = {LABEL_MANAGED_BY: "sandbox-sdk"}
    assert owner_verdict(labels, here=HERE)[0] is False
    created = NOW - timedelta(days=3)
    remove, reason = owner_verdict(labels, here=HERE, created=created, now=NOW,
                                   older_than=timedelta(days=1))
    assert not remove and "no owner labels" in reason


def test_older_than_is_an_age_floor_for_dead_owners() -> None:
    labels = labels_of(os.getpid(), **{LABEL_OWNER_PID: str(dead_pid())})
    assert owner_verdict(labels, here=HERE, now=NOW)[0]  # 3h old, no floor
    remove, reason = owner_verdict(labels, here=HERE, now=NOW, older_than=timedelta(hours=4))
    assert not remove and "younger than 4h" in reason
    remove, reason = owner_verdict(labels, here=HERE, now=NOW, older_than=timedelta(hours=2))
    assert remove and "3h old" in reason and "exited" in reason
    no_date = {k: v for k, v in labels.items() if k != LABEL_CREATED}
    remove, reason = owner_verdict(no_date, here=HERE, now=NOW, older_than=timedelta(hours=2))
    assert not remove and "age is unknown" in reason


def test_report_groups() -> None:
    c = GcItem(kind="container", id="c1", name="a", reason="r")
    n = GcItem(kind="network", id="n1", name="b", reason="r")
    report = GcReport(removed=(c,), kept=(n,))
    assert report.removed_containers == (c,) and report.kept_networks == (n,)
    assert report.removed_networks == () and report.kept_of("network") == (n,)


@pytest.mark.asyncio
@pytest.mark.parametrize("field", ["older_than", "checkpoints_older_than"])
async def test_gc_refuses_a_negative_age_naming_it(field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field} must be >= 0"):
        await gc(**{field: timedelta(seconds=-1)})  # type: ignore[arg-type]


def test_a_forked_child_labels_its_resources_as_its_own() -> None:
    """The owner's start time is kept per pid: a child forked after the parent's first
    labels names itself, so gc never takes the parent's resources for a dead child's."""
    parent = _owner_labels()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its labels and its own start time, to the parent; then out
        _, own = pid_start(os.getpid())
        os.write(write, json.dumps([_owner_labels(), own]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child, started = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert child[LABEL_OWNER_PID] == str(pid) != parent[LABEL_OWNER_PID]
    assert child[LABEL_OWNER_START] == started != parent[LABEL_OWNER_START]
    assert _owner_labels()[LABEL_OWNER_START] == parent[LABEL_OWNER_START]
