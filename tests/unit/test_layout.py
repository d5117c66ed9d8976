"""The package's shape: backends behind the protocol, arrows that point one way, and modules
that stay readable.

Every import counts here, wherever it stands (module level, inside a function, under
``TYPE_CHECKING``): a lazy import is still an arrow a reader has to follow.
"""

from __future__ import annotations

import ast
from pathlib import Path

from sandbox import SandboxConfig

PACKAGE = Path(__file__).resolve().parents[2] / "sandbox"
#: A backend module past this has likely grown a second idea (the bound is a smell test, not a
#: budget to split one idea into several files for; the before-stop check uses the same 600).
MAX_DOCKER_LINES = 600
BACKEND_PACKAGES = ("docker", "process", "kubernetes")
#: Known arrows from one backend into another: none. What one backend needs of another's engine
#: goes through a protocol in `sandbox._backend` that `sandbox._registry` loads by name (the
#: process backend's root filesystems come from `registry.image_store()`).
KNOWN_CROSS_BACKEND: set[tuple[str, str]] = set()
#: Known circles. The first is type-only: exceptions carry a typed `CommandResult`, and the
#: models raise `ConfigError` (no circle at run time).
KNOWN_CIRCLES = {
    frozenset({"sandbox._errors", "sandbox._models", "sandbox._validate"}),
}
#: Known imports of another module's underscore names.
KNOWN_PRIVATE: set[tuple[str, str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _all_imports(module: str, tree: ast.Module) -> list[tuple[str, str | None]]:
    """(module, name or None) for every import anywhere in ``tree``, made absolute."""
    is_package = MODULES.get(module, Path()).name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            found += [(base, alias.name) for alias in node.names]
    return found


def _arrows(module: str, tree: ast.Module) -> set[str]:
    """The package's modules ``module`` imports (a name that is a submodule counts as it)."""
    targets = set()
    for base, name in _all_imports(module, tree):
        if name is not None and f"{base}.{name}" in MODULES:
            targets.add(f"{base}.{name}")
        elif base in MODULES:
            targets.add(base)
    return targets - {module}


def _graph() -> dict[str, set[str]]:
    return {module: _arrows(module, ast.parse(path.read_text()))
            for module, path in MODULES.items()}


def _backend_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in BACKEND_PACKAGES else None


def _circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            nxt = next((e for e in edges if e in graph), None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.add(frozenset(group))
    return found


def _top_level_imports(tree: ast.Module) -> set[str]:
    """Modules imported at module level (not inside functions or TYPE_CHECKING blocks)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_no_backend_imports_another_backend() -> None:
    """Code two backends need lives in a neutral module, lazy imports included."""
    crossing = {(module, target) for module, targets in _graph().items()
                if (own := _backend_of(module))
                for target in targets if _backend_of(target) not in (None, own)}
    assert crossing - KNOWN_CROSS_BACKEND == set()
    assert KNOWN_CROSS_BACKEND - crossing == set(), "a known exception is gone: drop its line"


def test_the_core_imports_no_backend() -> None:
    """Modules of the package root (``sandbox/*.py``) reach a backend only through the
    registry's table of module names, never by an import, lazy or type-only."""
    offenders = {(module, target) for module, targets in _graph().items()
                 if module.count(".") == 1 and _backend_of(module) is None
                 for target in targets if _backend_of(target)}
    assert offenders == set()


def test_no_import_circles() -> None:
    circles = _circles(_graph())
    assert circles - KNOWN_CIRCLES == set()
    assert KNOWN_CIRCLES - circles == set(), "a known circle is gone: drop its line"


def test_no_module_imports_another_modules_underscore_names() -> None:
    """A name shared across modules is public to the package: it drops its underscore."""
    found = {(module, base, name)
             for module, path in MODULES.items()
             for base, name in _all_imports(module, ast.parse(path.read_text()))
             if name and name.startswith("_") and not name.startswith("__")
             and base.startswith("sandbox") and f"{base}.{name}" not in MODULES}
    assert found - KNOWN_PRIVATE == set()
    assert KNOWN_PRIVATE - found == set(), "a known exception is gone: drop its line"


def test_the_layout_checks_see_violations() -> None:
    """The checks above can fail: a lazy and a type-only import count, a circle is found."""
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from ..docker._gateway import Engine\n"
                     "def f():\n    from ..process import _gc\n")
    assert _arrows("sandbox.kubernetes._gc", tree) == {"sandbox.docker._gateway",
                                                        "sandbox.process._gc"}
    core = ast.parse("def f():\n    from .docker import _gc\n")
    assert _arrows("sandbox._gc", core) == {"sandbox.docker._gc"}
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == \
        {frozenset({"a", "b", "c"})}


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


def test_the_top_level_check_sees_a_violation() -> None:
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


def test_no_two_test_modules_share_a_basename() -> None:
    """The test folders are not packages: two files of one name break the whole suite's
    collection (each folder alone still passes)."""
    seen: dict[str, list[str]] = {}
    for path in (PACKAGE.parent / "tests").rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(PACKAGE.parent)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}
