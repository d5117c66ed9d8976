"""An ended exec's `CommandResult`, from the engine's exit info and the captured output.

`read_exit_info` asks the engine how the exec ended; `build_result` (pure) makes what the
engine said (``ExitCode``, ``Pid``) and what the SDK did (killed it, and why) one result; a
command that never started raises its start error instead.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio

from .._errors import KillFailed
from .._models import CommandResult
from .._output import LazyText, OutputCapture
from .._signals import signal_name
from ._exec_start import start_error
from ._gateway import Engine


async def read_exit_info(engine: Engine, exec_id: str, *, abandoned: bool) -> dict[str, Any]:
    """The exec's inspect once it is no longer running (for up to 5 s), else no exit code.

    `abandoned`: it did not end when killed, so one look is enough.
    """
    info: dict[str, Any] = {}
    with anyio.move_on_after(5):
        while True:
            info = await engine.inspect_exec(exec_id)
            if not info.get("Running") and info.get("ExitCode") is not None:
                return info
            if abandoned:
                break  # it did not end when killed: waiting longer tells nothing new
            await anyio.sleep(0.05)
    return {"ExitCode": None, "Pid": 0, "Running": info.get("Running", False)}


def build_result(
    info: Mapping[str, Any], capture: OutputCapture, *, argv: Sequence[str], user: str,
    workdir: str, killed: bool, kill_reason: str, abandoned: bool, start_time: datetime,
    t0: float, container_id: str, exec_id: str, kill_confirmed: bool = False,
) -> CommandResult:
    """The result of the exec whose inspect is `info`.

    `killed`: the SDK killed it (timeout, kill(), leaving the block); `kill_reason` says why
    when a deadline did; `abandoned`: its output did not end when killed; `kill_confirmed`:
    the kill saw none of its processes left. `t0` is the
    ``time.monotonic()`` of its start.

    Raises:
        CommandStartFailed: The command never started (no Pid); the output holds the engine's
            message.
        KillFailed: It was killed, but neither its exit status nor the kill shows it ended
            by a signal.
    """
    end = datetime.now(UTC)
    out = capture.output()
    code_raw = info.get("ExitCode")
    pid = int(info.get("Pid") or 0)
    if pid == 0 and code_raw in (126, 127) and not killed:
        # Never started (no Pid), but the first message was not seen as the engine's.
        text = out.decode("combined").strip()
        raise start_error(text, argv, user, workdir)
    timed_out = bool(kill_reason)
    exit_code = -1 if code_raw is None else int(code_raw)
    sig = signal_name(exit_code)
    if killed and not sig and not kill_confirmed:
        # Never report a kill that did not happen: the command may be running (or have
        # gone on to finish its work) past its deadline.
        what = kill_reason or "it was killed"
        raise KillFailed(
            f"{argv[0]!r}: {what}, but the kill could not be confirmed: its processes may "
            "still run", details=(
                "the command's output never ended (is the container paused?)" if abandoned
                else f"it ended by itself with exit code {exit_code}" if code_raw is not None
                else "the engine reported no exit code"))
    if killed and not sig:
        sig = "SIGKILL"
    error = kill_reason
    if code_raw is None and not error:
        error = "the engine did not report an exit code"
    if abandoned:
        error = (error + "; " if error else "") + \
            "the command's output did not end after the kill (is the container paused? its " \
            "processes die when it is thawed)"
    if capture.truncated:
        error = (error + "; " if error else "") + "output truncated at max_output_bytes"
    return CommandResult(
        exit_code=exit_code,
        success=exit_code == 0 and not timed_out,
        stdout=LazyText(out, "stdout"),
        stderr=LazyText(out, "stderr"),
        combined=LazyText(out, "combined"),
        start_time=start_time,
        end_time=end,
        duration=timedelta(seconds=time.monotonic() - t0),
        error=error,
        signal=sig,
        process_id=pid,
        metadata={"container_id": container_id, "exec_id": exec_id},
        timed_out=timed_out,
        truncated=capture.truncated,
        stdout_bytes=out.stdout,
        stderr_bytes=out.stderr,
    )
