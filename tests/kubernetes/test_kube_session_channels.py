"""The leftover-child attack (``tests/integration/_session_attack``) on a Kubernetes session,
on the local cluster (a real kubelet and containerd; the fake API server runs no processes).

Found this round: on a v4-only server (the local 1.20) the session's shell took its input
through the exec wrapper's stdin decoder (``sh`` + ``dd``, dumpable processes of the sandbox
user), so any process of that user read every later command as it was sent, nonces and
success token included (the canary below). The shell now reads the exec's stdin itself
(`ProcessSpec.sealed`: it never needs an end of input). Still open: the exec's output pipes
are the sandbox user's, as on Docker's attach stream, so a leftover child's stdout and stderr
are reopened and later output and end markers can be taken (strict xfail below).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox import Sandbox
from tests.integration._session_attack import attack
from tests.kubernetes._cluster import LOCAL_PYTHON_IMAGE, cluster

pytestmark = pytest.mark.asyncio


async def _attack(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, object]:
    async with cluster(tmp_path, request.config) as kube:
        if not kube.local:
            pytest.skip("needs the local cluster (python3 in the Pod, real processes)")
        backend = kube.backend(kube.config(image=LOCAL_PYTHON_IMAGE))
        async with Sandbox(backend=backend) as sb:
            return await attack(sb)


async def test_no_later_command_is_read_and_no_status_forged(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """No process reads the next command's text (before: the canary, with the nonces and the
    success token, read off the decoder's pipes); failing commands stay failures; the traced
    child cannot read its channels."""
    out = await _attack(tmp_path, request)
    assert not out["canary_read"], out
    assert not out["shell_stdin_read"], out["shell_thief"]
    assert out["canary_status"] == 1 and out["after_trace_status"] == 1, out
    assert out["later"]["exit_code"] != 0, out  # type: ignore[index]
    code, said, err = out["tracer"]  # type: ignore[misc]
    assert code == 0, err
    assert json.loads(said)["read1"] == -9, said  # write-only
    assert out["alive"] == "alive\n", out


@pytest.mark.xfail(strict=True, reason="open gap: a Kubernetes exec's output pipes are the "
                   "sandbox user's (containerd), which that user reopens through a leftover "
                   "child, as on Docker's attach stream; no FIFO transport on Kubernetes yet")
async def test_a_leftover_childs_channels_give_no_later_output_away(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    out = await _attack(tmp_path, request)
    assert "opened" not in out["early"], out["early"]
    assert not out["secret_stolen"], out["thief"]
