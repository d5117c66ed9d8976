"""The README and the docs site's pages, and the code blocks in them, for the docs tests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parents[2]
#: What a reader sees: the front page and every page of the site.
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
#: How a block is treated: executed, compiled and its names checked, or (shell) its make
#: targets and CLI subcommands checked. Every block carries one, on the line before it.
MARKS = ("run", "fragment", "shell")

_MARK = re.compile(r"^\s*<!-- doc-test: (\w+)(?: .*)? -->\s*$")
_OPEN = re.compile(r"^( *)```(\S*)")


@attrs.frozen
class Block:
    """One fenced code block: where it is, its language, its mark ("" when none) and code."""

    page: Path
    line: int
    lang: str
    mark: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(pages: tuple[Path, ...] = PAGES) -> Iterator[Block]:
    """Every fenced block of ``pages``, with the mark on the last non-blank line before it."""
    for page in pages:
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            opened = _OPEN.match(lines[i])
            if not opened:
                i += 1
                continue
            indent, lang = opened.groups()
            before = next((x for x in reversed(lines[:i]) if x.strip()), "")
            mark = m.group(1) if (m := _MARK.match(before)) else ""
            end = next(j for j in range(i + 1, len(lines))
                       if lines[j].strip() == "```")
            code = "\n".join(x[len(indent):] for x in lines[i + 1:end]) + "\n"
            yield Block(page, i + 1, lang, mark, code)
            i = end + 1
