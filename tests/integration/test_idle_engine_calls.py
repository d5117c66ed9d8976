"""What an open Docker sandbox asks of the engine on its own, with nobody using it.

A hundred sandboxes opened ten at a time each made an exec (the process counts) and a layer
walk (``size=1``) a second after opening, and two inspects for one pid, all beside the next
creates. Now: one event stream and one inspect (the watcher's first look, whose pid the
sampler takes), the counts only once someone reads usage, which then has them at once.
"""

from __future__ import annotations

import os
import time
from typing import Any

import anyio
import pytest

from sandbox import IMAGE_BUSYBOX, Sandbox, SandboxConfig
from sandbox.docker import _gateway
from tests.conftest import docker_cli

pytestmark = [pytest.mark.asyncio, pytest.mark.usefixtures("engine"),
              pytest.mark.skipif(os.geteuid() != 0, reason="the host sampler needs root")]


def execs_in(container_id: str, since: float) -> list[str]:
    """The execs the engine made in the container since ``since`` (its event log)."""
    out = docker_cli("events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}",
                     "--filter", f"container={container_id}", "--filter", "event=exec_create",
                     "--format", "{{.TimeNano}}")
    return out.split()


async def test_an_unread_sandbox_makes_no_exec_and_its_first_read_has_the_counts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str]] = []
    original = _gateway.Engine.query_json

    async def spy(engine: Any, action: str, path: str, *args: Any, **kwargs: Any) -> Any:
        asked.append((action, path))
        return await original(engine, action, path, *args, **kwargs)

    monkeypatch.setattr(_gateway.Engine, "query_json", spy)
    async with Sandbox(SandboxConfig(image=IMAGE_BUSYBOX)) as sb:
        cid = sb.backend.container_id
        assert cid is not None
        since = time.time()
        asked.clear()
        await anyio.sleep(3.5)  # three host samples: the first one made the exec before
        quiet = list(asked)
        assert execs_in(cid, since) == []
        usage = await sb.get_resource_usage()
        # docker-init, the keepalive shell and its sleep (root's: their files are not the
        # sandbox user's to count); the layer's size (/etc/hosts was written).
        assert usage.process_count >= 2 and usage.thread_count >= 2, usage
        assert usage.disk_usage > 0, usage
        assert len(execs_in(cid, since)) == 1
    inspects = [a for a in quiet if a[1] == f"containers/{cid}/json"]
    # The watcher's first look only (the sampler took its pid), and no size=1 walk.
    assert len(inspects) == 1, quiet


async def test_a_cleanup_right_after_create_opens_no_event_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher the create started had not run yet: it stays unstarted, where it used to
    open ``GET /events`` in front of the ``DELETE`` only to be cancelled (round 6)."""
    opened: list[str] = []
    original = _gateway.Engine.json_lines

    def spy(engine: Any, action: str, path: str, *args: Any, **kwargs: Any) -> Any:
        opened.append(path)
        return original(engine, action, path, *args, **kwargs)

    monkeypatch.setattr(_gateway.Engine, "json_lines", spy)
    config = SandboxConfig(image=IMAGE_BUSYBOX)
    sb = Sandbox(config)
    await sb.__aenter__()
    await sb.cleanup()
    assert opened == []
    # The same sandbox given a moment before its cleanup does watch (the spy sees it).
    async with Sandbox(config) as sb:
        with anyio.fail_after(10):
            while "events" not in opened:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        result = await sb.execute_command(["true"])
        assert result.exit_code == 0
