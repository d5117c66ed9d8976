"""Where Kubernetes sandboxes record their namespaces for `sandbox.gc` (`sandbox._places`),
and what gc believes of those records: only this user's, only trusted kubeconfigs."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sandbox import _places as places_mod
from sandbox._constants import (
    LABEL_MANAGED_BY,
    LABEL_MANAGED_BY_VALUE,
    LABEL_OWNER_HOST,
    LABEL_OWNER_PID,
)
from sandbox._owner import Here, owner_pid, owner_verdict
from sandbox._places import any_recorded, hold, recorded, release, remember, retire
from sandbox._registry import place_listers
from sandbox.docker import _ps as docker_ps
from sandbox.kubernetes import _gc as kube_gc
from sandbox.kubernetes import _ps as kube_ps

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "places"
    monkeypatch.setenv("SANDBOX_PLACES", str(where))
    return where


def test_a_place_is_recorded_once_and_read_back(places: Path) -> None:
    assert recorded("kubernetes") == [] and not any_recorded("kubernetes")
    spot = {"kubeconfig": "/k", "context": None, "in_cluster": False, "namespace": "a"}
    remember("kubernetes", spot)
    remember("kubernetes", spot)
    remember("kubernetes", {**spot, "namespace": "b"})
    assert len(os.listdir(places)) == 2
    assert sorted(p["namespace"] for p in recorded("kubernetes")) == ["a", "b"]
    assert any_recorded("kubernetes") and not any_recorded("other")
    assert os.stat(places).st_mode & 0o777 == 0o700


def test_the_backend_records_the_kubeconfig_it_will_read(
        places: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"first.yaml{os.pathsep}/second")
    tokens = [kube_gc.hold_place(kubeconfig=None, context="c", in_cluster=False,
                                 namespace="n")]
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tokens += [kube_gc.hold_place(kubeconfig="~/k", context=None, in_cluster=False,
                                  namespace="n"),
               kube_gc.hold_place(kubeconfig=None, context=None, in_cluster=True,
                                  namespace="n")]
    for token in tokens:
        assert token is not None
        release(token)
    got = sorted(str(p["kubeconfig"]) for p in recorded("kubernetes"))
    assert got == sorted([str(tmp_path / "first.yaml"), str(tmp_path / "home" / "k"), "None"])


def test_an_unwritable_record_directory_costs_gc_its_view_not_the_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SANDBOX_PLACES", str(blocker / "places"))
    assert kube_gc.hold_place(kubeconfig="/k", context=None, in_cluster=False,
                              namespace="n") is None
    assert "cannot record namespace 'n'" in caplog.text


@pytest.mark.parametrize("how", ["directory others can write", "file of another user",
                                 "record that is a symbolic link"])
def test_records_someone_else_could_have_written_are_ignored(
        places: Path, tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture) -> None:
    remember("kubernetes", {"kubeconfig": "/k", "namespace": "n"})
    (record,) = places.iterdir()
    if how.startswith("directory"):
        places.chmod(0o777)
    elif how.startswith("file"):
        if os.getuid() != 0:
            pytest.skip("needs root to give a file away")
        os.chown(record, 65534, 65534)
    else:
        target = tmp_path / "elsewhere.json"
        record.rename(target)
        record.symlink_to(target)
    assert recorded("kubernetes") == []
    assert "ignoring the place" in caplog.text


def test_gc_without_a_recorded_place_never_loads_the_kubernetes_backend(
        places: Path) -> None:
    probe = ("import sys; from sandbox._registry import gc_collectors; n = len(gc_collectors());"
             " print(n, 'sandbox.kubernetes' in sys.modules, 'kubernetes_asyncio' in sys.modules)")

    def run() -> str:
        return subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.split()

    assert run() == ["3", "False", "False"]
    remember("kubernetes", {"kubeconfig": "/k", "namespace": "n"})
    assert run() == ["4", "True", "True"]


def _exec_kubeconfig(path: Path, marker: Path) -> None:
    """A kubeconfig whose credentials come from a program: it touches ``marker``."""
    cred = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                       "kind": "ExecCredential", "status": {"token": "t"}})
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/bin/sh",
            "args": ["-c", f"touch {marker}; echo '{cred}'"]}}}]}))


async def _collect() -> tuple[int, int]:
    found = await kube_gc.COLLECTOR(dry_run=True, older_than=None, checkpoints_older_than=None,
                                    here=Here.current(), now=datetime.now(UTC), docker=None)
    return len(found.removed), len(found.kept)


@pytest.mark.asyncio
async def test_a_recorded_kubeconfig_others_can_write_is_never_loaded(
        places: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The attacker rewrites a recorded kubeconfig (its directory let them) so that loading it
    runs their program as gc's user: gc refuses the file; the same file of the user's own is
    loaded (its program runs), so the refusal is what stops it."""
    config, marker = tmp_path / "kubeconfig", tmp_path / "ran"
    _exec_kubeconfig(config, marker)
    remember("kubernetes", kube_gc.place(kubeconfig=str(config), context=None,
                                         in_cluster=False, namespace="n"))
    config.chmod(0o666)
    assert await _collect() == (0, 0)
    assert not marker.exists()
    config.chmod(0o600)
    assert await _collect() == (0, 0)  # the server does not answer: skipped with a warning
    assert marker.exists()
    assert "cannot look in Kubernetes namespace 'n'" in caplog.text


@pytest.mark.asyncio
async def test_a_place_whose_kubeconfig_is_gone_is_forgotten(places: Path) -> None:
    token = kube_gc.hold_place(kubeconfig=str(places.parent / "gone"), context=None,
                               in_cluster=False, namespace="n")
    assert token is not None and any_recorded("kubernetes")
    assert await _collect() == (0, 0)
    assert any_recorded("kubernetes")  # not while a sandbox of this host holds it
    release(token)
    assert await _collect() == (0, 0)
    assert not any_recorded("kubernetes")


# -- a record is dropped when nothing is left there, never while a sandbox here holds it ------

SPOT = {"kubeconfig": "/k", "context": None, "in_cluster": False, "namespace": "n"}


async def _empty() -> bool:
    return True


async def _not_empty() -> bool:
    return False


@pytest.mark.asyncio
async def test_a_held_record_is_kept_and_a_released_one_is_dropped(places: Path) -> None:
    first, second = hold("kubernetes", SPOT), hold("kubernetes", SPOT)
    assert any_recorded("kubernetes")
    assert not await retire("kubernetes", SPOT, _empty)
    release(first)
    assert not await retire("kubernetes", SPOT, _empty)  # one sandbox is still there
    assert any_recorded("kubernetes")
    release(second)
    assert await retire("kubernetes", SPOT, _empty)
    assert not any_recorded("kubernetes")
    # The next sandbox there records it again.
    again = hold("kubernetes", SPOT)
    try:
        assert recorded("kubernetes") == [SPOT]
    finally:
        release(again)


HOLDER = """
import sys, time
from sandbox._places import hold
hold("kubernetes", {"kubeconfig": "/k", "context": None, "in_cluster": False, "namespace": "n"})
print("held", flush=True)
time.sleep(600)
"""


def test_a_record_another_live_process_holds_is_kept_until_it_dies(places: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        assert not asyncio.run(retire("kubernetes", SPOT, _empty))
        assert any_recorded("kubernetes")
    finally:
        proc.kill()  # SIGKILL: the kernel lets go of its lock
        proc.communicate()
    assert asyncio.run(retire("kubernetes", SPOT, _empty))
    assert not any_recorded("kubernetes")


@pytest.mark.asyncio
async def test_a_retired_record_comes_back_when_the_second_look_is_not_empty(
        places: Path) -> None:
    remember("kubernetes", SPOT)
    assert not await retire("kubernetes", SPOT, _not_empty)
    assert recorded("kubernetes") == [SPOT]

    async def broken() -> bool:
        raise RuntimeError("the cluster did not answer")

    with pytest.raises(RuntimeError):
        await retire("kubernetes", SPOT, broken)
    assert recorded("kubernetes") == [SPOT]


@pytest.mark.asyncio
async def test_a_hold_taken_while_a_retire_drops_the_record_writes_a_new_one(
        places: Path) -> None:
    """The owner opened the record, then gc retired it before the owner's lock: the owner
    must not hold a deleted file (gc would never see it held) but write the record anew."""
    real_flock = places_mod.fcntl.flock
    retired: list[bool] = []

    def flock(fd: int, how: int) -> None:
        if how & places_mod.fcntl.LOCK_SH and not retired:
            retired.append(True)
            (places / os.listdir(places)[0]).unlink()  # what retire does, just then
        real_flock(fd, how)

    remember("kubernetes", SPOT)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(places_mod.fcntl, "flock", flock)
        token = hold("kubernetes", SPOT)
    try:
        assert retired and recorded("kubernetes") == [SPOT]
        assert not await retire("kubernetes", SPOT, _empty)  # and that one is held
    finally:
        release(token)


# -- `sandbox ps` on Kubernetes: the recorded places, believed by gc's rules ------------------

PS_PROBE = ("import sys; from sandbox._cli import main; code = main(['ps', '--json']);"
            " print(code, 'sandbox.kubernetes' in sys.modules,"
            " 'kubernetes_asyncio' in sys.modules, file=sys.stderr)")


def test_ps_without_a_recorded_place_never_loads_the_kubernetes_backend(
        places: Path) -> None:
    def run() -> list[str]:
        done = subprocess.run([sys.executable, "-c", PS_PROBE], cwd=ROOT, capture_output=True,
                              text=True, check=True)
        return done.stderr.split()[-3:]

    assert run() == ["0", "False", "False"]
    remember("kubernetes", {"kubeconfig": str(places.parent / "gone"), "namespace": "n"})
    assert run() == ["0", "True", "True"]


@pytest.mark.asyncio
async def test_ps_never_loads_a_recorded_kubeconfig_others_can_write(
        places: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config, marker = tmp_path / "kubeconfig", tmp_path / "ran"
    _exec_kubeconfig(config, marker)
    remember("kubernetes", kube_gc.place(kubeconfig=str(config), context=None,
                                         in_cluster=False, namespace="n"))
    config.chmod(0o666)
    (lister,) = place_listers()
    assert await lister(owner=None, here=Here.current(), now=datetime.now(UTC)) == []
    assert not marker.exists()
    config.chmod(0o600)
    assert await lister(owner=None, here=Here.current(), now=datetime.now(UTC)) == []
    assert marker.exists()  # the same file of the user's own is loaded: the refusal stopped it
    assert "ps: cannot look in Kubernetes namespace 'n'" in caplog.text
    assert any_recorded("kubernetes")  # listing changes nothing


# -- a record a process holds stays the one its path names (review round 7) -----------------


def _replace_record(places: Path) -> None:
    (record,) = places.iterdir()
    copy = places / "copy"
    copy.write_bytes(record.read_bytes())
    os.replace(copy, record)


@pytest.mark.asyncio
async def test_a_record_replaced_under_a_hold_is_locked_anew_by_the_next_hold(
        places: Path) -> None:
    """Another writer (an older SDK renamed its copy over) replaced the record this process
    holds; gc then dropped the new, unheld one. The next hold here must see that the path no
    longer names the file it holds, and record and hold the place again."""
    first = hold("kubernetes", SPOT)
    try:
        _replace_record(places)  # what `remember` did before: a rename over the held file
        assert await retire("kubernetes", SPOT, _empty)  # the replacement is held by no one
        assert not any_recorded("kubernetes")
        second = hold("kubernetes", SPOT)
        try:
            assert recorded("kubernetes") == [SPOT]
            assert not await retire("kubernetes", SPOT, _empty)  # held
        finally:
            release(second)
    finally:
        release(first)


@pytest.mark.asyncio
async def test_a_write_back_racing_a_first_hold_never_replaces_the_held_record(
        places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gc dropped the record and, its second look finding something, writes it back; just
    then (between its check and its write) a sandbox here takes its first hold, creating and
    locking the record. gc's write-back must not replace the file that sandbox holds."""
    real_write = os.write
    holds: list[str] = []
    played: list[bool] = []

    def write(fd: int, data: bytes) -> int:
        if not played and data.startswith(b'{"backend"'):
            played.append(True)
            holds.append(hold("kubernetes", SPOT))  # the overlapping first hold
        return real_write(fd, data)

    async def found_something() -> bool:
        monkeypatch.setattr(places_mod.os, "write", write)
        return False

    remember("kubernetes", SPOT)
    assert not await retire("kubernetes", SPOT, found_something)
    monkeypatch.setattr(places_mod.os, "write", real_write)
    assert holds, "the race was not played"
    try:
        assert recorded("kubernetes") == [SPOT]
        assert not await retire("kubernetes", SPOT, _empty)  # still the file held
    finally:
        release(holds[0])


# -- hold never hangs on what another user could put in its place ---------------------------


def _hold_bounded(seconds: float = 20.0) -> tuple[bool, str | None]:
    """`hold_place` in a thread: (whether it returned within ``seconds``, its token)."""
    import threading
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(kube_gc.hold_place(
        kubeconfig="/k", context=None, in_cluster=False, namespace="n")), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive(), (got[0] if got else None)


def _record_path() -> Path:
    return places_mod.places_dir() / places_mod._record_name(
        "kubernetes", kube_gc.place(kubeconfig="/k", context=None, in_cluster=False,
                                    namespace="n"))


def test_a_fifo_at_the_record_path_does_not_hang_hold(
        places: Path, caplog: pytest.LogCaptureFixture) -> None:
    places.mkdir(mode=0o700)
    fifo = _record_path()
    os.mkfifo(fifo)
    try:
        returned, token = _hold_bounded()
        assert returned and token is None
        assert "cannot record namespace 'n'" in caplog.text
        assert "not a regular file" in caplog.text
    finally:
        # Unblock a hold stuck opening the FIFO (without the fix), then remove it.
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        fifo.unlink()


def test_a_record_held_exclusively_by_another_does_not_hang_hold(
        places: Path, caplog: pytest.LogCaptureFixture) -> None:
    remember("kubernetes", kube_gc.place(kubeconfig="/k", context=None, in_cluster=False,
                                         namespace="n"))
    blocker = os.open(_record_path(), os.O_RDONLY)
    try:
        fcntl.flock(blocker, fcntl.LOCK_EX)  # another open file: conflicts with `hold`'s
        returned, token = _hold_bounded()
        assert returned and token is None
        assert "stays locked by another process" in caplog.text
    finally:
        os.close(blocker)


@pytest.mark.parametrize("how", ["mode 0755", "symbolic link", "another user's"])
def test_a_tmp_fallback_directory_not_ours_alone_is_not_written_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        how: str) -> None:
    """The fallback in the shared /tmp could have been made first by another user: used only
    when it is a directory of this user's, mode 0700."""
    fallback = tmp_path / "sandbox-sdk-places"
    monkeypatch.setattr(places_mod, "_fallback_dir", lambda: fallback)
    monkeypatch.setenv("SANDBOX_PLACES", str(fallback))
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    if how == "mode 0755":
        fallback.mkdir(mode=0o755)
        fallback.chmod(0o755)
    elif how == "symbolic link":
        fallback.symlink_to(real)
    else:
        if os.getuid() != 0:
            pytest.skip("needs root to give a directory away")
        fallback.mkdir(mode=0o700)
        os.chown(fallback, 65534, 65534)
    assert kube_gc.hold_place(kubeconfig="/k", context=None, in_cluster=False,
                              namespace="n") is None
    assert "cannot record namespace 'n'" in caplog.text
    assert not list(real.iterdir()) and (fallback.is_symlink() or not list(fallback.iterdir()))


def test_a_tmp_fallback_directory_of_ours_alone_is_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fallback = tmp_path / "sandbox-sdk-places"
    monkeypatch.setattr(places_mod, "_fallback_dir", lambda: fallback)
    monkeypatch.setenv("SANDBOX_PLACES", str(fallback))
    token = kube_gc.hold_place(kubeconfig="/k", context=None, in_cluster=False, namespace="n")
    assert token is not None
    release(token)
    assert os.lstat(fallback).st_mode & 0o777 == 0o700 and any_recorded("kubernetes")


# -- owner pids from labels and annotations: anyone able to label a Pod writes them ---------


@pytest.mark.parametrize("pid", ["\u00b2", "1" * 5000, "\u0661\u0662", "12345678901", "-1"])
def test_an_owner_pid_that_is_no_pid_is_unknown_not_a_crash(pid: str) -> None:
    here = Here.current()
    notes = {LABEL_OWNER_HOST: here.host, LABEL_OWNER_PID: pid}
    assert owner_pid(pid) is None
    gone, reason = owner_verdict(notes, here=here)
    assert not gone and "no owner labels" in reason
    pod = {"metadata": {"uid": "u", "name": "p", "annotations": notes,
                        "labels": {LABEL_MANAGED_BY: LABEL_MANAGED_BY_VALUE}}}
    row = kube_ps.row_of(pod, place={"namespace": "n"}, here=here, now=datetime.now(UTC))
    assert row.owner_pid is None and row.owner == "unknown"
    container = {"Id": "c", "Labels": notes, "Created": 0, "Names": ["/x"]}
    row = docker_ps.row_of(container, here=here, now=datetime.now(UTC))
    assert row.owner_pid is None and row.owner == "unknown"


def test_an_owner_pid_of_ascii_digits_is_read() -> None:
    assert owner_pid(str(os.getpid())) == os.getpid()
    assert owner_pid("4294967295") == 4294967295


# -- ps: each place bounded, all places at once ----------------------------------------------


def _blocking_kubeconfig(path: Path, fifo: Path, *, reader: bool) -> None:
    """A kubeconfig whose credential plugin blocks on ``fifo``: as its reader (until a
    writer opens it) or as its writer (until a reader does)."""
    cred = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1",
                       "kind": "ExecCredential", "status": {"token": "t"}})
    step = f"cat {fifo} >/dev/null" if reader else f"echo x > {fifo}"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "/bin/sh",
            "args": ["-c", f"{step}; echo '{cred}'"]}}}]}))
    path.chmod(0o600)


def _unblock(fifo: Path) -> None:
    """Let a plugin left blocked on ``fifo`` go (as reader or writer), so nothing lingers."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    with contextlib.suppress(OSError):
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        subprocess.run(["sleep", "0.2"], check=False)
        os.close(fd)


@pytest.mark.asyncio
async def test_ps_gives_up_on_a_place_whose_credential_plugin_never_answers(
        places: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    fifo, config = tmp_path / "fifo", tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    _blocking_kubeconfig(config, fifo, reader=True)  # no writer ever comes
    remember("kubernetes", kube_gc.place(kubeconfig=str(config), context=None,
                                         in_cluster=False, namespace="n"))
    monkeypatch.setattr(kube_gc, "PLACE_DEADLINE", 0.5)
    monkeypatch.setattr(kube_ps, "PLACE_DEADLINE", 0.5)
    (lister,) = place_listers()
    try:
        rows = await asyncio.wait_for(
            lister(owner=None, here=Here.current(), now=datetime.now(UTC)), 30)
        assert rows == []
        assert "ps: cannot look in Kubernetes namespace 'n'" in caplog.text
    finally:
        _unblock(fifo)


@pytest.mark.asyncio
async def test_ps_looks_in_every_place_at_once(
        places: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Two places whose plugins only finish together (one reads a FIFO the other writes):
    looked at one after the other, the first would wait out its deadline alone."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for name, reader in (("a", True), ("b", False)):
        config = tmp_path / f"kubeconfig-{name}"
        _blocking_kubeconfig(config, fifo, reader=reader)
        remember("kubernetes", kube_gc.place(kubeconfig=str(config), context=None,
                                             in_cluster=False, namespace=name))
    monkeypatch.setattr(kube_gc, "PLACE_DEADLINE", 10.0)
    monkeypatch.setattr(kube_ps, "PLACE_DEADLINE", 10.0)
    (lister,) = place_listers()
    try:
        assert await lister(owner=None, here=Here.current(), now=datetime.now(UTC)) == []
        for name in "ab":  # both loaded; both failed only at the list (nothing listens)
            assert f"ps: cannot look in Kubernetes namespace '{name}'" in caplog.text
        assert "took more than" not in caplog.text and "no answer within" not in caplog.text
    finally:
        _unblock(fifo)


def test_a_fifo_among_the_records_does_not_hang_gc_or_ps(places: Path) -> None:
    import threading
    remember("kubernetes", SPOT)
    fifo = places / "kubernetes-0000.json"
    os.mkfifo(fifo, 0o600)
    got: list[list[dict[str, object]]] = []
    thread = threading.Thread(target=lambda: got.append(recorded("kubernetes")), daemon=True)
    thread.start()
    thread.join(20)
    try:
        assert not thread.is_alive() and got == [[SPOT]]
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(5)
