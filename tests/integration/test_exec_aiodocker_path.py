"""The exec path a remote engine takes (aiodocker's calls and attach stream; a local engine's
go through `sandbox.docker._direct`): a selection of test_exec's behaviours, rerun with the
local path switched off, and a check that it really is off."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_exec import (
    test_exit_codes_and_signals,
    test_missing_executable_raises_naming_it,
    test_output_arrives_while_command_runs,
    test_stdin_round_trips_and_cat_ends,
    test_stream_command_yields_chunks_before_end,
    test_timeout_kills_every_process,
    test_unread_stdin_does_not_hold_up_the_result,
    test_write_to_an_exited_command_is_a_broken_pipe,
)

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig
from sandbox.docker import _direct, _gateway
from sandbox.docker._gateway import Engine

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine")]

__all__ = [
    "test_exit_codes_and_signals", "test_missing_executable_raises_naming_it",
    "test_output_arrives_while_command_runs", "test_stdin_round_trips_and_cat_ends",
    "test_stream_command_yields_chunks_before_end", "test_timeout_kills_every_process",
    "test_unread_stdin_does_not_hold_up_the_result",
    "test_write_to_an_exited_command_is_a_broken_pipe",
]


@pytest.fixture(autouse=True)
def aiodocker_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As for a remote engine: no local socket to speak to; `_direct` must not be called."""
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("_direct was used")

    monkeypatch.setattr(Engine, "_local", lambda self: None)
    monkeypatch.setattr(_direct, "call_json", refused)
    monkeypatch.setattr(_direct, "open_hijacked", refused)
    monkeypatch.setattr(_gateway, "open_hijacked", refused)
    yield


async def test_a_terminal_command_over_aiodocker() -> None:
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        async with sb.stream_command("tty; echo done", tty=True) as proc:
            result = await proc.wait()
        assert "/dev/pts/" in result.stdout and "done" in result.stdout
