"""An exec's hot path spoken straight over a local engine's Unix socket, and the attach
stream's interface (`ExecStream`).

An exec is three calls: create it (JSON), start it attached, and read its exit code (JSON).
The start's answer hands the socket over ("101 UPGRADED"): from then on the command's output
comes as frames (an 8-byte header: stream, three zero bytes, big-endian length; a terminal's
raw bytes without) and its stdin goes the other way. aiohttp's request machinery and
aiodocker's layers around the three cost 2.0 ms of client CPU per exec on the bench machine,
these 0.9 (docs/performance.md, round 11). Each call opens a connection of its own and closes
it with the answer (``Connection: close``): nothing is pooled, so nothing outlives its call
or its stream. Only the gateway calls this, for a local engine (`Engine.create_exec`,
`Engine.attach_exec`, `Engine.attach_output`, `Engine.inspect_exec`); every other call, and a
remote engine's, stays with aiodocker.

The engine is trusted to speak HTTP; the frames' payloads are the sandbox's and only ever
bytes to hand on. A frame longer than `_WHOLE` is handed on as it arrives, in pieces, so a
frame header claiming 4 GiB allocates nothing: what is held is bounded by the reading pause
(`_PAUSE_AT`); a shorter one whole, as aiodocker did (the engine's start failure is one frame,
`_exec.read_start_failure` reads it whole, and a partial write or a proxy can split it).
"""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, Self

from .._errors import EngineUnavailable, SandboxError
from ._engine_errors import answer_error, lost, unreachable

__all__ = ["ExecStream", "HijackedStream", "call_json", "open_hijacked"]

#: Queued output past which the socket is no longer read (the engine then stops reading the
#: command's pipes and the command blocks on a full pipe, as with aiodocker's 64 KiB queue).
_PAUSE_AT = 1 << 16
#: Seconds between checks that the caller's client is still open, while a stream is.
_CLIENT_CHECK = 1.0
#: The longest response head or error body read before giving up on the answer.
_MAX_HEAD = 1 << 16
#: The longest frame handed on whole (gathered when it comes in pieces); longer: in pieces.
_WHOLE = 1 << 16


class _ClientClosed(Exception):
    """The caller closed the client while the stream was open."""


class ExecStream(Protocol):
    """One exec's attach connection: read its output, write and half-close its stdin. An
    async context manager (or `close`); errors come as SDK errors (`EngineUnavailable`)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None: ...

    async def read_out(self, action: str = ...) -> tuple[int, bytes] | None:
        """The next output as (1 for stdout or 2 for stderr, data), or None at the end."""

    async def write_in(self, data: bytes, action: str = ...) -> None:
        """Send bytes to the command's stdin (waits while the socket's buffer is full)."""

    def write_eof(self) -> None:
        """Half-close: the command reads EOF on stdin; its output keeps coming."""

    async def close(self) -> None:
        """Close the connection; stdin the engine never took is dropped."""

    def close_now(self) -> None:
        """`close` without an await (nothing to shield in a ``finally``)."""


class _Protocol(asyncio.Protocol):
    """Reads the answer's head, then (``upgrade``, handed over) the frames into a queue the
    stream reads, or else its body (`body`): `head` is done when either is ready."""

    def __init__(self, tty: bool, upgrade: bool) -> None:
        self.tty = tty
        self.upgrade = upgrade
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.head: asyncio.Future[None] = loop.create_future()
        self.status = 0
        self._buf = bytearray()  # the head, then a partial frame header
        self._headed = False
        self._body_mode: tuple[int, bool] | None = None  # (length or -1: to EOF, chunked)
        self.body: bytes | None = None  # the answer's body, when it was not handed over
        self._kind = 1  # the stream of the frame being read
        self._left = 0  # its bytes still to come
        self._part: bytearray | None = None  # a frame of up to _WHOLE bytes, gathered
        self._out = bytearray()  # a chunked body's bytes decoded so far
        self.queue: collections.deque[tuple[int, bytes]] = collections.deque()
        self.queued = 0
        self.ended = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.drain: asyncio.Future[None] | None = None
        self.write_paused = False

    # -- asyncio's calls ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self._headed:
            self._buf += data
            self._read_head()
            return
        if self.tty:
            if data:
                self._put(1, data)
            return
        self._frames(data)

    def eof_received(self) -> bool | None:
        # The engine half-closed: the output ended. Ending it now (not at connection_lost,
        # which waits for unsent stdin to drain) is what a command that left stdin unread
        # needs (engine notes, "exec"); the transport then closes itself.
        if not self._headed:
            self._read_head(eof=True)
        self._end(None)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._headed and exc is None:
            self._read_head(eof=True)
        if not self._headed:
            self._fail_head(exc or ConnectionResetError(
                "the engine closed the connection before answering"))
        self._end(exc)
        drain, self.drain = self.drain, None
        if drain is not None and not drain.done():
            drain.set_exception(exc or ConnectionResetError("the connection is closed"))
        # asyncio's selector transport holds a bound method of itself (``_read_ready_cb``,
        # unused once closed): a cycle that left each connection (3 per exec) to the
        # garbage collector. Freed by its count instead.
        state = getattr(self.transport, "__dict__", None)
        if state is not None and "_read_ready_cb" in state:
            state["_read_ready_cb"] = _nothing

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        drain, self.drain = self.drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # -- the answer --------------------------------------------------------------------------

    def _read_head(self, eof: bool = False) -> None:
        """Parse the status line once the head is in; the rest is frames, or the body."""
        if self._body_mode is not None:
            self._read_body(eof)
            return
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD or eof:
                self._fail_head(ConnectionResetError(
                    "the engine's answer had no end of its head"))
            return
        head = bytes(buf[:end]).decode("latin-1")
        rest = bytes(buf[end + 4:])
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self._fail_head(ConnectionResetError(f"the engine answered {lines[0][:80]!r}"))
            return
        if 100 <= self.status < 200 and not (self.upgrade and self.status == 101):
            self._buf = bytearray(rest)  # informational (100 Continue): the answer follows
            self._read_head(eof)
            return
        if self.upgrade and self.status in (101, 200):
            self._headed = True
            self._buf = bytearray()
            if not self.head.done():
                self.head.set_result(None)
            if rest:
                self.data_received(rest)
            return
        length, chunked = -1, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length" and value.strip().isdigit():
                length = int(value.strip())
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        self._body_mode = (length, chunked)
        self._buf = bytearray(rest)
        self._read_body(eof)

    def _read_body(self, eof: bool) -> None:
        """Hand the body on once it is all in (by its length, its last chunk or the EOF)."""
        assert self._body_mode is not None
        length, chunked = self._body_mode
        buf = self._buf
        body: bytes | None = None
        if chunked:
            try:
                body = _dechunk(buf, self._out)
            except ValueError as exc:
                self._fail_head(ConnectionResetError(f"a malformed chunked answer: {exc}"))
                return
        elif length >= 0:
            body = bytes(buf[:length]) if len(buf) >= length else None
        if body is None and eof:
            if chunked or length >= 0:  # cut short: not an answer to act on
                self._fail_head(ConnectionResetError(
                    "the engine closed the connection in the middle of its answer"))
                return
            body = bytes(buf)
        if body is None:
            return
        self._headed = True  # nothing more is parsed
        self.body = body
        if not self.head.done():
            self.head.set_result(None)

    def _fail_head(self, exc: BaseException) -> None:
        self._headed = True  # nothing more is parsed
        if not self.head.done():
            self.head.set_exception(exc)
            # Marked as seen: a connect cancelled after the transport was made closes it with
            # nobody awaiting `head` (asyncio would log the error as never retrieved).
            self.head.exception()
        if self.transport is not None:
            self.transport.abort()

    # -- the frames --------------------------------------------------------------------------

    def _frames(self, data: bytes) -> None:
        """Hand on each frame: whole up to `_WHOLE` bytes (gathered if it comes in pieces),
        a longer one in the pieces that come (never waited for)."""
        view = memoryview(data)
        at, size = 0, len(data)
        while at < size:
            if self._left:
                take = min(self._left, size - at)
                self._left -= take
                if (part := self._part) is None:
                    self._put(self._kind, bytes(view[at:at + take]) if take < size else data)
                else:
                    part += view[at:at + take]
                    if not self._left:
                        self._part = None
                        self._put(self._kind, bytes(part))
                at += take
                continue
            need = 8 - len(self._buf)
            self._buf += view[at:at + need]
            at += min(need, size - at)
            if len(self._buf) < 8:
                return
            header = self._buf
            self._kind = header[0]
            self._left = int.from_bytes(header[4:8], "big")
            self._buf = bytearray()
            if self._left <= _WHOLE and self._left > size - at:
                self._part = bytearray()  # a short frame not all here: gather it

    def _put(self, kind: int, data: bytes) -> None:
        self.queue.append((kind, data))
        self.queued += len(data)
        if self.queued > _PAUSE_AT and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def _end(self, exc: BaseException | None) -> None:
        if not self.ended:
            self.ended = True
            if self._part:  # a frame cut short: what came of it
                self.queue.append((self._kind, bytes(self._part)))
                self.queued += len(self._part)
            self._part = None
            if exc is not None:
                self.error = exc
            self._wake()

    def _wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _nothing() -> None:
    """A closed transport's read callback (see `_Protocol.connection_lost`)."""


def _dechunk(data: bytearray, out: bytearray) -> bytes | None:
    """Move the whole chunks at ``data``'s start into ``out``: the body's bytes once its last
    chunk came, else None. Each byte is decoded once, as it comes: decoding all so far again
    at each read was quadratic (a long exec's inspect, chunked, in many reads). ValueError:
    not a chunked body."""
    while True:
        end = data.find(b"\r\n", 0, 4096)
        if end < 0:
            if len(data) >= 4096:
                raise ValueError("no chunk size")
            return None
        size = int(data[:end].split(b";")[0], 16)  # ValueError: not a size
        if size == 0:
            return bytes(out)
        if len(data) < end + 2 + size + 2:
            return None
        if data[end + 2 + size:end + 4 + size] != b"\r\n":
            raise ValueError("a chunk longer than its size")
        out += memoryview(data)[end + 2:end + 2 + size]
        del data[:end + 4 + size]


class HijackedStream:
    """`ExecStream` over `_Protocol` (see the module); unsent stdin is discarded at the close,
    not lingered over."""

    def __init__(self, protocol: _Protocol, address: str,
                 client_closed: Callable[[], bool] | None = None) -> None:
        self._p = protocol
        self._address = address
        self._client_closed = client_closed
        self._timer: asyncio.TimerHandle | None = None
        if client_closed is not None:
            self._timer = protocol.loop.call_later(_CLIENT_CHECK, self._check_client)

    def _check_client(self) -> None:
        """End the stream once the caller closed the client under it (as aiohttp's close
        ends its own connections): this connection is not the client's to close."""
        p = self._p
        if p.ended or self._client_closed is None:
            return
        if not self._client_closed():
            self._timer = p.loop.call_later(_CLIENT_CHECK, self._check_client)
            return
        p._end(_ClientClosed())
        if p.transport is not None:
            p.transport.abort()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close_now()

    def _lost(self, action: str, exc: BaseException | None) -> EngineUnavailable:
        return _lost(action, self._address, exc)

    async def read_out(self, action: str = "read the command's output") -> \
            tuple[int, bytes] | None:
        """The next piece of output as (1 stdout or 2 stderr, bytes); None at the end."""
        p = self._p
        while not p.queue:
            if p.ended:
                if isinstance(p.error, _ClientClosed):
                    raise SandboxError(f"{action}: the aiodocker client was closed",
                                       details="a client passed as docker= must stay open "
                                       "until cleanup")
                if p.error is not None:
                    raise self._lost(action, p.error)
                return None
            waiter = p.waiter = p.loop.create_future()
            try:
                await waiter
            finally:
                if p.waiter is waiter:
                    p.waiter = None
        kind, data = p.queue.popleft()
        p.queued -= len(data)
        if p.paused and p.queued <= _PAUSE_AT and p.transport is not None:
            p.paused = False
            if not p.transport.is_closing():
                p.transport.resume_reading()
        return (2 if kind == 2 else 1), data

    async def write_in(self, data: bytes, action: str = "write to the command's stdin") -> None:
        """Send bytes to the command's stdin; waits while the socket's buffer is full."""
        p = self._p
        transport = p.transport
        if transport is None or transport.is_closing():
            raise self._lost(action, None)
        transport.write(data)
        if p.write_paused:
            drain = p.drain
            if drain is None or drain.done():
                drain = p.drain = p.loop.create_future()
            try:
                await drain
            except ConnectionError as exc:
                raise self._lost(action, exc) from exc

    def write_eof(self) -> None:
        """Half-close: the command reads EOF on stdin; its output keeps coming."""
        transport = self._p.transport
        if transport is not None and transport.can_write_eof() and not transport.is_closing():
            transport.write_eof()

    async def close(self) -> None:
        self.close_now()

    def close_now(self) -> None:
        """Drop the connection now; stdin the engine never took is discarded."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        p = self._p
        transport = p.transport
        if transport is None:
            return
        if transport.get_write_buffer_size():
            transport.abort()
        else:
            transport.close()
        p._end(None)


def _lost(action: str, address: str, exc: BaseException | None) -> EngineUnavailable:
    return lost(action, address, str(exc or "the connection is closed"), exc)


async def _ask(socket_path: str, request: bytes, *, tty: bool, upgrade: bool, action: str,
               address: str) -> tuple[asyncio.Transport, _Protocol]:
    """Connect, send ``request`` and wait for the answer's head (and body, unless it is
    handed over); any failure or cancellation aborts the connection. A failing socket is
    `EngineUnavailable`."""
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.create_unix_connection(
            lambda: _Protocol(tty, upgrade), socket_path)
    except OSError as exc:
        raise unreachable(action, address, denied=isinstance(exc, PermissionError),
                          details=str(exc), cause=exc) from exc
    try:
        transport.write(request)
        await protocol.head
    except BaseException as exc:
        transport.abort()
        if not protocol.head.done():
            protocol.head.cancel()
        if isinstance(exc, OSError):
            raise _lost(action, address, exc) from exc
        raise
    return transport, protocol


def _request(method: bytes, path: str, body: bytes, upgrade: bool) -> bytes:
    return b"".join((
        method, b" ", path.encode("ascii"), b" HTTP/1.1\r\nHost: docker\r\n"
        b"Content-Type: application/json\r\n",
        b"Connection: Upgrade\r\nUpgrade: tcp\r\n" if upgrade else b"Connection: close\r\n",
        b"Content-Length: ", str(len(body)).encode("ascii"), b"\r\n\r\n", body))


async def call_json(socket_path: str, method: str, path: str, body: bytes = b"", *,
                    action: str, address: str) -> Any:
    """One call on its own connection: the answer's JSON. An error answer raises its typed
    `EngineError`, a failing socket `EngineUnavailable`; a cancellation closes it."""
    transport, protocol = await _ask(
        socket_path, _request(method.encode("ascii"), path, body, False), tty=False,
        upgrade=False, action=action, address=address)
    transport.close()
    answer = protocol.body
    assert answer is not None
    if protocol.status >= 400:
        raise answer_error(protocol.status, _message(answer), action)
    return json.loads(answer)


async def open_hijacked(socket_path: str, path: str, body: bytes, *, tty: bool, action: str,
                        address: str,
                        client_closed: Callable[[], bool] | None = None) -> HijackedStream:
    """POST ``body`` to ``path`` (``/v1.41/exec/<id>/start``) and return the stream once the
    engine handed the connection over. Any other answer raises its typed `EngineError`, a
    failing socket `EngineUnavailable`; a cancellation closes the connection.
    ``client_closed``: whether the caller's client closed, checked each second while the
    stream is open (then it ends with a `SandboxError`)."""
    transport, protocol = await _ask(socket_path, _request(b"POST", path, body, True),
                                     tty=tty, upgrade=True, action=action, address=address)
    if protocol.body is not None:
        transport.close()
        raise answer_error(protocol.status, _message(protocol.body), action)
    return HijackedStream(protocol, address, client_closed)


def _message(body: bytes) -> str:
    """An error answer's ``message`` (its JSON's), else its text."""
    try:
        return str(json.loads(body)["message"])
    except (ValueError, KeyError, TypeError):
        return body.decode("utf-8", "replace").strip()[:1000]
