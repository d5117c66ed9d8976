"""Terminal sizes for commands run on a pseudo-terminal (``tty=True``)."""

from __future__ import annotations

from ._errors import ConfigError

#: The kernel keeps a terminal's rows and columns in 16 bits.
MAX_TERMINAL_SIDE = 65535


def check_terminal_size(rows: int, cols: int) -> None:
    """Refuse a terminal size the kernel cannot hold, naming the bad side."""
    for name, value in (("rows", rows), ("cols", cols)):
        if not isinstance(value, int) or isinstance(value, bool) \
                or not 1 <= value <= MAX_TERMINAL_SIDE:
            raise ConfigError(f"resize: {name} must be an int from 1 to {MAX_TERMINAL_SIDE}, "
                              f"not {value!r}")
