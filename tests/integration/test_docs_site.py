"""The documentation site builds with --strict, its search finds things, a browser renders it,
and the code blocks marked ``run`` run.

Screenshots of the front page and the API page go to the suite's artefacts directory
(``SANDBOX_TEST_ARTEFACTS``, default ``test-artefacts/`` in the checkout) for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit._docs import ROOT, Block, blocks

ARTEFACTS = Path(os.environ.get("SANDBOX_TEST_ARTEFACTS") or ROOT / "test-artefacts") / "docs"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-4000:]
    yield out


def test_every_page_in_the_nav_is_built(site: Path) -> None:
    for page in ("index", "getting-started", "security", "performance", "backends",
                 "kubernetes", "engine-notes", "reference/api", "guides/egress",
                 "guides/testing", "reference/changelog"):
        assert (site / f"{page}.html").is_file(), page


def test_the_api_reference_is_generated_from_the_docstrings(site: Path) -> None:
    api = (site / "reference" / "api.html").read_text()
    for name in ("SandboxConfig", "SecurityPolicy", "SandboxPool", "FakeSandbox",
                 "DockerBackend", "KubernetesBackend", "SandboxInitFailed"):
        assert re.search(rf'id="sandbox(\.\w+)*\.{name}"', api), name
    # The docstring the issue found stale, as it reads now.
    assert "egress proxy" in api


def test_the_performance_chart_is_drawn_from_its_table(site: Path) -> None:
    page = (site / "performance.html").read_text()
    assert page.count('<div class="chart"><svg') >= 1
    assert "<title>Ratio to raw aiodocker" in page


def _search(site: Path, term: str) -> list[str]:
    index = json.loads((site / "search" / "search_index.json").read_text())
    return [doc["location"] for doc in index["docs"] if term.lower() in doc["text"].lower()
            or term.lower() in doc["title"].lower()]


def test_search_finds_a_term_where_it_is_explained(site: Path) -> None:
    assert any(loc.startswith("guides/egress.html") for loc in _search(site, "allowed_hosts"))
    assert any(loc.startswith("reference/api.html") for loc in _search(site, "SandboxPool"))
    assert any(loc.startswith("security.html") for loc in _search(site, "fork bomb"))
    assert _search(site, "no-such-term-in-these-docs") == []


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", path
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.mark.parametrize("page", ["index", "reference/api"])
def test_a_browser_renders_the_page(site: Path, page: str, tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: `make docs-tools` (make test) installs it"
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTEFACTS / f"{page.replace('/', '-')}.png"
    shot.unlink(missing_ok=True)
    url = (site / f"{page}.html").as_uri()
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
              f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,1000"]
    proc = subprocess.run([*common, f"--screenshot={shot}", url], capture_output=True,
                          text=True, timeout=180, check=False)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    assert _png_size(shot) == (1280, 1000)
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True,
                         timeout=180, check=True).stdout
    assert "md-search__input" in dom  # the search box is on the page
    assert ("Fifteen lines" in dom) if page == "index" else ("SandboxConfig" in dom)


def _runnable() -> list[Block]:
    seen: dict[str, Block] = {}
    for block in blocks():
        if block.mark == "run":
            seen.setdefault(block.code, block)
    return list(seen.values())


@pytest.mark.usefixtures("engine")
@pytest.mark.parametrize("block", _runnable(), ids=lambda b: b.where)
def test_a_block_marked_run_runs(block: Block, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(block.code)
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(script)], cwd=tmp_path, capture_output=True,
        text=True, timeout=240, check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
    assert proc.returncode == 0, f"{block.where}\n{proc.stdout}\n{proc.stderr}"
