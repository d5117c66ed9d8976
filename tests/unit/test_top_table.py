"""`sandbox top` fits the terminal: at 80 columns no line wraps, whatever the names."""

from __future__ import annotations

from datetime import UTC, datetime

from sandbox import ResourceUsage
from sandbox.cli.ps import top_table
from sandbox.docker._ps import SandboxRow, TopRow


def _row(name: str, image: str) -> TopRow:
    box = SandboxRow(id="x", container_id="c" * 64, name=name, image=image, state="running",
                     created=datetime.now(UTC), age_seconds=5, owner_pid=4194303,
                     owner_host="host", owner="alive")
    return TopRow(sandbox=box, usage=ResourceUsage(cpu_usage=123.4, memory_usage=1536 << 20,
                                                   memory_percent=75.0, process_count=1024))


def test_at_80_columns_no_line_is_longer() -> None:
    rows = [_row("sandbox-" + "a" * 40, "registry.example:5000/team/python-with-tools:3.12"),
            _row("short", "sandbox-busybox:latest")]
    unfitted = top_table(rows)
    assert max(map(len, unfitted.splitlines())) > 80  # (what wrapped before)
    text = top_table(rows, 80)
    assert max(map(len, text.splitlines())) <= 80, text
    assert "alive (pid 4194303)" in text  # the owner is cut last
    assert "CPU%" in text and "1024" in text  # the numbers are never cut


def test_a_table_that_fits_is_left_as_it_is() -> None:
    rows = [_row("short", "sandbox-busybox:latest")]
    assert top_table(rows, 200) == top_table(rows)
