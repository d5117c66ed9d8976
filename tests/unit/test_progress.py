"""The progress line (sandbox/_progress.py): drawn only on a terminal, summarising pulls."""

from __future__ import annotations

import io

from sandbox._progress import Progress, PullProgress, human_bytes


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_silent_when_not_a_terminal_or_quiet() -> None:
    for stream, quiet in ((io.StringIO(), False), (Terminal(), True)):
        p = Progress(stream, quiet=quiet)
        p.update("working")
        p.done()
        assert stream.getvalue() == ""


def test_rewrites_one_line_then_erases_it() -> None:
    term = Terminal()
    p = Progress(term)
    p.update("step one")
    p.update("step two")
    p.done()
    parts = term.getvalue().split("\r\x1b[K")
    assert parts[0] == "" and parts[-1] == ""
    assert parts[1].endswith("] step one") and parts[2].endswith("] step two")


def test_pull_records_are_summarised_and_escapes_dropped() -> None:
    term = Terminal()
    pull = PullProgress(term)
    pull({"status": "Pulling from library/x\x1b[2J"})
    pull({"status": "Pulling fs layer", "id": "a"})
    pull({"status": "Pulling fs layer", "id": "b"})
    pull({"status": "Downloading", "id": "a", "progressDetail": {"current": 512, "total": 2048}})
    pull({"status": "Downloading", "id": "b",
          "progressDetail": {"current": "x", "total": -5}})
    pull({"status": "Pull complete", "id": "a"})
    last = term.getvalue().split("\r\x1b[K")[-1]
    assert "\x1b" not in term.getvalue().replace("\r\x1b[K", "")
    assert "pulling library/x?[2J: 1/2 layers, 512 B of 2.0 KiB (Pull complete)" in last


def test_human_bytes() -> None:
    assert [human_bytes(n) for n in (5, 1536, 3 * 1024**3)] == ["5 B", "1.5 KiB", "3.0 GiB"]
