"""A kubeconfig that is missing, empty or no kubeconfig at all: `Cluster.connect` names the file,
says what is wrong with it and what to do, in the error it raises for any bad kubeconfig.

kubernetes_asyncio's own loader raised "No configuration found" for a missing file; the SDK,
reading the file itself (to run exec plugins its own way), got a ``config`` of None and a bare
``argument of type 'NoneType' is not iterable``; an empty file gave ``'NoneType' object does not
support item assignment``, and invalid YAML escaped as the parser's own error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import EngineUnavailable
from sandbox.kubernetes._gateway import Cluster

pytestmark = pytest.mark.asyncio


async def refusal(kubeconfig: str | None) -> EngineUnavailable:
    with pytest.raises(EngineUnavailable) as caught:
        cluster = await Cluster.connect(kubeconfig=kubeconfig, context=None, in_cluster=False)
        await cluster.close()
    assert caught.value.retryable is False  # fixing the file is for the user
    return caught.value


async def test_a_missing_kubeconfig_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "kubeconfig"
    err = await refusal(str(path))
    assert str(path) in err.message
    assert f"no such file: {path}" in err.details
    assert "KUBECONFIG" in err.details and "in_cluster=True" in err.details


async def test_the_default_kubeconfig_missing_is_named_expanded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    err = await refusal(None)
    assert "~/.kube/config" in err.message
    assert f"no such file: {tmp_path}/.kube/config" in err.details


@pytest.mark.parametrize(("text", "said"), [
    ("", "is empty, so it is no kubeconfig"),
    ("# a comment only\n\n", "is empty, so it is no kubeconfig"),
    ("- clusters\n- users\n", "holds a YAML list, not a mapping"),
    ("just words\n", "holds a YAML str, not a mapping"),
    ("clusters: [\n", "is not valid YAML"),
])
async def test_a_file_that_holds_no_kubeconfig_is_named_with_what_is_wrong(
        tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    err = await refusal(str(path))
    assert str(path) in err.message
    assert f"{path} {said}" in err.details, err.details
    if "YAML" not in said or "mapping" in said:
        assert "KUBECONFIG" in err.details  # what to do


async def test_a_kubeconfig_without_a_context_is_still_refused_as_before(
        tmp_path: Path) -> None:
    """The check adds to kubernetes_asyncio's own (a mapping it cannot use is its to name)."""
    path = tmp_path / "kubeconfig"
    path.write_text("apiVersion: v1\nkind: Config\n")
    err = await refusal(str(path))
    assert "current-context" in err.details
