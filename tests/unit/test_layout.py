"""The package's shape: backends behind the protocol, and modules that stay readable."""

from __future__ import annotations

import ast
from pathlib import Path

from sandbox import SandboxConfig

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox"
#: A backend module past this has likely grown a second idea (the bound is a smell test, not a
#: budget to split one idea into several files for; the before-stop check uses the same 600).
MAX_DOCKER_LINES = 600


def _top_level_imports(tree: ast.Module) -> set[str]:
    """Modules imported at module level (not inside functions or TYPE_CHECKING blocks)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_docker_modules_stay_under_the_bound() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "docker").glob("*.py")}
    assert len(sizes) > 10
    assert {name: n for name, n in sizes.items() if n >= MAX_DOCKER_LINES} == {}


def test_process_modules_stay_under_the_bound() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in (PACKAGE / "process").glob("*.py")}
    assert len(sizes) > 5
    assert {name: n for name, n in sizes.items() if n >= MAX_DOCKER_LINES} == {}


def test_backend_neutral_modules_do_not_import_a_backend() -> None:
    """Policy, paths, lifecycle and the public Sandbox load no engine code; the default
    Docker backend is imported only when a Sandbox is made without one."""
    offenders = {
        path.name: sorted(found)
        for path in PACKAGE.glob("_*.py")
        if (found := {m for m in _top_level_imports(ast.parse(path.read_text()))
                      if m.startswith((".docker", "sandbox.docker", "aiodocker"))})
    }
    assert offenders == {}


def test_the_layout_check_sees_a_violation() -> None:
    assert _top_level_imports(ast.parse("from .docker import x\ndef f():\n import y\n")) == \
        {".docker"}


def test_every_registered_backend_satisfies_the_protocol() -> None:
    """The registry once loaded backends by name, so nothing saw a missing member: a pool on
    the process backend failed with AttributeError: 'ProcessSandbox' object has no attribute
    'health'. Now mypy checks the table's types; this checks each class at run time too."""
    from sandbox._backend import Backend
    from sandbox._registry import BACKENDS, backend_class

    members = {name for name in [*vars(Backend), *Backend.__annotations__]
               if not name.startswith("_")}
    assert {"run_process", "remove", "create", "id"} <= members
    missing = {}
    for kind in BACKENDS:
        cls = backend_class(kind)
        backend = cls(SandboxConfig(type=kind))
        assert isinstance(backend, Backend), kind
        if lacking := sorted(m for m in members if not hasattr(backend, m)):
            missing[kind] = lacking
    assert missing == {}
