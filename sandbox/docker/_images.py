"""Make sure the sandbox's image is present, pulling it as the pull policy says."""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

import aiodocker
import anyio

from .._errors import SandboxError, SandboxInitFailed
from .._image_ref import ImageRef
from ._engine import Engine, mapped_errors

#: A pull that makes no progress for this long is given up.
PULL_IDLE_TIMEOUT = 120.0

PullProgress = Callable[[Mapping[str, Any]], object]


async def inspect_image(engine: Engine, name: str) -> dict[str, Any] | None:
    """The engine's inspect of image `name`, or None when it does not have it."""
    try:
        data: dict[str, Any] = await engine.query_json("inspect the image", f"images/{name}/json")
    except SandboxError as exc:
        if isinstance(exc.cause, aiodocker.DockerError) and exc.cause.status == 404:
            return None
        raise
    return data


async def ensure_image(
    engine: Engine, ref: ImageRef, policy: str, on_progress: PullProgress | None, *,
    platform: str = "",
) -> dict[str, Any]:
    """Apply the pull policy ("missing" pulls when absent, "always" pulls, "never" never does)
    and return the image's inspect."""
    name = ref.engine_name
    if policy != "always" and (found := await inspect_image(engine, name)) is not None:
        return found
    if policy == "never":
        raise SandboxInitFailed(
            f"image {name!r} is not on the engine and pull_policy is 'never'",
            details="build or load the image first (make images builds the test images), "
            "or set pull_policy='missing'",
        )
    await pull(engine, ref, on_progress, platform=platform)
    pulled = await inspect_image(engine, name)
    if pulled is None:
        raise SandboxInitFailed(f"image {name!r} is not on the engine after pulling it",
                                details="pull it again; was it removed meanwhile?")
    return pulled


async def pull(engine: Engine, ref: ImageRef, on_progress: PullProgress | None, *,
               platform: str = "") -> None:
    """Pull an image, reporting each progress record; a failed pull names the reference."""
    params: dict[str, str] = {"fromImage": ref.repository_name}
    if ref.digest:
        params["fromImage"] = f"{ref.repository_name}@{ref.digest}"
    else:
        params["tag"] = ref.tag or "latest"
    if platform:
        params["platform"] = platform if "/" in platform else f"linux/{platform}"
    error = ""
    try:
        with mapped_errors(f"pull image {ref.engine_name!r}"):
            async with contextlib.AsyncExitStack() as stack:
                # No total deadline (a big image takes long), but neither the answer's
                # headers nor any later progress line may take longer than the idle limit.
                with anyio.fail_after(PULL_IDLE_TIMEOUT):
                    resp = await stack.enter_async_context(engine.docker._query(
                        "images/create", "POST", params=params, timeout=None))
                while True:
                    with anyio.fail_after(PULL_IDLE_TIMEOUT):
                        line = await resp.content.readline()
                    if not line:
                        break
                    if not line.strip():
                        continue
                    record = json.loads(line)
                    if "error" in record:
                        error = str(record.get("error"))
                        break
                    if on_progress is not None:
                        result = on_progress(record)
                        if inspect.isawaitable(result):
                            await result
    except TimeoutError as exc:
        raise SandboxInitFailed(
            f"pulling image {ref.engine_name!r} made no progress for {PULL_IDLE_TIMEOUT:g} s",
            cause=exc,
        ) from exc
    except SandboxError as exc:
        raise SandboxInitFailed(f"could not pull image {ref.engine_name!r}",
                                details=str(exc), cause=exc) from exc
    if error:
        raise SandboxInitFailed(f"could not pull image {ref.engine_name!r}", details=error)
