"""Notice from the engine's event stream when a sandbox container stops, is paused or OOMs.

`watch_container` follows ``GET /events`` for one container (through
`_follow.follow_json_lines`, which reopens it with backoff), so a ``docker kill`` from outside,
the main process exiting, or a removal reaches the sandbox within tens of milliseconds instead
of at its next command. It inspects the container once the subscription is live, to catch
what happened before, and on each reopening asks the engine to replay what it missed. How the
events and ``State.OOMKilled`` behave is in docs/engine-notes.md, section "Engine events".
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import signal
from collections.abc import Callable, Mapping
from typing import Any, Final

import attrs

from ._follow import Reconnect, follow_json_lines
from ._gateway import Engine, EngineNotFound
from ._wire import ContainerState, container_state

__all__ = ["StopCallback", "watch_container"]

log = logging.getLogger("sandbox.health")

#: Called once with (reason, exit code or None, whether the OOM killer ended the container).
StopCallback = Callable[[str, int | None, bool], object]

#: Consecutive connection failures tolerated before the watcher gives up (logged, not raised).
EVENT_RETRIES: Final = 5
#: Seconds to wait before each reconnect; the last value repeats.
EVENT_BACKOFF: Final = (0.2, 0.5, 1.0, 2.0, 5.0)
#: A connection that lasted this long counts as healthy and resets the failure count.
HEALTHY_AFTER: Final = 10.0
#: A ``kill`` this close before ``die`` caused it; ``docker stop`` waits 10 s before SIGKILL.
KILL_WINDOW_NS: Final = 15 * 10**9
#: An ``oom`` this close before ``die`` explains it; older ones were exec'd processes.
OOM_WINDOW_NS: Final = 5 * 10**9
INSPECT_TIMEOUT: Final = 10.0
#: The stop reason given when the container was removed (its calls then raise SandboxNotFound).
REMOVED_REASON: Final = "the container was removed from outside"
#: The container events the watcher asks for (the engine filters out the rest).
_EVENTS: Final = ("oom", "kill", "die", "destroy", "pause", "unpause")

_RECONNECT: Final = Reconnect(
    retries=EVENT_RETRIES, backoff=EVENT_BACKOFF, healthy_after=HEALTHY_AFTER,
    give_up_level=logging.ERROR,
    give_up_note=", so a stop from outside will only be noticed by the next command",
)


def _signal_name(value: Any) -> str:
    text = str(value or "").strip()
    if text.isdigit():
        with contextlib.suppress(ValueError):
            return signal.Signals(int(text)).name
        return f"signal {text}"
    return text or "a signal"


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


async def _call(what: str, callback: Callable[..., object] | None, *args: Any) -> None:
    """Run a callback, sync or async; its failure is logged so watching goes on."""
    if callback is None:
        return
    try:
        result = callback(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("the %s callback failed", what)


@attrs.define
class _Watcher:
    """State of one watch: what was seen so far, to explain a ``die`` and replay gaps."""

    engine: Engine
    id: str  # the container's
    on_stop: StopCallback
    on_oom: Callable[[], object] | None
    on_pause: Callable[[bool], object] | None
    on_running: Callable[[int], object] | None = None
    paused: bool = False
    kill: tuple[int, str] | None = None  # (timeNano, signal name) of the last kill
    oom_ns: int | None = None
    last_ns: int = 0  # engine time of the newest event handled, for `since` on reconnect
    keys_at_last: set[str] = attrs.field(factory=set)
    replay: bool = False  # the stream is a reopening: the engine replays what it missed

    async def run(self) -> None:
        await follow_json_lines(
            self.engine, "watch the container's events", "events", params=self._params,
            on_open=self._opened, on_record=self._record, reconnect=_RECONNECT,
            idle_timeout=None, log=log, subject=f"events for container {self.id[:12]}",
        )

    def _params(self) -> dict[str, str]:
        # Only the events handled below: an exec's events carry its whole command line, which
        # may exceed the line reader's buffer (a 1 MiB argv) and would break the watch.
        params = {"filters": json.dumps({"container": [self.id], "type": ["container"],
                                         "event": list(_EVENTS)})}
        self.replay = self.last_ns > 0
        if self.replay:
            # Ask the engine to replay what happened while disconnected (its own clock).
            params["since"] = f"{self.last_ns // 10**9}.{self.last_ns % 10**9:09d}"
        return params

    async def _opened(self) -> bool:
        return await self._check_state(with_pause=not self.replay)

    async def _record(self, event: Any) -> bool:
        return isinstance(event, Mapping) and await self._handle(event)

    async def _inspect(self) -> ContainerState | None:
        """The container's State, or None when it no longer exists."""
        try:
            data = await self.engine.query_json("inspect the container",
                                                f"containers/{self.id}/json",
                                                deadline=INSPECT_TIMEOUT)
        except EngineNotFound:
            return None
        return container_state(data if isinstance(data, Mapping) else {})

    async def _check_state(self, *, with_pause: bool) -> bool:
        """Catch what happened before the stream was open; True if the container ended."""
        state = await self._inspect()
        if state is None:
            await self._removed()
            return True
        if state.ended:
            await self._died(state.exit_code, None, state)
            return True
        if self.on_running is not None and state.running and state.pid > 0:
            on_running, self.on_running = self.on_running, None  # once: the first look
            await _call("on_running", on_running, state.pid)
        paused = state.paused
        if with_pause and paused != self.paused:
            self.paused = paused
            await _call("on_pause", self.on_pause, paused)
        return False

    def _fresh(self, event: Mapping[str, Any], action: str) -> bool:
        """Drop events a replay (``since``) sends twice."""
        ns = _int_or_none(event.get("timeNano")) or 0
        key = f"{action}/{event.get('status', '')}"
        if ns < self.last_ns or (ns == self.last_ns and key in self.keys_at_last):
            return False
        if ns > self.last_ns:
            self.last_ns, self.keys_at_last = ns, set()
        self.keys_at_last.add(key)
        return True

    async def _handle(self, event: Mapping[str, Any]) -> bool:  # the kinds in _EVENTS
        action = str(event.get("Action") or event.get("status") or "")
        if not self._fresh(event, action):
            return False
        # Exec events read "exec_start: cmd args"; health checks "health_status: healthy".
        kind = action.split(":", 1)[0].strip()
        actor = event.get("Actor")
        attributes = actor.get("Attributes") if isinstance(actor, Mapping) else None
        fields = attributes if isinstance(attributes, Mapping) else {}
        ns = _int_or_none(event.get("timeNano")) or 0
        if kind == "oom":
            self.oom_ns = ns
            await _call("on_oom", self.on_oom)
        elif kind == "kill":
            self.kill = (ns, _signal_name(fields.get("signal")))
        elif kind == "die":
            state = await self._inspect()
            code = _int_or_none(fields.get("exitCode"))
            if code is None and state is not None:
                code = state.exit_code
            await self._died(code, ns, state or ContainerState())
            return True
        elif kind == "destroy":
            await self._removed()
            return True
        elif kind in ("pause", "unpause"):
            paused = kind == "pause"
            if paused != self.paused:
                self.paused = paused
                await _call("on_pause", self.on_pause, paused)
        return False

    async def _died(self, code: int | None, die_ns: int | None, state: ContainerState) -> None:
        """Explain a stop: a kill from outside, the OOM killer, or the process exiting."""
        killed = self.kill is not None and (
            die_ns is None or die_ns - self.kill[0] <= KILL_WINDOW_NS
        )
        oom_explains = self.oom_ns is None or (
            die_ns is not None and die_ns - self.oom_ns <= OOM_WINDOW_NS
        )
        oom = state.oom_killed and not killed and oom_explains
        exited = "its main process exited" if code is None else \
            f"its main process exited with code {code}"
        if killed:
            assert self.kill is not None
            reason = f"the container was sent {self.kill[1]} from outside and {exited}"
        elif code is None:
            reason = "the container's main process exited"
        else:
            reason = f"the container's main process exited with code {code}"
        if oom:
            reason += " (OOMKilled)"
        await _call("on_stop", self.on_stop, reason, code, oom)

    async def _removed(self) -> None:
        await _call("on_stop", self.on_stop, REMOVED_REASON, None, False)


async def watch_container(
    engine: Engine,
    container_id: str,
    on_stop: StopCallback,
    *,
    on_oom: Callable[[], object] | None = None,
    on_pause: Callable[[bool], object] | None = None,
    on_running: Callable[[int], object] | None = None,
) -> None:
    """Watch a container's events and report its end, OOM kills and pauses.

    Returns after calling ``on_stop`` once (the container exited or was removed), or after
    the event stream failed `EVENT_RETRIES` times in a row (logged); run it in a task and
    cancel it at cleanup. Callbacks may be sync or async; their errors are logged.

    Args:
        engine: The engine client.
        container_id: The container to watch.
        on_stop: ``(reason, exit_code, oom_killed)`` when the container stops or is removed,
            also when that happened before the watch began.
        on_oom: Called on every ``oom`` event. Without a following ``die`` it means an exec'd
            process (most likely the running command) was killed for memory.
        on_pause: Called with True on pause and False on unpause.
        on_running: Called once with the main process's host pid (``State.Pid``) when the
            first look finds the container running: the inspect it makes anyway, so a
            host-side health check (`_host_health`) costs the engine nothing more.
    """
    await _Watcher(engine, container_id, on_stop, on_oom, on_pause, on_running).run()
