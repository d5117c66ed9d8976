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
