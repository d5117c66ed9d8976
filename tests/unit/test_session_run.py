"""A session command's state machine (`Run`) in milliseconds: markers in, how it ended out,
and the shared watchdog (`overdue`) woken by its end or by a callback that raised."""

from __future__ import annotations

import anyio
import pytest

from sandbox._process_base import overdue
from sandbox._session_run import Run, Shell
from sandbox._session_wire import MARK

pytestmark = pytest.mark.asyncio


def new_run(**kw: object) -> Run:
    options: dict[str, object] = {"max_output_bytes": 1 << 16, "on_stdout": None,
                                  "on_stderr": None, "keep_chars": 0,
                                  "stale_nonce": "", "cwd": "/start"}
    options.update(kw)
    return Run(Shell(1), **options)  # type: ignore[arg-type]


def mark(nonce: str, payload: bytes) -> bytes:
    return MARK + nonce.encode() + b":" + payload + b"\0"


async def test_both_end_markers_end_the_command_with_its_status_and_directory() -> None:
    seen: list[bytes] = []
    run = new_run(on_stdout=seen.append)
    end = mark(run.nonce, b"o" + run.token.encode() + b":/work")
    await run.feed("stdout", b"hello\n" + end[:5])  # a marker split across chunks
    await run.feed("stdout", end[5:])
    assert not run.done.is_set()  # stderr may still carry the command's output
    await run.feed("stderr", b"warn\n" + mark(run.nonce, b"e") + b"later")
    assert run.done.is_set() and run.wake.is_set()
    assert (run.status, run.cwd, run.forged, run.shell_lost) == (0, "/work", False, "")
    out = run.capture.output()
    assert (out.stdout, out.stderr) == (b"hello\n", b"warn\n") and seen == [b"hello\n"]


async def test_a_failure_is_said_by_its_number_and_a_success_needs_the_token() -> None:
    run = new_run()
    await run.feed("stdout", mark(run.nonce, b"x3:/w"))
    await run.feed("stderr", mark(run.nonce, b"e"))
    assert (run.status, run.forged) == (3, False)
    # A process that read the nonce off a shared stdout cannot say success without the token.
    run = new_run()
    await run.feed("stdout", mark(run.nonce, b"oguess:/w"))
    await run.feed("stderr", mark(run.nonce, b"e"))
    assert (run.status, run.forged) == (-1, True)


async def test_the_shell_exiting_ends_the_command_with_the_shell_status() -> None:
    run = new_run()
    await run.feed("stdout", b"bye\n" + mark(run.shell.nonce, b"q7"))
    await run.feed("stderr", mark(run.shell.nonce, b"Q"))
    assert run.done.is_set() and run.shell.exit_code == 7
    assert run.shell_lost == "the session's shell exited with code 7"


async def test_a_lost_shell_keeps_the_held_bytes_and_ends_once() -> None:
    run = new_run()
    await run.feed("stdout", b"partial" + MARK[:2])  # could begin a marker: held back
    assert run.capture.output().stdout == b"partial"
    run.shell_ended("the session's shell was lost")
    run.shell_ended("a second reason")
    assert run.done.is_set() and run.shell_lost == "the session's shell was lost"
    assert run.capture.output().stdout == b"partial" + MARK[:2]


async def test_a_callback_that_raises_wakes_the_watcher_and_is_not_called_again() -> None:
    calls: list[bytes] = []

    def boom(data: bytes) -> None:
        calls.append(data)
        raise ValueError("callback failed")

    run = new_run(on_stdout=boom)
    reasons: list[str] = []
    async with anyio.create_task_group() as tg:
        async def watch() -> None:
            reasons.append(await overdue(run.wake, run.t0, 3600, None,
                                         lambda: run.last_output, floor=0.005))
        tg.start_soon(watch)
        await run.feed("stdout", b"a")
        await run.feed("stdout", b"b")
    assert reasons == [""] and not run.done.is_set()
    assert isinstance(run.callback_error, ValueError) and calls == [b"a"]
    assert run.capture.output().stdout == b"ab"  # still captured


async def test_the_watchdog_names_the_deadline_that_passed() -> None:
    run = new_run()
    assert await overdue(run.wake, run.t0, 0.01, None, lambda: run.last_output) == \
        "command timed out after 0.01 s"
    assert await overdue(run.wake, run.t0, None, 0.01, lambda: run.last_output) == \
        "command produced no output for 0.01 s (idle timeout)"
    run.wake.set()
    assert await overdue(run.wake, run.t0, 0.0, None, lambda: run.last_output) == ""


async def test_a_model_sees_the_head_and_tail_of_what_came_since_its_last_look() -> None:
    run = new_run(keep_chars=40)
    for i in range(50):
        await run.feed("stdout", b"line %02d\n" % i)
    text = run.take_recent()
    assert text.startswith("line 00\n") and "line 49" in text and "omitted" in text
    assert run.take_recent() == ""


async def test_a_second_closer_of_stdin_waits_for_the_first_ones_end_line() -> None:
    """The end line of a command's input goes once; whoever else closes the input meanwhile
    (the result's own close, a kill) returns only once it went, else the next command's
    line could reach the shell first and be read as the input's end. A command that never
    had a reader has nothing to wait for."""
    from sandbox._session import Session
    from sandbox._session_wire import STDIN_END

    run = new_run()
    sent: list[bytes | str] = []
    let_go = anyio.Event()

    async def write(data: bytes | str) -> None:
        sent.append(data)
        await let_go.wait()  # a full FIFO: the first closer blocks in its write

    run.shell.write = write  # type: ignore[method-assign]
    run.shell.proc = object()  # type: ignore[assignment]  # alive
    session = Session.__new__(Session)
    await session._close_stdin(run)  # no reader ran: returns at once, nothing written
    assert sent == []
    run.stdin_open = run.stdin_end_due = True
    second_done = anyio.Event()

    async def second() -> None:
        await session._close_stdin(run)
        second_done.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(session._close_stdin, run)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(second)
            await anyio.wait_all_tasks_blocked()
            assert sent == [STDIN_END] and not second_done.is_set()
            let_go.set()
            await second_done.wait()
    assert sent == [STDIN_END] and not run.stdin_open and not run.stdin_end_due


async def test_closing_stdin_with_nothing_to_send_still_stops_a_cancelled_caller() -> None:
    """`SessionJob.close_stdin` on a command whose input is closed already (or never had a
    reader) writes nothing, yet it is a checkpoint: a cancelled caller is interrupted there,
    as it was when the lock's acquire was the first step."""
    from sandbox._session import Session

    run = new_run()
    session = Session.__new__(Session)
    reached = False
    with anyio.CancelScope() as scope:
        scope.cancel()
        await session._close_stdin(run)
        reached = True
    assert scope.cancelled_caught and not reached


async def test_a_kill_spares_only_markers_of_commands_ended_in_its_send_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The markers a timed-out command's kill spares (`Session._spared`): those of commands
    that ended in the clock tick it was sent in, none when the last ended in an earlier one
    (the shell makes no child between two commands), none for a command not sent yet."""
    from types import SimpleNamespace

    from sandbox import _session

    host = SimpleNamespace(backend=None, working_directory=lambda: "/")
    session = _session.Session(host,  # type: ignore[arg-type]
                               shell=None, restart=False)
    first, second, third = new_run(), new_run(), new_run()
    ticks = iter([500, 500, 501])
    monkeypatch.setattr(_session, "boot_tick", lambda: next(ticks))
    session._note_end(first)
    session._note_end(second)
    third.sent = 500
    assert session._spared(third) == tuple(
        f"{_session.COMMAND_VAR}={run.command_id}" for run in (first, second))
    third.sent = 501
    assert session._spared(third) == ()
    third.sent = 0
    assert session._spared(third) == ()
    session._note_end(first)  # tick 501: a new tick forgets the earlier ones
    third.sent = 501
    assert session._spared(third) == (f"{_session.COMMAND_VAR}={first.command_id}",)
