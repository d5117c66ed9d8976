"""`sandbox.docker._direct`: the exec's calls spoken on a Unix socket, against a scripted
server (the engine's side is pure protocol; tests/integration run it against the real one)."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from sandbox._errors import EngineUnavailable, SandboxError
from sandbox.docker import _direct
from sandbox.docker._engine_errors import EngineConflict, EngineError, EngineNotFound

pytestmark = pytest.mark.asyncio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
UPGRADED = (b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
            b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n")


def frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


class Server:
    """A Unix socket whose every connection runs ``handler``; records the requests' heads."""

    def __init__(self, path: Path, handler: Handler) -> None:
        self.path, self.handler = path, handler
        self.requests: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            self.requests.append(head + await reader.readexactly(length))
            await self.handler(reader, writer)
        finally:
            writer.close()


@pytest_asyncio.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> Server:
        server = Server(tmp_path / f"s{len(servers)}.sock", handler)
        servers.append(await asyncio.start_unix_server(server._serve, str(server.path)))
        return server

    yield start
    for s in servers:
        s.close()
        await s.wait_closed()


def answer(*chunks: bytes) -> Handler:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(0)
    return handler


async def read_all(stream: _direct.HijackedStream) -> list[tuple[int, bytes]]:
    got = []
    while (piece := await stream.read_out()) is not None:
        got.append(piece)
    return got


def joined(pieces: list[tuple[int, bytes]]) -> dict[int, bytes]:
    out: dict[int, bytes] = {1: b"", 2: b""}
    for kind, data in pieces:
        out[kind] += data
    return out


async def attach(server: Server, *, tty: bool = False) -> _direct.HijackedStream:
    return await _direct.open_hijacked(str(server.path), "/v1.41/exec/x/start", b"{}", tty=tty,
                                       action="attach", address="unix://test")


async def test_frames_split_at_every_byte_arrive_whole_and_in_order(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    wire = UPGRADED + frame(1, b"out one\n") + frame(2, b"err\n") + frame(0, b"") + \
        frame(1, b"out two")
    server = await serve(answer(*(wire[i:i + 1] for i in range(len(wire)))))
    stream = await attach(server)
    got = await read_all(stream)
    stream.close_now()
    assert joined(got) == {1: b"out one\nout two", 2: b"err\n"}
    assert [k for k, _ in got if k == 2] and got[-1][0] == 1
    head = server.requests[0]
    assert head.startswith(b"POST /v1.41/exec/x/start HTTP/1.1\r\n")
    assert b"Upgrade: tcp" in head and head.endswith(b"\r\n\r\n{}")


async def test_frames_after_the_head_in_the_same_read(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    server = await serve(answer(UPGRADED + frame(1, b"a") + frame(2, b"b") + frame(1, b"c")))
    stream = await attach(server)
    assert joined(await read_all(stream)) == {1: b"ac", 2: b"b"}
    stream.close_now()


async def test_a_terminal_is_raw_bytes(serve: Callable[[Handler], Awaitable[Server]]) -> None:
    server = await serve(answer(UPGRADED + b"\x01\x00\x00\x00\x00\x00\x00\x05raw"))
    stream = await attach(server, tty=True)
    assert joined(await read_all(stream)) == {1: b"\x01\x00\x00\x00\x00\x00\x00\x05raw",
                                              2: b""}
    stream.close_now()


async def test_a_huge_frame_header_allocates_nothing_and_reading_pauses(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    """A frame claiming 4 GiB is handed on in the pieces that came; unread output past the
    pause bound stops the reading (the sender then blocks) instead of growing the queue."""
    sent = asyncio.Event()
    blob = b"x" * (1 << 20)

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED + struct.pack(">BxxxL", 1, 0xFFFFFFFF))
        for _ in range(16):
            writer.write(blob)
        sent.set()
        await writer.drain()

    server = await serve(handler)
    stream = await attach(server)
    first = await stream.read_out()
    assert first is not None and first[0] == 1 and 0 < len(first[1]) <= 1 << 20
    protocol = stream._p
    for _ in range(400):  # until the queue is past the bound (at once idle; slower loaded)
        if protocol.paused:
            break
        await asyncio.sleep(0.025)
    await asyncio.sleep(0.1)  # and the reading stays paused: nothing more is queued
    assert protocol.paused and protocol.queued < 4 << 20  # not the 16 MiB sent
    total = len(first[1]) + sum(len(d) for _, d in list(protocol.queue))
    while total < 16 << 20:
        piece = await stream.read_out()
        assert piece is not None and piece[0] == 1
        total = total + len(piece[1]) if piece else total
        assert protocol.queued <= (1 << 16) + (256 << 10)
    stream.close_now()


@pytest.mark.parametrize(("status", "kind"), [(404, EngineNotFound), (409, EngineConflict),
                                              (500, EngineError)])
async def test_an_error_answer_is_its_typed_error(serve: Callable[[Handler], Awaitable[Server]],
                                                  status: int, kind: type[EngineError]) -> None:
    body = json.dumps({"message": f"no such exec {status}"}).encode()
    server = await serve(answer(
        f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode(), body))
    with pytest.raises(kind) as raised:
        await attach(server)
    assert raised.value.status == status and raised.value.details == f"no such exec {status}"
    assert type(raised.value) is kind and raised.value.retryable is (status >= 500)


async def test_a_chunked_error_answer(serve: Callable[[Handler], Awaitable[Server]]) -> None:
    server = await serve(answer(b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n",
                                b"a\r\n{\"message\"\r\n", b"b\r\n: \"paused\"}\r\n0\r\n\r\n"))
    with pytest.raises(EngineConflict) as raised:
        await attach(server)
    assert raised.value.details == "paused"


async def test_an_answer_cut_short_is_a_lost_connection(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    server = await serve(answer(b"HTTP/1.1 404 Not Found\r\nContent-Length: 100\r\n\r\n{\"mes"))
    with pytest.raises(EngineUnavailable, match="lost the connection"):
        await attach(server)
    server = await serve(answer(b"HTTP/1.1 101 UPGR"))
    with pytest.raises(EngineUnavailable, match="lost the connection"):
        await attach(server)


async def test_a_malformed_chunked_answer_is_refused(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    server = await serve(answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                b"5\r\n{\"Exit\r\n0\r\n\r\n"))
    with pytest.raises(EngineUnavailable, match="malformed"):
        await _direct.call_json(str(server.path), "GET", "/x", action="inspect",
                                address="unix://test")


async def test_no_socket_is_no_engine(tmp_path: Path) -> None:
    with pytest.raises(EngineUnavailable, match="no Docker engine answers at unix://test"):
        await _direct.call_json(str(tmp_path / "none.sock"), "GET", "/v1.41/exec/x/json",
                                action="inspect", address="unix://test")


@pytest.mark.parametrize("wire", [
    [b"HTTP/1.1 200 OK\r\nContent-Length: 26\r\n\r\n", b'{"ExitCode": 3, "Pid": 7}\n'],
    [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n{\"Exi",
     b"t\r\n13\r\nCode\": 3, \"Pid\": 7}\r\n0\r\n\r\n"],
    [b"HTTP/1.1 200 OK\r\n\r\n{\"ExitCode\": 3, ", b"\"Pid\": 7}"],  # to the close
    # Both: the chunks say where it ends (RFC 9112 6.3), not the length.
    [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
     b"19\r\n{\"ExitCode\": 3, \"Pid\": 7}\r\n0\r\n\r\n"],
])
async def test_call_json_reads_every_body_kind(serve: Callable[[Handler], Awaitable[Server]],
                                               wire: list[bytes]) -> None:
    server = await serve(answer(*wire))
    got = await _direct.call_json(str(server.path), "GET", "/v1.41/exec/x/json",
                                  action="inspect", address="unix://test")
    assert got == {"ExitCode": 3, "Pid": 7}
    assert server.requests[0].startswith(b"GET /v1.41/exec/x/json HTTP/1.1\r\n")
    assert b"Connection: close" in server.requests[0]


async def test_a_cancelled_call_closes_its_connection(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    asked, closed = asyncio.Event(), asyncio.Event()

    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        asked.set()
        await reader.read()  # returns once the client's side is gone
        closed.set()

    server = await serve(never)
    task = asyncio.ensure_future(_direct.call_json(
        str(server.path), "GET", "/x", action="inspect", address="unix://test"))
    await asyncio.wait_for(asked.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(closed.wait(), 5)


async def test_stdin_and_its_half_close_reach_the_engine(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED)
        data = await reader.read()  # to the half-close
        writer.write(frame(1, data))
        await writer.drain()

    server = await serve(echo)
    stream = await attach(server)
    await stream.write_in(b"hello ")
    await stream.write_in(b"stdin")
    stream.write_eof()
    assert joined(await read_all(stream))[1] == b"hello stdin"
    stream.close_now()
    with pytest.raises(EngineUnavailable):
        await stream.write_in(b"late")


async def test_a_broken_stream_is_a_lost_connection(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED + frame(1, b"partial"))
        await writer.drain()
        writer.transport.abort()

    server = await serve(reset)
    stream = await attach(server)
    got = []
    try:
        while (piece := await stream.read_out()) is not None:
            got.append(piece)
    except EngineUnavailable:
        pass
    assert joined(got)[1] == b"partial"
    stream.close_now()


async def test_a_client_closed_under_the_stream_ends_it(serve: Callable[
        [Handler], Awaitable[Server]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller closing their client ends the stream (within the check's second) with the
    error aiohttp's own connections give, not a command read to its end."""
    monkeypatch.setattr(_direct, "_CLIENT_CHECK", 0.05)

    async def quiet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED + frame(1, b"before"))
        await reader.read()

    server = await serve(quiet)
    closed = [False]
    stream = await _direct.open_hijacked(str(server.path), "/x", b"{}", tty=False,
                                         action="attach", address="unix://test",
                                         client_closed=lambda: closed[0])
    assert await stream.read_out() == (1, b"before")
    await asyncio.sleep(0.2)  # checked, still open
    assert not stream._p.ended
    closed[0] = True
    with pytest.raises(SandboxError, match="read the command's output: the aiodocker client "
                       "was closed"):
        await asyncio.wait_for(stream.read_out(), 5)
    stream.close_now()


async def test_a_connection_closed_before_anyone_waits_logs_nothing() -> None:
    """A connect cancelled once its transport existed closes it with nobody awaiting the
    answer: that error is no one's, and must not be logged as never retrieved."""
    import gc

    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        protocol = _direct._Protocol(tty=False, upgrade=True)
        protocol.connection_lost(None)
        assert protocol.head.done()
        del protocol
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert seen == []


# -- the review's findings (each failed before its fix) --------------------------------------


async def test_a_small_frame_split_across_reads_comes_whole(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    """aiodocker handed on whole frames, and `read_start_failure` needs the engine's one-line
    message whole (one CRLF line): a frame of up to 64 KiB split across reads (a partial
    write, a proxy) is gathered, not handed on in pieces."""
    message = frame(1, b"OCI runtime exec failed: exec failed: unable to start container "
                       b"process: exec: \"nope\": executable file not found in $PATH\r\n")

    async def split(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED + message[:20])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(message[20:60])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(message[60:] + frame(2, b"e" * 70000))
        await writer.drain()

    server = await serve(split)
    stream = await attach(server)
    got = await read_all(stream)
    stream.close_now()
    assert got[0] == (1, message[8:])
    assert joined(got)[2] == b"e" * 70000


async def test_a_frame_over_the_gathering_bound_still_comes_in_pieces(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    big = frame(1, b"x" * (1 << 20))

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED + big[:1000])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(big[1000:])
        await writer.drain()

    server = await serve(slow)
    stream = await attach(server)
    first = await stream.read_out()
    assert first == (1, b"x" * 992)  # handed on before the rest came
    assert joined(await read_all(stream))[1] == b"x" * ((1 << 20) - 992)
    stream.close_now()


async def test_a_socket_nobody_listens_on_is_no_engine(tmp_path: Path) -> None:
    """Connect failures say what aiodocker's path said (`_gateway._engine_error`): no engine,
    and how to start one; a refused connect is not "lost the connection"."""
    import socket

    path = tmp_path / "dead.sock"
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))  # bound, never listening: ECONNREFUSED (a dead engine's socket)
    try:
        with pytest.raises(EngineUnavailable, match="no Docker engine answers at unix://t; "
                           "is Docker installed and running") as raised:
            await _direct.call_json(str(path), "GET", "/x", action="inspect", address="unix://t")
        assert raised.value.retryable
    finally:
        sock.close()


async def test_a_permission_denied_socket_says_so(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    async def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(asyncio.get_running_loop(), "create_unix_connection", denied)
    with pytest.raises(EngineUnavailable, match=r"permission denied on the Docker engine.s "
                       "socket at unix://t: .*docker group") as raised:
        await _direct.open_hijacked(str(tmp_path / "s"), "/x", b"{}", tty=False,
                                    action="attach", address="unix://t")
    assert not raised.value.retryable


@pytest.mark.parametrize("upgrade", [False, True])
async def test_an_informational_answer_before_the_answer_is_skipped(serve: Callable[
        [Handler], Awaitable[Server]], upgrade: bool) -> None:
    body = b'{"ExitCode": 0}'
    final = UPGRADED + frame(1, b"up") if upgrade else \
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    server = await serve(answer(b"HTTP/1.1 100 Continue\r\n\r\n",
                                b"HTTP/1.1 102 Processing\r\nX: y\r\n\r\n" + final))
    if upgrade:
        stream = await attach(server)
        assert joined(await read_all(stream))[1] == b"up"
        stream.close_now()
    else:
        assert await _direct.call_json(str(server.path), "GET", "/x", action="inspect",
                                       address="unix://t") == {"ExitCode": 0}


async def test_a_chunked_body_is_decoded_as_it_comes() -> None:
    """A long inspect (an argv near ARG_MAX, escaped) comes chunked in many reads: each read
    decodes only what it brought, rather than every byte so far again (quadratic: seconds of
    a blocked loop for a few MiB in small reads)."""
    p = _direct._Protocol(tty=False, upgrade=False)
    p.data_received(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    payload = json.dumps({"ProcessConfig": {"arguments": ["x" * 4000] * 200}}).encode()
    wire = b"".join(b"%x\r\n%s\r\n" % (len(payload[i:i + 4096]), payload[i:i + 4096])
                    for i in range(0, len(payload), 4096)) + b"0\r\n\r\n"
    for i in range(0, len(wire), 1000):
        assert not p.head.done()
        p.data_received(wire[i:i + 1000])
        assert len(p._buf) <= 4096 + 16  # the undecoded rest: less than a chunk
    assert p.head.done() and p.body == payload


async def test_a_closed_client_is_refused_before_any_call(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    """As aiodocker's path did: an exec after the caller closed their client (``docker=``)
    fails saying so, rather than going on through the socket (and a stream then cut a second
    later by the check that the client is open)."""
    import aiodocker

    from sandbox.docker._gateway import Engine

    created = b'{"Id":"e1"}'
    server = await serve(answer(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s"
                                % (len(created), created)))
    docker = aiodocker.Docker(url=f"unix://{server.path}", api_version="v1.41")
    engine = Engine(docker)
    assert await engine.create_exec("run it", "c1", {"Cmd": ["true"]}) == "e1"  # direct
    assert server.requests[0].startswith(b"POST /v1.41/containers/c1/exec HTTP/1.1")
    await docker.close()
    with pytest.raises(SandboxError, match="run it: the aiodocker client was closed"):
        await engine.create_exec("run it", "c1", {"Cmd": ["true"]})
    with pytest.raises(SandboxError, match="client was closed"):
        await engine.attach_exec("attach", "e1")
    with pytest.raises(SandboxError, match="client was closed"):
        await engine.inspect_exec("e1")
    assert len(server.requests) == 1


async def test_a_closed_connection_leaves_nothing_to_the_garbage_collector(serve: Callable[
        [Handler], Awaitable[Server]]) -> None:
    """Three connections per exec: asyncio's selector transport keeps a bound method of
    itself (``_read_ready_cb``), a cycle that left each one (socket, transport, its extras:
    5 objects, 15 per exec, 3x aiodocker's pooled path) to the collector. Freed when its
    connection ends instead."""
    import gc

    body = b'{"ExitCode": 0}'
    server = await serve(answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                                % (len(body), body)))
    stream_server = await serve(answer(UPGRADED + frame(1, b"x")))
    await _direct.call_json(str(server.path), "GET", "/x", action="i", address="unix://t")
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            await _direct.call_json(str(server.path), "GET", "/x", action="i",
                                    address="unix://t")
            stream = await attach(stream_server)
            assert await read_all(stream) == [(1, b"x")]
            stream.close_now()
        await asyncio.sleep(0.05)  # the closes' callbacks
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = {str(server.path), str(stream_server.path)}  # the client's side's peer
        left = [o for o in gc.garbage if isinstance(o, asyncio.Transport)
                and o.get_extra_info("peername") in ours]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not left, f"{len(left)} of our 10 connections were left to the collector"


async def test_a_cancel_while_reading_or_writing_leaves_no_connection(
        serve: Callable[[Handler], Awaitable[Server]]) -> None:
    """Cancelled while waiting for output or for the engine to take stdin: the stream stays
    usable, and its close leaves nothing open (nor anything for a ResourceWarning)."""
    import gc

    # Reading and writing: an engine that sends nothing and never reads stdin.
    async def deaf(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(UPGRADED)
        await writer.drain()
        await asyncio.sleep(30)

    server = await serve(deaf)
    stream = await attach(server)
    reading = asyncio.ensure_future(stream.read_out())
    await asyncio.sleep(0.05)
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert stream._p.waiter is None
    writing = asyncio.ensure_future(stream.write_in(b"x" * (16 << 20)))
    await asyncio.sleep(0.1)
    assert not writing.done()  # the socket's buffers are full: it waits for the engine
    writing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await writing
    transport = stream._p.transport
    assert transport is not None
    stream.close_now()
    await asyncio.sleep(0.01)
    assert transport.is_closing() and transport.get_extra_info("socket").fileno() == -1
    with pytest.raises(EngineUnavailable):
        await stream.write_in(b"late")
    assert await stream.read_out() is None
    gc.collect()
