"""Terminal sizes: checked the same for the real handle and the fake."""

from __future__ import annotations

import pytest

from sandbox import ConfigError
from sandbox._tty import check_terminal_size
from sandbox.testing import FakeSandbox


@pytest.mark.parametrize(("rows", "cols", "bad"), [
    (0, 80, "rows"), (24, 0, "cols"), (65536, 80, "rows"), (24, 1.5, "cols"),
    (True, 80, "rows"),
])
def test_bad_sizes_name_the_side(rows: object, cols: object, bad: str) -> None:
    with pytest.raises(ConfigError, match=f"{bad} must be an int from 1 to 65535"):
        check_terminal_size(rows, cols)  # type: ignore[arg-type]


def test_good_sizes_pass() -> None:
    check_terminal_size(1, 1)
    check_terminal_size(65535, 65535)


@pytest.mark.asyncio
async def test_fake_records_tty_and_size() -> None:
    async with FakeSandbox() as fake, fake.stream_command("python3", tty=True) as proc:
        await proc.resize(40, 100)
        assert proc.size == (40, 100)  # type: ignore[attr-defined]
