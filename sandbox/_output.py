"""Capture of a command's output: bounded, decoded incrementally, in arrival order."""

from __future__ import annotations

import codecs
from typing import Literal

StreamName = Literal["stdout", "stderr"]


class OutputCapture:
    """Keep up to ``limit`` bytes per stream, and the text of both in arrival order.

    Chunks are stored in lists and joined once (no quadratic ``+=``). Each stream has its own
    incremental UTF-8 decoder, so a character split across two chunks is decoded whole and
    invalid bytes become U+FFFD.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._raw: dict[StreamName, list[bytes]] = {"stdout": [], "stderr": []}
        self._kept: dict[StreamName, int] = {"stdout": 0, "stderr": 0}
        self._text: dict[StreamName, list[str]] = {"stdout": [], "stderr": []}
        self._combined: list[str] = []
        self._decoders: dict[StreamName, codecs.IncrementalDecoder] = {
            "stdout": codecs.getincrementaldecoder("utf-8")(errors="replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }
        self.truncated = False
        self.total_bytes = 0

    def feed(self, stream: StreamName, data: bytes) -> None:
        """Record one chunk; bytes past the limit are counted and dropped."""
        self.total_bytes += len(data)
        room = self._limit - self._kept[stream]
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if not data:
            return
        self._kept[stream] += len(data)
        self._raw[stream].append(data)
        text = self._decoders[stream].decode(data)
        if text:
            self._text[stream].append(text)
            self._combined.append(text)

    def finish(self) -> None:
        """Flush the decoders: an incomplete trailing character becomes U+FFFD."""
        for name, decoder in self._decoders.items():
            tail = decoder.decode(b"", final=True)
            if tail:
                self._text[name].append(tail)
                self._combined.append(tail)

    def raw(self, stream: StreamName) -> bytes:
        return b"".join(self._raw[stream])

    def text(self, stream: StreamName) -> str:
        return "".join(self._text[stream])

    def combined(self) -> str:
        return "".join(self._combined)
