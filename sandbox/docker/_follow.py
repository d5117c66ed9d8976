"""Follow a JSON-lines stream (stats, events), reopening it with backoff when it breaks.

The one reconnect loop of the Docker backend, over the gateway's `Engine.json_lines`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import anyio
import attrs

from .._errors import SandboxError
from ._gateway import Engine, EngineNotFound

__all__ = ["DONE", "GAVE_UP", "GONE", "Reconnect", "follow_json_lines"]


@attrs.frozen(kw_only=True)
class Reconnect:
    """How `follow_json_lines` reopens a broken stream."""

    #: Consecutive failures tolerated before giving up (logged, not raised).
    retries: int
    #: Seconds to wait before each reopening; the last value repeats.
    backoff: tuple[float, ...]
    #: A connection that lasted this long counts as healthy and resets the failure count
    #: (as does one that delivered a record).
    healthy_after: float = math.inf
    #: Level of the log record when giving up, and what it adds about the consequence.
    give_up_level: int = logging.WARNING
    give_up_note: str = ""


#: Returned by `follow_json_lines`: a handler said it is done, the subject is gone (404),
#: or the stream failed too often.
DONE: Final = "done"
GONE: Final = "gone"
GAVE_UP: Final = "gave up"


async def follow_json_lines(
    engine: Engine, action: str, path: str, *,
    params: Callable[[], Mapping[str, Any]],
    on_record: Callable[[Any], Awaitable[bool]],
    on_open: Callable[[], Awaitable[bool]] | None = None,
    on_end: Callable[[], Awaitable[bool]] | None = None,
    reconnect: Reconnect, idle_timeout: float | None, log: logging.Logger, subject: str,
) -> str:
    """Follow a JSON-lines stream, reopening it with backoff when it breaks or ends.

    Args:
        engine: The engine client.
        action: What the stream is for, in error messages ("follow the container's stats").
        path: The streaming endpoint.
        params: Called before each (re)opening for its query parameters (e.g. ``since``).
        on_record: Called with each record; True ends the following (`DONE`).
        on_open: Called once the answer's headers came, before any record; True ends it.
        on_end: Called when the engine ended the stream cleanly; True ends it.
        reconnect: Retries and backoff.
        idle_timeout: Longest wait for the headers or the next line (None: no limit).
        log: Where reconnects and giving up are logged.
        subject: What the log lines are about ("stats for container 0123abcd").

    Returns:
        `DONE`, `GONE` (the engine answered 404: the subject no longer exists) or `GAVE_UP`.
    """
    failures = 0
    while True:
        opened, received = time.monotonic(), 0
        try:
            async with engine.json_lines(action, path, params=params(),
                                         idle_timeout=idle_timeout) as lines:
                if on_open is not None and await on_open():
                    return DONE
                async for record in lines:
                    received += 1
                    if await on_record(record):
                        return DONE
            if on_end is not None and await on_end():
                return DONE
            problem = "the engine ended the stream"
        except EngineNotFound:
            return GONE
        except SandboxError as exc:
            problem = f"{exc.message}: {exc.details}" if exc.details else exc.message
        if received or time.monotonic() - opened >= reconnect.healthy_after:
            failures = 0  # the stream worked for a while: start the backoff over
        if failures >= reconnect.retries:
            log.log(reconnect.give_up_level, "%s: %s; gave up after %d retries%s", subject,
                    problem, failures, reconnect.give_up_note)
            return GAVE_UP
        delay = reconnect.backoff[min(failures, len(reconnect.backoff) - 1)]
        failures += 1
        log.warning("%s: %s; reconnecting in %g s", subject, problem, delay)
        await anyio.sleep(delay)
