"""Capture of a command's output: bounded bytes, decoded only when the text is read.

The cap (``max_output_bytes`` per stream) bounds the client's memory too: while a command runs
only its raw bytes are kept (at most two caps), plus the arrival order of the streams as
(stream, length) runs. ``stdout``, ``stderr`` and ``combined`` are decoded on first access and
then kept; eager decoding made three more copies (100 MB + 100 MB of binary output under the
16 MiB default cap peaked at 466 MiB of client RSS).
"""

from __future__ import annotations

import codecs
import inspect
from collections.abc import Callable
from typing import Any, Literal

StreamName = Literal["stdout", "stderr"]
TextName = Literal["stdout", "stderr", "combined"]


class OutputCapture:
    """Keep up to ``limit`` bytes per stream, and the order in which the streams arrived.

    Chunks are stored in lists and joined once (no quadratic ``+=``).
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._raw: dict[StreamName, list[bytes]] = {"stdout": [], "stderr": []}
        self._kept: dict[StreamName, int] = {"stdout": 0, "stderr": 0}
        self._runs: list[tuple[StreamName, int]] = []
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
        if self._runs and self._runs[-1][0] == stream:
            self._runs[-1] = (stream, self._runs[-1][1] + len(data))
        else:
            self._runs.append((stream, len(data)))

    def raw(self, stream: StreamName) -> bytes:
        """All kept bytes of ``stream``; the chunk list is replaced by the joined copy."""
        chunks = self._raw[stream]
        if len(chunks) != 1:
            chunks[:] = [b"".join(chunks)]
        return chunks[0]

    def output(self) -> CapturedOutput:
        """The captured bytes and their arrival order, for lazily decoded text."""
        return CapturedOutput(self.raw("stdout"), self.raw("stderr"), tuple(self._runs))


def decode(data: bytes) -> str:
    """UTF-8 with invalid bytes as U+FFFD, as the incremental decoders produced."""
    return data.decode("utf-8", errors="replace")


class CapturedOutput:
    """Both streams' bytes and their arrival order: the source of the result's text."""

    __slots__ = ("runs", "stderr", "stdout")

    def __init__(self, stdout: bytes, stderr: bytes, runs: tuple[tuple[StreamName, int], ...]):
        self.stdout = stdout
        self.stderr = stderr
        self.runs = runs

    def decode(self, which: TextName) -> str:
        if which == "stdout":
            return decode(self.stdout)
        if which == "stderr":
            return decode(self.stderr)
        # The old capture decoded each stream incrementally and appended text as it came, so
        # a character split between two runs of one stream shows up where it completes. The
        # same text comes from one decode of the runs' bytes with each run's unfinished
        # trailing character moved to the start of that stream's next run (or to the end);
        # one decode of one bytes object, instead of a list of pieces and a join (which
        # doubled the peak: 32 MiB of binary output decodes to up to 128 MiB of text).
        data = {"stdout": self.stdout, "stderr": self.stderr}
        views = {"stdout": memoryview(self.stdout), "stderr": memoryview(self.stderr)}
        cut = {"stdout": 0, "stderr": 0}  # where the stream's next run starts taking bytes
        end = {"stdout": 0, "stderr": 0}
        pieces: list[memoryview | bytes] = []
        for stream, length in self.runs:
            end[stream] += length
            stop = end[stream] - _unfinished(data[stream], end[stream])
            if stop <= cut[stream]:
                continue
            # Bytes held back just before the held-back character were ended by it: the
            # stream's decoder turned them into U+FFFD, which the other stream's next bytes
            # must not be able to complete; put that text in their place.
            dangling = _unfinished(data[stream], stop) if stop < end[stream] else 0
            pieces.append(views[stream][cut[stream] : stop - dangling])
            if dangling:
                pieces.append(decode(data[stream][stop - dangling : stop]).encode())
            cut[stream] = stop
        pieces += [views["stdout"][cut["stdout"] :], views["stderr"][cut["stderr"] :]]
        joined = b"".join(pieces)
        del pieces, views
        return decode(joined)


def _unfinished(data: bytes, end: int) -> int:
    """How many bytes before ``end`` an incremental UTF-8 decoder would hold back."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    decoder.decode(data[max(end - 3, 0) : end])
    return len(decoder.getstate()[0])


class LazyText:
    """One of a result's texts, decoded from :class:`CapturedOutput` on first use, then kept.

    Compares, hashes and prints as the text it stands for.
    """

    __slots__ = ("_source", "_value", "_which")

    def __init__(self, source: CapturedOutput, which: TextName) -> None:
        self._source: CapturedOutput | None = source
        self._which: TextName = which
        self._value: str | None = None

    @property
    def decoded(self) -> bool:
        return self._value is not None

    def get(self) -> str:
        if self._value is None:
            assert self._source is not None
            self._value = self._source.decode(self._which)
            self._source = None
        return self._value

    def __str__(self) -> str:
        return self.get()

    def __repr__(self) -> str:
        return repr(self.get())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyText):
            other = other.get()
        return self.get() == other if isinstance(other, str) else NotImplemented

    def __hash__(self) -> int:
        return hash(self.get())


def text_of(value: str | LazyText) -> str:
    """The text of a result field, decoding it now if it was not yet."""
    return value if isinstance(value, str) else value.get()


async def deliver(callback: Callable[[bytes], Any] | None, data: bytes) -> None:
    """Hand output to an ``on_stdout``/``on_stderr`` callback, sync or async (None: nobody)."""
    if callback is None:
        return
    outcome = callback(data)
    if inspect.isawaitable(outcome):
        await outcome
