"""The README's default-limits table is the one the code renders: no second copy to rot."""

from __future__ import annotations

from pathlib import Path

from sandbox._limits import defaults_markdown

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_shows_the_defaults_the_code_applies() -> None:
    text = README.read_text()
    start = text.index("<!-- limits-table:start -->\n") + len("<!-- limits-table:start -->\n")
    end = text.index("<!-- limits-table:end -->")
    assert text[start:end] == defaults_markdown(), "run: python -m sandbox._limits"
