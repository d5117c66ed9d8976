"""Creating and removing a sandbox's container.

A create is never cancelled in flight (the engine would finish it after cleanup looked), and a
container whose create answer was lost is found by its label; removal thaws a paused container
and gives gVisor's slow teardown the time it needs.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio

from .._constants import LABEL_SANDBOX_ID
from .._errors import SandboxAlreadyExists, SandboxError
from ._gateway import Engine, EngineConflict, EngineNotFound

__all__ = ["create_container", "find_own_container", "remove_container"]


async def create_container(engine: Engine, name: str, params: Mapping[str, Any],
                           body: Mapping[str, Any]) -> str:
    """Create the container and return its id; a taken name is `SandboxAlreadyExists`."""
    try:
        created = await engine.query_json("create the sandbox container", "containers/create",
                                          "POST", params=params, data=body)
    except EngineConflict as exc:
        raise SandboxAlreadyExists(
            f"a container named {name!r} already exists on the engine",
            details="choose another SandboxConfig.name, or leave it empty for a generated one; "
                    "the existing container was not touched",
            cause=exc,
        ) from exc
    return str(created["Id"])


async def find_own_container(engine: Engine, sandbox_id: str, errors: list[str]) -> str | None:
    """The id of a container this sandbox made whose create answer never reached us.

    Found by our sandbox-id label, never by name: the name may belong to someone else.
    """
    filters = json.dumps({"label": [f"{LABEL_SANDBOX_ID}={sandbox_id}"]})
    try:
        found = await engine.query_json(
            "look for the sandbox container", "containers/json", "GET",
            params={"all": "1", "filters": filters},
        )
    except SandboxError as exc:
        errors.append(str(exc))
        return None
    return str(found[0]["Id"]) if found else None


async def remove_container(engine: Engine, target: str, *, patience: float, paused: bool,
                           removed: Callable[[], None]) -> list[str]:
    """Force-remove ``target`` with its anonymous volumes; return what went wrong.

    ``removed`` is called once the DELETE has answered (or failed), so commands still
    running in other tasks stop waiting on a container that is gone.
    """
    errors: list[str] = []
    short = target[:12]
    with anyio.move_on_after(patience) as scope:
        if paused:
            # A paused container cannot be removed (cgroup v1: SIGKILL waits for the thaw, so
            # the DELETE hangs); thaw it first.
            with contextlib.suppress(SandboxError):
                await engine.request("unpause the sandbox container",
                                     f"containers/{target}/unpause", "POST")
        try:
            await engine.request(
                f"remove the sandbox container {short}", f"containers/{target}",
                "DELETE", params={"force": "1", "v": "1"}, deadline=patience,
            )
        except EngineNotFound:
            pass  # already gone
        except SandboxError as exc:
            errors.append(str(exc))
        removed()
    if scope.cancelled_caught and not await _removal_under_way(engine, target):
        errors.append(f"remove the sandbox container {short}: no answer within {patience:g} s")
    return errors


async def _removal_under_way(engine: Engine, target: str) -> bool:
    """After a DELETE that timed out: is the container gone, or being removed anyway?

    The engine goes on removing after the client gave up (seen with runsc under load:
    containerd answered after 33 s); only a container still there is a leak.
    """
    try:
        data = await engine.query_json(
            "inspect the sandbox container", f"containers/{target}/json", deadline=5)
    except EngineNotFound:
        return True
    except SandboxError:
        return False
    return (data.get("State") or {}).get("Status") in ("removing", "dead")
