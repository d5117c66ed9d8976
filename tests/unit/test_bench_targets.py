"""bench/targets.py reads a run's rows into met / missed / absent, per issue 29's targets."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

_PATH = Path(__file__).resolve().parents[2] / "bench" / "targets.py"


@pytest.fixture(scope="module")
def targets() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_targets", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_targets"] = module
    spec.loader.exec_module(module)
    return module


def row(scenario: str, impl: str, value: float, p95: float = 0.0,
        unit: str = "ms") -> dict[str, object]:
    return {"scenario": scenario, "impl": impl, "value": value, "p95": p95, "unit": unit}


def test_a_ratio_target_is_met_only_at_or_under_its_bound(targets: ModuleType) -> None:
    check = targets.ratio("create to ready", 1.1)
    assert check([row("create to ready", "sandbox SDK", 110),
                  row("create to ready", "aiodocker", 100)]).met is True
    assert check([row("create to ready", "sandbox SDK", 111),
                  row("create to ready", "aiodocker", 100)]).met is False


def test_cpu_delta_and_peer_and_p95_targets(targets: ModuleType) -> None:
    cpu = targets.delta("exec `true` client CPU", 0.3)
    assert cpu([row("exec `true` client CPU", "sandbox SDK", 1.2),
                row("exec `true` client CPU", "aiodocker", 1.0)]).met is True
    assert cpu([row("exec `true` client CPU", "sandbox SDK", 1.4),
                row("exec `true` client CPU", "aiodocker", 1.0)]).met is False
    peer = targets.ahead_of("first", "llm-sandbox.*")
    assert peer([row("first", "sandbox SDK", 90), row("first", "llm-sandbox 0.3", 100)]).met
    assert not peer([row("first", "sandbox SDK", 100),
                     row("first", "llm-sandbox 0.3", 100)]).met
    tail = targets.below("pool warm acquire", r".*\(docker pool\)", 3, field="p95")
    assert tail([row("pool warm acquire", "sandbox SDK (docker pool)", 0.5, p95=2.9)]).met
    assert not tail([row("pool warm acquire", "sandbox SDK (docker pool)", 0.5, p95=3.1)]).met


def test_a_run_without_the_rows_claims_nothing(targets: ModuleType) -> None:
    for _, check in targets.TARGETS:
        if check.__qualname__.startswith("_backend"):
            continue  # reads bench/results/backends.json, which a checkout may hold
        assert check([]).met is None
