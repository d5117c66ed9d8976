"""The core import stays light: no framework is imported until its adapter module is."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("inspect_ai", "deepagents", "langchain", "langgraph", "pytest")


def test_import_sandbox_imports_no_framework() -> None:
    code = ("import sys, sandbox, sandbox.integrations, sandbox.testing; "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({FRAMEWORKS!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert out == "[]\n"


def _import_without(module: str, blocked: str) -> subprocess.CompletedProcess[str]:
    """Import ``module`` in a fresh interpreter where ``blocked`` cannot be imported."""
    code = (f"import sys; sys.modules[{blocked!r}] = None\n"
            f"try:\n    import {module}\n"
            "except ImportError as exc:\n"
            "    print(type(exc).__name__, exc, sep=': ')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)


def test_an_integration_or_backend_without_its_extra_names_the_extra() -> None:
    """Not a bare ModuleNotFoundError from deep inside: an ImportError saying what to install."""
    for module, blocked, extra in (("sandbox.integrations.inspect", "inspect_ai", "inspect"),
                                   ("sandbox.integrations.langchain", "deepagents", "langchain"),
                                   ("sandbox.kubernetes", "kubernetes_asyncio", "kubernetes")):
        out = _import_without(module, blocked).stdout
        assert out.startswith("ImportError: "), (module, out)
        assert f"pip install 'sandbox[{extra}]'" in out, (module, out)
