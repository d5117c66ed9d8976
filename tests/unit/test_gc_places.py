"""Where Kubernetes sandboxes record their namespaces for `sandbox.gc` (`sandbox._places`),
and what gc believes of those records: only this user's, only trusted kubeconfigs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sandbox._owner import Here
from sandbox._places import any_recorded, recorded, remember
from sandbox.kubernetes import _gc as kube_gc

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
    kube_gc.remember_place(kubeconfig=None, context="c", in_cluster=False, namespace="n")
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    kube_gc.remember_place(kubeconfig="~/k", context=None, in_cluster=False, namespace="n")
    kube_gc.remember_place(kubeconfig=None, context=None, in_cluster=True, namespace="n")
    got = sorted(str(p["kubeconfig"]) for p in recorded("kubernetes"))
    assert got == sorted([str(tmp_path / "first.yaml"), str(tmp_path / "home" / "k"), "None"])


def test_an_unwritable_record_directory_costs_gc_its_view_not_the_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("SANDBOX_PLACES", str(blocker / "places"))
    kube_gc.remember_place(kubeconfig="/k", context=None, in_cluster=False, namespace="n")
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

    assert run() == ["2", "False", "False"]
    remember("kubernetes", {"kubeconfig": "/k", "namespace": "n"})
    assert run() == ["3", "True", "True"]


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
    kube_gc.remember_place(kubeconfig=str(config), context=None, in_cluster=False,
                           namespace="n")
    config.chmod(0o666)
    assert await _collect() == (0, 0)
    assert not marker.exists()
    config.chmod(0o600)
    assert await _collect() == (0, 0)  # the server does not answer: skipped with a warning
    assert marker.exists()
    assert "cannot look in Kubernetes namespace 'n'" in caplog.text


@pytest.mark.asyncio
async def test_a_place_whose_kubeconfig_is_gone_is_forgotten(places: Path) -> None:
    kube_gc.remember_place(kubeconfig=str(places.parent / "gone"), context=None,
                           in_cluster=False, namespace="n")
    assert any_recorded("kubernetes")
    assert await _collect() == (0, 0)
    assert not any_recorded("kubernetes")
