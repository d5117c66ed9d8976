"""`make demo` installs only what the demo needs; `make test` the rest (issue 30: the demo
used to install all 146 packages, Inspect and LangChain included)."""

from __future__ import annotations

import re
import subprocess

from tests.unit._docs import ROOT


def _dry_run(target: str) -> str:
    """The commands `make -n TARGET` would run, as if nothing were installed yet."""
    return subprocess.run(["make", "-n", "-B", target, "VENV=/nonexistent-venv"], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=60).stdout


def test_demo_installs_the_core_dependencies_only() -> None:
    installs = [ln for ln in _dry_run("demo").splitlines() if "pip install" in ln]
    assert installs, "demo installs nothing?"
    assert not [ln for ln in installs if re.search(r"\.\[|extras|EXTRAS", ln)], installs
    assert any(ln.rstrip().endswith("-e .") for ln in installs), installs


def test_test_installs_every_extra_and_the_docs_toolchain() -> None:
    out = _dry_run("test")
    extras = re.search(r"pip install --quiet -e '\.\[([^\]]*)\]'", out)
    assert extras, out
    assert {"test", "dev", "kubernetes", "mcp", "inspect", "langchain", "pytest", "docs"} <= \
        set(extras[1].split(","))
    assert "docs-tools" in out or "chromium" in out


def test_demo_says_how_to_stop_the_engine() -> None:
    assert "make engine-stop" in _dry_run("demo")
