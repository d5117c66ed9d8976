"""Optional backend capabilities: typed refusals naming the backend, and the README's table."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import CheckpointFailed, ConfigError, Sandbox, SandboxConfig
from sandbox._backend import CAPABILITIES, SupportsCheckpoints, supports
from sandbox._capabilities import END, START, render_table
from sandbox._registry import BACKENDS, backend_class
from sandbox._reset import check_reusable, record_baseline
from sandbox.testing import FakeBackend

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_backend_table_is_the_rendered_one() -> None:
    """``python -m sandbox._capabilities`` prints what belongs between the markers."""
    text = README.read_text()
    assert START in text and END in text
    block = text.split(START, 1)[1].split(END, 1)[0]
    assert block.strip() == render_table().strip()


def test_every_capability_of_every_backend_is_in_the_table() -> None:
    table = render_table()
    for cap in CAPABILITIES:
        assert cap.name in table
    assert all(f"`{kind}`" in table for kind in BACKENDS)
    assert supports(backend_class("docker"), SupportsCheckpoints)
    assert not supports(backend_class("process"), SupportsCheckpoints)


@pytest.mark.asyncio
@pytest.mark.parametrize("call", ["checkpoint", "fork"])
async def test_checkpoint_and_fork_without_the_capability_are_refused_naming_it(
        call: str) -> None:
    async with Sandbox(backend=FakeBackend()) as sb:
        with pytest.raises(CheckpointFailed, match=r"type='docker' \(FakeBackend\)"):
            if call == "checkpoint":
                await sb.checkpoint("x")
            else:
                await sb.fork(1)


@pytest.mark.asyncio
async def test_egress_stats_without_a_proxy_are_not_enforced() -> None:
    async with Sandbox(backend=FakeBackend()) as sb:
        assert sb.egress_stats().enforced is False


@pytest.mark.parametrize("kind", ["process", "kubernetes"])
def test_reuse_is_refused_up_front_where_the_backend_cannot_reset(kind: str) -> None:
    with pytest.raises(ConfigError, match=f"type='{kind}'"):
        check_reusable(SandboxConfig(type=kind))
    check_reusable(SandboxConfig(type="docker"))  # has both capabilities


@pytest.mark.asyncio
async def test_a_baseline_without_a_change_list_is_unverifiable_naming_the_backend() -> None:
    async with Sandbox(backend=FakeBackend()) as sb:
        baseline = await record_baseline(sb)
    assert "FakeBackend" in baseline.unverifiable
