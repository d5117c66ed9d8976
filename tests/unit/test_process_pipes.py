"""`sandbox.process._pipes.OutputPipes` over real pipes and a pseudo-terminal: both streams in
arrival order, the end, the bound on what waits unread (output is hostile), close."""

from __future__ import annotations

import asyncio
import os

import pytest

from sandbox.process._pipes import CHUNK, LIMIT, OutputPipes


async def _drain(pipes: OutputPipes) -> list[tuple[str, bytes]]:
    got: list[tuple[str, bytes]] = []
    while (chunk := await pipes.read()) is not None:
        got.append(chunk)
    return got


@pytest.mark.asyncio
async def test_both_streams_in_order_then_the_end() -> None:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = OutputPipes(asyncio.get_running_loop(), {"stdout": out_r, "stderr": err_r})
    os.write(out_w, b"one")
    await asyncio.sleep(0.01)
    os.write(err_w, b"two")
    os.close(out_w)
    os.close(err_w)
    assert await _drain(pipes) == [("stdout", b"one"), ("stderr", b"two")]
    assert await pipes.read() is None
    with pytest.raises(OSError):  # closed at their end
        os.fstat(out_r)


@pytest.mark.asyncio
async def test_what_waits_unread_is_bounded() -> None:
    """A flood nobody reads stops at LIMIT (+ one read) queued; the rest stays in the pipe,
    blocking its writer; reading resumes it and every byte arrives once."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    pipes = OutputPipes(asyncio.get_running_loop(), {"stdout": read_end})
    written = 0
    for _ in range(200):
        try:
            written += os.write(write_end, b"x" * 4096)
        except BlockingIOError:
            await asyncio.sleep(0.005)  # the loop reads what it may
    queued = sum(len(data) for _, data in pipes._chunks)
    assert LIMIT <= queued < LIMIT + CHUNK
    assert written < 200 * 4096  # the writer was held back
    os.set_blocking(write_end, True)
    total = 0

    async def write_rest() -> None:
        await asyncio.to_thread(os.write, write_end, b"y" * (200 * 4096 - written))
        os.close(write_end)

    writer = asyncio.ensure_future(write_rest())
    for _, data in await _drain(pipes):
        total += len(data)
    await writer
    assert total == 200 * 4096


@pytest.mark.asyncio
async def test_a_terminal_ends_with_eio_and_close_ends_a_wait() -> None:
    master, slave = os.openpty()
    pipes = OutputPipes(asyncio.get_running_loop(), {"stdout": master})
    os.write(slave, b"hi\n")
    await asyncio.sleep(0.01)
    os.close(slave)  # the master then reads EIO
    got = b"".join(data for _, data in await _drain(pipes))
    assert got.replace(b"\r", b"") == b"hi\n"
    read_end, write_end = os.pipe()
    pipes = OutputPipes(asyncio.get_running_loop(), {"stderr": read_end})
    waiting = asyncio.ensure_future(pipes.read())
    await asyncio.sleep(0.01)
    pipes.close()
    assert await waiting is None
    pipes.close()  # idempotent
    os.close(write_end)


@pytest.mark.asyncio
async def test_one_pipe_ending_leaves_the_reader_asleep_until_the_other_does() -> None:
    """An end of file on one pipe while the other is open gives the reader nothing: its wait
    is not woken (once per command: it would only wait again), the other's end is."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = OutputPipes(asyncio.get_running_loop(), {"stdout": out_r, "stderr": err_r})
    reading = asyncio.ensure_future(pipes.read())
    await asyncio.sleep(0.01)
    waiting = pipes._waiter
    assert waiting is not None
    os.close(out_w)
    await asyncio.sleep(0.01)
    assert pipes._waiter is waiting and not waiting.done()  # the same wait, not woken
    os.close(err_w)
    assert await reading is None


def _counting_add_reader(loop: asyncio.AbstractEventLoop) -> list[int]:
    added: list[int] = []
    add = loop.add_reader

    def counting(fd: int, callback: object, *args: object) -> None:
        added.append(fd)
        add(fd, callback, *args)  # type: ignore[arg-type]
    loop.add_reader = counting  # type: ignore[method-assign]
    return added


@pytest.mark.asyncio
async def test_an_ended_commands_pipes_are_taken_without_the_loop() -> None:
    """`take_ended`: pipes at their end are read and closed with no reader ever added;
    one still held open (a background job) is watched, and what comes later arrives."""
    loop = asyncio.get_running_loop()
    added = _counting_add_reader(loop)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = OutputPipes(loop, {"stdout": out_r, "stderr": err_r}, watch=False)
    os.write(out_w, b"one")
    os.write(err_w, b"two")
    os.close(out_w)
    os.close(err_w)
    pipes.take_ended()
    assert added == []
    assert await _drain(pipes) == [("stdout", b"one"), ("stderr", b"two")]
    with pytest.raises(OSError):  # closed at their end
        os.fstat(out_r)

    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pipes = OutputPipes(loop, {"stdout": out_r, "stderr": err_r}, watch=False)
    os.write(out_w, b"early")
    os.close(err_w)
    pipes.take_ended()
    assert added == [out_r]  # only the one still open
    assert await pipes.read() == ("stdout", b"early")
    os.write(out_w, b"late")
    os.close(out_w)
    assert await _drain(pipes) == [("stdout", b"late")]


@pytest.mark.asyncio
async def test_taking_an_ended_commands_pipes_is_bounded_too() -> None:
    """More than LIMIT left in a (widened) pipe: `take_ended` stops at LIMIT + one read,
    the rest is read as the consumer takes; every byte arrives once."""
    import fcntl

    read_end, write_end = os.pipe()
    size = fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4 * LIMIT)
    data = b"z" * min(size, 3 * LIMIT)
    assert os.write(write_end, data) == len(data)
    os.close(write_end)
    pipes = OutputPipes(asyncio.get_running_loop(), {"stdout": read_end}, watch=False)
    pipes.take_ended()
    queued = sum(len(chunk) for _, chunk in pipes._chunks)
    assert LIMIT <= queued < LIMIT + CHUNK
    got = await _drain(pipes)
    assert b"".join(chunk for _, chunk in got) == data


@pytest.mark.asyncio
async def test_unwatched_pipes_are_read_once_watched() -> None:
    out_r, out_w = os.pipe()
    pipes = OutputPipes(asyncio.get_running_loop(), {"stdout": out_r}, watch=False)
    os.write(out_w, b"x")
    await asyncio.sleep(0.01)
    assert not pipes._chunks  # not watched: nothing read
    pipes.watch()
    os.close(out_w)
    assert await _drain(pipes) == [("stdout", b"x")]
