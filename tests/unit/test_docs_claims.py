"""What the README and the docs claim stays what the code does.

The "what each backend refuses" table is rendered from the backends' own planners
(`scripts/refusals.py`), so a field that starts working (or stops) changes the table, and this
test fails until the docs' copy is regenerated. Claims that were once stale (``tools`` and
``mcp_servers`` "refused", ``allowed_hosts`` "not enforced") are checked against the same
planners. Every code block is marked and checked here without an engine: fragments compile and
name only what exists; shell blocks name only make targets and subcommands that exist (the
blocks marked ``run`` are executed by tests/integration/test_docs_site.py).
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys

import pytest

import sandbox
from sandbox import Sandbox, SandboxConfig, SandboxPool, SecurityPolicy, Session
from sandbox._cli import build_parser
from sandbox._limits import defaults_markdown
from tests.unit._docs import MARKS, PAGES, ROOT, blocks

sys.path.insert(0, str(ROOT / "scripts"))
from refusals import BACKENDS, PROBES, refusals_markdown, verdict

SECURITY = ROOT / "docs" / "security.md"


def _between(text: str, name: str) -> str:
    start = text.index(f"<!-- {name}:start -->\n") + len(f"<!-- {name}:start -->\n")
    return text[start:text.index(f"<!-- {name}:end -->")]


def test_the_docs_show_the_refusals_the_planners_make() -> None:
    assert _between(SECURITY.read_text(), "refusals-table") == refusals_markdown(), \
        "run: python scripts/refusals.py, and paste it into docs/security.md"


def test_the_docs_show_the_defaults_the_code_applies() -> None:
    assert _between(SECURITY.read_text(), "limits-table") == defaults_markdown(), \
        "run: python -m sandbox._limits"


def test_every_probe_tells_the_backends_apart() -> None:
    """A row every backend refuses, or none does, says nothing: the probe is wrong."""
    for probe in PROBES:
        answers = {verdict(b, probe.config) == "yes" for b in BACKENDS}
        assert answers == {True, False}, probe.label


def test_tools_and_mcp_servers_work_on_docker_and_are_refused_by_name_elsewhere() -> None:
    for probe in PROBES[:2]:
        assert verdict("docker", probe.config) == "yes"
        assert verdict("process", probe.config).startswith("refused")
        assert verdict("kubernetes", probe.config).startswith("refused")


def _paragraphs() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for para in re.split(r"\n\s*\n", page.read_text()):
            out.append((str(page.relative_to(ROOT)), " ".join(para.split())))
    return out


def test_no_page_says_tools_or_mcp_servers_are_refused_without_naming_where() -> None:
    stale = [(page, para[:160]) for page, para in _paragraphs()
             if re.search(r"`(tools|mcp_servers)`[^.|]*\brefused\b", para)
             and not re.search(r"process|Kubernetes|backends? that|refusals-table", para)]
    assert stale == []


def test_no_page_or_docstring_says_the_host_filters_are_not_enforced() -> None:
    stale = [(page, para[:160]) for page, para in _paragraphs()
             if "allowed_hosts" in para and re.search(r"not (be )?enforced|refused for now", para)]
    assert stale == []
    for doc in (SecurityPolicy.__doc__ or "", SandboxConfig.__doc__ or ""):
        assert not re.search(r"not\s+enforced|refused for now", doc)
    assert '"process"' in (SandboxConfig.__doc__ or "")  # type: names every backend
    assert '"kubernetes"' in (SandboxConfig.__doc__ or "")


def test_no_page_claims_no_registry_access_or_a_bare_python_for_examples() -> None:
    for page, para in _paragraphs():
        assert "no registry access" not in para, page
        assert not re.search(r"(?<![\w/.])python examples/", para), (page, para[:160])


def test_chorus_is_explained_where_it_is_named() -> None:
    for page, para in _paragraphs():
        if "CHORUS" in para:
            assert "specification" in para, (page, para[:160])


def test_every_code_block_is_marked() -> None:
    found = list(blocks())
    assert len(found) > 20
    unmarked = [b.where for b in found if b.mark not in MARKS]
    assert unmarked == [], f"mark each with <!-- doc-test: {'|'.join(MARKS)} -->"
    assert {b.mark for b in found} == set(MARKS)
    assert all(b.lang == "python" for b in found if b.mark in ("run", "fragment"))


#: Names a fragment may use without defining them: the objects the prose around it made.
_GIVEN: dict[str, object] = {"sb": Sandbox, "sh": Session, "pool": SandboxPool}


def _check_fragment(code: str) -> list[str]:
    """Compile (top-level await allowed); every ``sandbox`` import resolves; every method
    called on ``sb``, ``sh`` or ``pool`` exists."""
    tree = compile(code, "<doc>", "exec", flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
                   dont_inherit=True)
    assert isinstance(tree, ast.Module)
    problems = []
    # ``sandbox`` is the module where the fragment imports it, else the pytest fixture.
    imported = any(isinstance(n, ast.Import) and any(a.name == "sandbox" for a in n.names)
                   for n in ast.walk(tree))
    given = {**_GIVEN, "sandbox": sandbox if imported else Sandbox}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sandbox"):
            module = importlib.import_module(node.module or "")
            problems += [f"{node.module}.{a.name}" for a in node.names
                         if not hasattr(module, a.name)]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id in given and not hasattr(given[node.value.id], node.attr)):
            problems.append(f"{node.value.id}.{node.attr}")
    return problems


@pytest.mark.parametrize("block", [b for b in blocks() if b.mark in ("fragment", "run")],
                         ids=lambda b: b.where)
def test_python_blocks_compile_and_name_what_exists(block: object) -> None:
    from tests.unit._docs import Block

    assert isinstance(block, Block)
    assert _check_fragment(block.code) == [], block.where


def _make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


def test_shell_blocks_name_real_make_targets_and_subcommands() -> None:
    targets = _make_targets()
    parser = build_parser()
    choices = set(next(a for a in parser._actions if a.dest == "command").choices)  # type: ignore[arg-type]
    bad = []
    for block in blocks():
        if block.mark != "shell":
            continue
        for line in block.code.splitlines():
            bad += [f"{block.where}: make {t}" for t in re.findall(r"\bmake ([a-z][\w-]*)", line)
                    if t not in targets]
            bad += [f"{block.where}: sandbox {c}" for c in re.findall(
                r"(?:^|[;&|]\s*|python -m )sandbox ([a-z][\w-]*)", line.strip())
                if c not in choices]
    assert bad == []


def test_the_refusals_table_is_what_the_module_prints() -> None:
    out = subprocess.run([sys.executable, "scripts/refusals.py"], capture_output=True,
                         text=True, check=True, timeout=60, cwd=ROOT).stdout
    assert out == refusals_markdown()
