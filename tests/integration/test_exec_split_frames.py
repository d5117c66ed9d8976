"""The direct exec path (`sandbox.docker._direct`) against a real engine whose attach streams
come in pieces of a few bytes (a proxy that splits every write after the ``101``): what the
SDK sees must not depend on how the socket happened to cut the engine's frames."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox import IMAGE_BUSYBOX, CommandExecutionFailed, Sandbox, SandboxConfig
from tests.integration._proxy import EngineProxy

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]


class SplittingProxy(EngineProxy):
    """Forwards every connection; after an upgrade answer, in 3-byte writes a moment apart."""

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upgraded, head = False, b""
        while data := await reader.read(1 << 16):
            if not upgraded and (head or data.startswith(b"HTTP/1.1 101")):
                head += data  # the engine writes its 101 head in several writes
                if b"\r\n\r\n" not in head:
                    continue
                upgraded = True
                end = head.index(b"\r\n\r\n") + 4
                writer.write(head[:end])
                data = head[end:]
            step = 3 if upgraded else len(data)
            for at in range(0, len(data), step):
                writer.write(data[at:at + step])
                await writer.drain()
                if upgraded:
                    await asyncio.sleep(0.002)
        if writer.can_write_eof() and not writer.transport.is_closing():
            writer.write_eof()


@pytest.fixture
def split_engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[SplittingProxy]:
    with tempfile.TemporaryDirectory(prefix="sbx-", dir="/tmp") as d:
        proxy = SplittingProxy(Path(d) / "engine.sock")
        proxy.start()
        try:
            monkeypatch.setenv("DOCKER_HOST", proxy.url)
            yield proxy
        finally:
            proxy.close()


async def test_a_start_failure_split_in_pieces_is_never_output(
        split_engine: SplittingProxy) -> None:
    """The engine's "exec failed" line is one frame: read whole it is known for what it is
    (`read_start_failure`), in pieces it went to the caller's callback as the command's
    stdout."""
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        seen: list[bytes] = []
        with pytest.raises(CommandExecutionFailed, match="no-such-tool"):
            await sb.execute_command(["no-such-tool"], on_stdout=seen.append)
        assert seen == []
        assert split_engine.connections


async def test_output_in_pieces_keeps_its_streams_and_order(
        split_engine: SplittingProxy) -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        r = await sb.execute_command(
            "echo out1; sleep 0.1; echo err1 >&2; sleep 0.1; printf out2; sleep 0.1; "
            "echo err2 >&2; exit 3")
        assert r.exit_code == 3
        assert r.stdout == "out1\nout2" and r.stderr == "err1\nerr2\n"
        assert r.combined == "out1\nerr1\nout2err2\n"
