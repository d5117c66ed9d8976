"""The README's backend table, rendered from the capability protocols (`sandbox._backend`).

``python -m sandbox._capabilities`` prints it; ``tests/unit/test_capabilities.py`` checks
that the README holds exactly this between its ``backends-table`` markers, so a backend that
gains or loses a capability cannot leave the README behind.
"""

from __future__ import annotations

from ._backend import CAPABILITIES, supports
from ._registry import BACKENDS, backend_class

__all__ = ["END", "START", "render_table"]

START = "<!-- backends-table:start -->"
END = "<!-- backends-table:end -->"


def _columns() -> list[tuple[str, object]]:
    """(heading, class) of each registered backend class, once, and the fake."""
    from .testing import FakeBackend

    seen: dict[object, list[str]] = {}
    for kind in BACKENDS:
        seen.setdefault(backend_class(kind), []).append(f"`{kind}`")
    columns = [(" / ".join(kinds), cls) for cls, kinds in seen.items()]
    return [*columns, ("fake (`sandbox.testing`)", FakeBackend)]


def render_table() -> str:
    """The Markdown table: a row per capability, a column per backend; "yes", or what
    happens instead where the backend lacks it."""
    columns = _columns()
    lines = ["| capability | " + " | ".join(name for name, _ in columns) + " |",
             "|---" * (len(columns) + 1) + "|"]
    for cap in CAPABILITIES:
        cells = ["yes" if supports(cls, cap.protocol) else f"no: {cap.without}"
                 for _, cls in columns]
        lines.append(f"| {cap.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(START)
    print(render_table(), end="")
    print(END)
