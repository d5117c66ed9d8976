"""Progress of long work (image pulls and builds) as one line rewritten in place on a terminal.

Nothing is written when the stream is not a terminal or when asked to be quiet, so logs and
pipes stay clean. `PullProgress` folds the engine's pull records (one per layer and step)
into a summary: layers done, bytes fetched of the known total.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["Progress", "PullProgress", "human_bytes"]

#: Carriage return and erase-line: the next text replaces the line.
REWRITE = "\r\x1b[K"


def human_bytes(n: float) -> str:
    """1536 -> "1.5 KiB"."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _printable(text: str) -> str:
    # Engine records and file names are untrusted: no escape sequences reach the terminal.
    return "".join(c if c.isprintable() else "?" for c in text)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


class Progress:
    """One status line on ``stream`` (stderr by default), shown only on a terminal.

    ``update`` rewrites the line (with the seconds since `start`), ``done`` clears it.
    """

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        try:
            tty = self.stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        self.enabled = tty and not quiet
        self.shown = False
        self.started = time.monotonic()

    def start(self) -> None:
        """Restart the clock shown in each line."""
        self.started = time.monotonic()

    def update(self, text: str) -> None:
        if not self.enabled:
            return
        line = f"[{time.monotonic() - self.started:4.0f}s] {_printable(text)}"
        width = max(shutil.get_terminal_size().columns - 1, 20)
        self.stream.write(REWRITE + line[:width])
        self.stream.flush()
        self.shown = True

    def done(self) -> None:
        """Clear the line, leaving the terminal as it was."""
        if self.shown:
            self.stream.write(REWRITE)
            self.stream.flush()
            self.shown = False


class PullProgress(Progress):
    """Called with each of the engine's pull records (``Sandbox(on_pull_progress=...)``)."""

    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False) -> None:
        super().__init__(stream, quiet=quiet)
        self._layers: dict[str, tuple[int, int]] = {}
        self._finished: set[str] = set()
        self._image = ""

    def __call__(self, record: Mapping[str, Any]) -> None:
        status = str(record.get("status") or "")
        layer = str(record.get("id") or "")
        if status.startswith("Pulling from "):
            self._image = status.removeprefix("Pulling from ")
        elif layer and status in ("Pull complete", "Already exists"):
            self._finished.add(layer)
        elif layer and status in ("Downloading", "Pulling fs layer", "Waiting"):
            detail = record.get("progressDetail")
            current = total = 0
            if isinstance(detail, Mapping):
                current, total = _count(detail.get("current")), _count(detail.get("total"))
            old = self._layers.get(layer, (0, 0))
            self._layers[layer] = (current or old[0], total or old[1])
        layers = set(self._layers) | self._finished
        got = sum(c for c, _ in self._layers.values())
        total = sum(t for _, t in self._layers.values())
        size = f", {human_bytes(got)} of {human_bytes(total)}" if total else ""
        what = f"pulling {self._image}" if self._image else "pulling image"
        self.update(f"{what}: {len(self._finished)}/{len(layers)} layers{size} ({status})")
