"""Output capture: bounded bytes, text decoded lazily and exactly as incremental decoding did."""

from __future__ import annotations

import codecs
import os
import random
import tracemalloc

import attrs

from sandbox import CommandResult, from_json, to_json
from sandbox._output import LazyText, OutputCapture, StreamName

Chunks = list[tuple[StreamName, bytes]]


def incremental(chunks: Chunks) -> tuple[str, str, str]:
    """The old capture: one incremental decoder per stream, text appended as it came."""
    decoders = {s: codecs.getincrementaldecoder("utf-8")(errors="replace")
                for s in ("stdout", "stderr")}
    texts: dict[str, list[str]] = {"stdout": [], "stderr": []}
    combined: list[str] = []
    for stream, data in [*chunks, ("stdout", b""), ("stderr", b"")]:
        text = decoders[stream].decode(data, final=not data)
        texts[stream].append(text)
        combined.append(text)
    return "".join(texts["stdout"]), "".join(texts["stderr"]), "".join(combined)


def interleave(rng: random.Random, out: bytes, err: bytes) -> Chunks:
    chunks: Chunks = []
    pos = {"stdout": 0, "stderr": 0}
    data = {"stdout": out, "stderr": err}
    while pos["stdout"] < len(out) or pos["stderr"] < len(err):
        stream: StreamName = rng.choice([s for s in ("stdout", "stderr")
                                         if pos[s] < len(data[s])])
        n = rng.randint(1, 5)
        chunks.append((stream, data[stream][pos[stream]:pos[stream] + n]))
        pos[stream] += n
    return chunks


def captured(chunks: Chunks) -> tuple[str, str, str]:
    cap = OutputCapture(1 << 20)
    for stream, data in chunks:
        cap.feed(stream, data)
    out = cap.output()
    return out.decode("stdout"), out.decode("stderr"), out.decode("combined")


def test_lazy_text_equals_incremental_decoding_for_split_and_invalid_utf8() -> None:
    rng = random.Random(7)
    pieces = [b"a", "é".encode(), "€".encode(), "😀".encode(), b"\xe0\x80", b"\xed\xa0\x80",
              b"\xff", b"\x80", b"\xf4\x90", b"\xe2", b"\xc2", b"\xf0", b"\xef"]
    for _ in range(3000):
        out, err = (b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
                    for _ in range(2))
        chunks = interleave(rng, out, err)
        assert captured(chunks) == incremental(chunks), chunks
    for _ in range(20):
        chunks = interleave(rng, os.urandom(2000), os.urandom(2000))
        assert captured(chunks) == incremental(chunks)


def test_a_result_keeps_bytes_and_decodes_only_what_is_read() -> None:
    """4 MiB of binary output per stream: no text exists until read (it was three copies,
    up to 4 bytes per byte, decoded while the command ran)."""
    cap = OutputCapture(4 << 20)
    tracemalloc.start()
    try:
        for _ in range(64):
            cap.feed("stdout", os.urandom(64 << 10))
            cap.feed("stderr", os.urandom(64 << 10))
        out = cap.output()
        result = CommandResult(stdout=LazyText(out, "stdout"), stderr=LazyText(out, "stderr"),
                               combined=LazyText(out, "combined"), stdout_bytes=out.stdout,
                               stderr_bytes=out.stderr)
        result = attrs.evolve(result, exit_code=0)  # what the sandbox's finalizer does
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The kept bytes and one join of them; no decoded text (that alone would be >= 8 MiB).
    assert peak < 18 << 20, peak
    assert result.stdout_bytes is out.stdout
    lazy = [result._stdout, result._stderr, result._combined]
    assert all(isinstance(t, LazyText) and not t.decoded for t in lazy)
    assert result.stdout == out.stdout.decode(errors="replace")
    assert [t.decoded for t in lazy if isinstance(t, LazyText)] == [True, False, False]
    assert len(result.combined) == len(result.stdout) + len(result.stderr)


def test_results_with_text_or_lazy_text_are_the_same_value() -> None:
    cap = OutputCapture(100)
    cap.feed("stdout", "hé".encode())
    cap.feed("stderr", b"oops\xff")
    out = cap.output()
    lazy = CommandResult(stdout=LazyText(out, "stdout"), stderr=LazyText(out, "stderr"),
                         combined=LazyText(out, "combined"))
    plain = CommandResult(stdout="hé", stderr="oops\ufffd", combined="héoops\ufffd")
    assert lazy == plain and hash(lazy._stdout) == hash("hé")
    assert type(lazy.stdout) is str and lazy.combined == "héoops\ufffd"
    assert "stdout='hé'" in repr(plain) and "_stdout" not in repr(plain)
    text = to_json(lazy)
    assert '"stdout":"hé"' in text and '"combined":"héoops\ufffd"' in text
    assert "_stdout" not in text
    assert from_json(text, CommandResult) == plain
    assert CommandResult().stdout == "" and CommandResult(stdout="x").stdout == "x"
