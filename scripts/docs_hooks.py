"""mkdocs hooks: the site's front page is the README, and charts are drawn from tables.

The front page (``docs/index.md``) is the README itself, its ``docs/...`` links made relative
to the site, so the two cannot drift apart. Charts: a page writes ``<!-- chart: TITLE -->``
on the line before a table; the chart is drawn from that table's numbers at build time, so it
cannot disagree with them, and needs nothing but the standard library. The bars are the
column whose header starts with ``÷`` (a ratio to a baseline; a line marks 1.0), else the
``median`` column. ``python scripts/docs_hooks.py FILE`` prints the SVGs of FILE's charts,
for a look without a build.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parents[1] / "README.md"

_MARKER = re.compile(r"^<!-- chart: (?P<title>.+?) -->\s*$")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_COLORS = ("#3f51b5", "#009688", "#ff9800", "#9c27b0", "#607d8b", "#e91e63")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _value(cell: str) -> float | None:
    found = _NUMBER.search(cell)
    return float(found.group().replace(",", "")) if found else None


def chart(title: str, table: list[str]) -> str:
    """The SVG for one markdown table (its header, the rule, then rows)."""
    header = [h.lower() for h in _cells(table[0])]
    column = next((i for i, h in enumerate(header) if h.startswith("÷")), None)
    ratio = column is not None
    if column is None:
        column = header.index("median")
    rows = []
    for line in table[2:]:
        cells = _cells(line)
        value = _value(cells[column]) if len(cells) > column else None
        if value is not None:
            rows.append((cells[0].replace("\\*", "*"), cells[1] if len(cells) > 2 else "", value))
    series = list(dict.fromkeys(r[1] for r in rows))
    top = max([r[2] for r in rows] + ([1.0] if ratio else []))
    label_w, bar_w, row_h, head = 330, 420, 16, 24
    height = head + row_h * len(rows) + 14 * len(dict.fromkeys(r[0] for r in rows)) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{label_w + bar_w + 70}" '
           f'height="{height}" font-family="sans-serif" font-size="11">',
           f"<title>{html.escape(title)}</title>",
           f'<text x="4" y="14" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    y, group = head, None
    for scenario, name, value in rows:
        if scenario != group:
            group = scenario
            y += 14
            out.append(f'<text x="4" y="{y - 3}" font-weight="bold">'
                       f"{html.escape(scenario.replace('`', ''))}</text>")
        width = max(1.0, bar_w * value / top) if top else 1.0
        color = _COLORS[series.index(name) % len(_COLORS)]
        out.append(f'<text x="{label_w - 6}" y="{y + 11}" text-anchor="end">'
                   f"{html.escape(name[:48])}</text>"
                   f'<rect x="{label_w}" y="{y + 2}" width="{width:.1f}" height="{row_h - 4}" '
                   f'fill="{color}"/><text x="{label_w + width + 4:.1f}" y="{y + 11}">'
                   f"{value:g}</text>")
        y += row_h
    if ratio:
        x = label_w + bar_w / top
        out.append(f'<line x1="{x:.1f}" y1="{head}" x2="{x:.1f}" y2="{y}" stroke="#000" '
                   'stroke-dasharray="3,3"/>')
    out.append("</svg>")
    return "".join(out)


def render(markdown: str) -> str:
    """``markdown`` with an SVG inserted after each chart marker, before its table."""
    lines = markdown.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        found = _MARKER.match(lines[i])
        i += 1
        if not found:
            continue
        j = i
        while j < len(lines) and not lines[j].strip():
            j += 1
        k = j
        while k < len(lines) and lines[k].lstrip().startswith("|"):
            k += 1
        if k - j < 3:
            raise ValueError(f"chart {found['title']!r}: no table follows the marker")
        out += ["", f'<div class="chart">{chart(found["title"], lines[j:k])}</div>', ""]
    return "\n".join(out)


def front_page() -> str:
    """The README as the site's front page: ``(docs/x.md)`` links become ``(x.md)``, and
    links to files outside the site point at the site's copy (the changelog)."""
    text = README.read_text()
    text = text.replace("](docs/", "](").replace("](CHANGELOG.md)", "](reference/changelog.md)")
    return text


def on_page_markdown(markdown: str, *, page: Any, **_: Any) -> str:
    """The mkdocs event: the front page is the README; every page's charts are drawn."""
    if page.file.src_uri == "index.md":
        markdown = front_page()
    return render(markdown)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        text = f.read()
    for line in render(text).split("\n"):
        if line.startswith('<div class="chart">'):
            print(line[len('<div class="chart">'):-len("</div>")])
