"""The one defaults table every backend reads (`sandbox._limits`), and its rendering."""

from __future__ import annotations

import subprocess
import sys

from sandbox._constants import DEFAULT_FILE_LIMIT, DEFAULT_PROCESS_LIMIT
from sandbox._limits import ENFORCEMENT, default_limits, defaults_markdown, with_defaults
from sandbox._models import DEFAULTED_LIMITS, ResourceLimits
from sandbox.docker._facts import EngineFacts
from sandbox.docker._resources import resource_options

GiB = 1 << 30


def test_defaults_are_sized_from_the_host() -> None:
    assert default_limits(8, 64 * GiB) == ResourceLimits(
        cpu_limit=2.0, memory_limit=2 * GiB, process_limit=DEFAULT_PROCESS_LIMIT,
        file_limit=DEFAULT_FILE_LIMIT)
    small = default_limits(1, 2 * GiB)
    assert (small.cpu_limit, small.memory_limit) == (1.0, GiB // 2)
    assert default_limits(0, 0).cpu_limit == 1.0  # unknown host
    asked = with_defaults(ResourceLimits(memory_request=3 * GiB, file_limit=9), 8, 64 * GiB)
    assert (asked.memory_limit, asked.file_limit, asked.process_limit) == (3 * GiB, 9, 1024)


def test_docker_reads_the_same_defaults() -> None:
    engine = EngineFacts(ncpu=8, mem_total=64 * GiB)
    host: dict[str, object] = {}
    resource_options(ResourceLimits(), "runc", engine, host)
    want = default_limits(8, 64 * GiB)
    assert host["NanoCpus"] == round(want.cpu_limit * 1e9)
    assert host["Memory"] == want.memory_limit and host["PidsLimit"] == want.process_limit
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": want.file_limit,
                                "Hard": want.file_limit}]


def test_the_table_covers_every_defaulted_limit_and_renders() -> None:
    assert sorted(e.field for e in ENFORCEMENT) == sorted(DEFAULTED_LIMITS)
    table = defaults_markdown()
    lines = table.splitlines()
    assert len(lines) == 2 + len(ENFORCEMENT)
    assert all(line.count("|") == 7 for line in lines)
    assert f"| `file_limit` | {DEFAULT_FILE_LIMIT} |" in table
    printed = subprocess.run([sys.executable, "-m", "sandbox._limits"], capture_output=True,
                             text=True, check=True)
    assert printed.stdout == table
