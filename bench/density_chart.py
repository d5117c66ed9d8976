"""Draw docs/assets/density.svg from the measured numbers in docs/assets/density.json.

The numbers come from ``bench/density.py`` (copied from bench/results/density-*.json into
docs/assets/density.json as {"process": {...}, "docker": {...}}). Standard library only:
the SVG is written by hand, so the docs need no plotting dependency.

    python bench/density_chart.py
"""

from __future__ import annotations

import json
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "assets"
PANELS = (
    ("host_mem_used_mib", "host memory used (MiB)"),
    ("sdk_rss_mib", "SDK process RSS (MiB)"),
    ("create_ms_per_sandbox", "create time per sandbox (ms)"),
    ("sdk_cpu_idle_pct", "SDK CPU while idle (% of a core)"),
)
COLOURS = {"process": "#1f77b4", "docker": "#d62728"}
W, H, PAD = 360, 220, 48


def _panel(x0: int, y0: int, title: str, key: str, series: dict[str, list[dict[str, float]]]
           ) -> list[str]:
    xs = [p["count"] for pts in series.values() for p in pts] or [1]
    ys = [p[key] for pts in series.values() for p in pts] or [1]
    xmax, ymax = max(xs) or 1, (max(ys) or 1) * 1.1
    px = lambda x: x0 + PAD + (W - PAD - 10) * x / xmax  # noqa: E731
    py = lambda y: y0 + H - PAD + 10 - (H - PAD - 10) * y / ymax  # noqa: E731
    out = [f'<text x="{x0 + W / 2}" y="{y0 + 16}" text-anchor="middle" '
           f'font-weight="bold">{title}</text>',
           f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(xmax)}" y2="{py(0)}" stroke="#333"/>',
           f'<line x1="{px(0)}" y1="{py(0)}" x2="{px(0)}" y2="{py(ymax)}" stroke="#333"/>']
    for i in range(5):
        yv, xv = ymax * i / 4, xmax * i / 4
        out.append(f'<text x="{px(0) - 4}" y="{py(yv) + 4}" text-anchor="end" '
                   f'font-size="10">{yv:,.0f}</text>' if ymax >= 10 else
                   f'<text x="{px(0) - 4}" y="{py(yv) + 4}" text-anchor="end" '
                   f'font-size="10">{yv:.2f}</text>')
        out.append(f'<text x="{px(xv)}" y="{py(0) + 14}" text-anchor="middle" '
                   f'font-size="10">{xv:,.0f}</text>')
    out.append(f'<text x="{px(xmax / 2)}" y="{py(0) + 28}" text-anchor="middle" '
               f'font-size="10">sandboxes open</text>')
    for name, pts in series.items():
        if not pts:
            continue
        path = " ".join(f"{px(p['count']):.1f},{py(p[key]):.1f}" for p in pts)
        out.append(f'<polyline fill="none" stroke="{COLOURS.get(name, "#000")}" '
                   f'stroke-width="2" points="{path}"/>')
        out += [f'<circle cx="{px(p["count"]):.1f}" cy="{py(p[key]):.1f}" r="2.5" '
                f'fill="{COLOURS.get(name, "#000")}"/>' for p in pts]
    return out


def main() -> None:
    data = json.loads((DOCS / "density.json").read_text())
    series = {name: run["points"] for name, run in data.items()}
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{2 * H + 30}" '
             'font-family="sans-serif" font-size="12">',
             f'<rect width="{2 * W}" height="{2 * H + 30}" fill="white"/>']
    for i, (key, title) in enumerate(PANELS):
        parts += _panel((i % 2) * W, (i // 2) * H, title, key, series)
    x = 10
    for name in series:
        parts.append(f'<rect x="{x}" y="{2 * H + 12}" width="12" height="12" '
                     f'fill="{COLOURS.get(name, "#000")}"/>')
        parts.append(f'<text x="{x + 16}" y="{2 * H + 22}">{name} backend</text>')
        x += 140
    parts.append("</svg>")
    (DOCS / "density.svg").write_text("\n".join(parts) + "\n")
    print(f"written {DOCS / 'density.svg'}")


if __name__ == "__main__":
    main()
