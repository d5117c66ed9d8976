"""Exit status helpers: a process killed by signal N reports 128+N through the engine."""

from __future__ import annotations

import signal as _signal


def signal_name(exit_code: int) -> str:
    """Return "SIGKILL" for 137 and the like, "" when the code is not a signal death.

    The engine reports a signal death as 128+N, which a shell's ``exit 137`` imitates; the two
    cannot be told apart, so the name is a reading of the convention, not a proof.
    """
    if 128 < exit_code < 128 + 65:
        try:
            return _signal.Signals(exit_code - 128).name
        except ValueError:
            return f"SIG{exit_code - 128}"
    return ""


def parse_signal(sig: int | str) -> int:
    """Turn 9, "9", "KILL" or "SIGKILL" into a signal number; ValueError otherwise."""
    if isinstance(sig, int):
        return int(_signal.Signals(sig))
    text = sig.strip().upper()
    if text.isdigit():
        return int(_signal.Signals(int(text)))
    if not text.startswith("SIG"):
        text = "SIG" + text
    try:
        return int(_signal.Signals[text])
    except KeyError:
        raise ValueError(f"unknown signal {sig!r}") from None
