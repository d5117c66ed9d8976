"""The deadline of the SDK's own helper commands (file operations, probes), for every backend.

A helper gets ``HELPER_TIMEOUT`` seconds, plus one second per ``rate`` bytes it has moved (stdin
written and stdout read; default ``HELPER_MIN_RATE``, 1 MiB/s), up to ``max_time`` in all
(default ``HELPER_MAX_TIME``). A big copy thus has time in proportion to its size, while one
that stalls or trickles (a tool replaced by ``sleep`` or by a slow writer) is cancelled, and
the backend raises `HelperDeadline.expired` naming what it was doing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence

import anyio

from . import _constants
from ._errors import TimeoutExceeded

__all__ = ["HelperDeadline"]

_PIECE = 1 << 20


class HelperDeadline:
    """One helper's cancel scope, whose deadline grows with the bytes counted through it.

    Use: ``with d.scope:`` run the helper with ``d.counted_in(stdin)`` and
    ``d.counted_out(on_stdout)``, returning its result; after the block, ``raise d.expired(...)``.
    """

    def __init__(self, *, rate: float | None = None, max_time: float | None = None) -> None:
        self.fixed = _constants.HELPER_TIMEOUT
        self.per_byte = 1.0 / (rate or _constants.HELPER_MIN_RATE)
        self.ceiling = max(self.fixed, max_time or _constants.HELPER_MAX_TIME)
        self.start = time.monotonic()
        self.moved = 0
        self.scope = anyio.CancelScope(deadline=self.start + self.fixed)

    def credit(self, n: int) -> None:
        """Count ``n`` bytes moved and push the deadline out accordingly."""
        self.moved += n
        self.scope.deadline = self.start + min(self.fixed + self.moved * self.per_byte,
                                               self.ceiling)

    def counted_out(self, on_stdout: Callable[[bytes], object] | None
                    ) -> Callable[[bytes], object]:
        """A stdout consumer that credits each chunk, then passes it to ``on_stdout`` if any."""
        def consume(data: bytes) -> object:
            self.credit(len(data))
            return on_stdout(data) if on_stdout is not None else None
        return consume

    def counted_in(self, src: bytes | AsyncIterator[bytes] | None
                   ) -> AsyncIterator[bytes] | None:
        """``src`` as stdin chunks (1 MiB pieces for bytes), each credited as it is sent."""
        return None if src is None else self._counted_in(src)

    async def _counted_in(self, src: bytes | AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        if isinstance(src, bytes):
            for off in range(0, len(src), _PIECE):
                piece = src[off:off + _PIECE]
                self.credit(len(piece))
                yield piece
        else:
            async for piece in src:
                self.credit(len(piece))
                yield piece

    def expired(self, what: str, argv: Sequence[str], *, explain: bool = False
                ) -> TimeoutExceeded:
        """The error for a helper whose scope ran out; ``explain`` adds the deadline rule."""
        details = f"the helper {argv[0]!r} was killed after moving {self.moved} bytes"
        if explain:
            details += (f"; helpers get {self.fixed:g} s plus 1 s per {1 / self.per_byte:.0f} "
                        f"bytes moved, at most {self.ceiling:g} s")
        return TimeoutExceeded(
            f"{what} did not finish within {self.scope.deadline - self.start:.0f} s (has a tool "
            "in the sandbox been replaced?)",
            details=details)
