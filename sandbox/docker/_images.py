"""Make sure the sandbox's image is present, pulling it as the pull policy says."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from .._backend import ImageStore
from .._constants import IMAGE_BUSYBOX, IMAGE_PYTHON
from .._errors import SandboxError, SandboxInitFailed
from .._image_ref import ImageRef
from .._owner import owner_labels
from ._gateway import Engine, EngineNotFound, engine_over

#: The SDK's own images: no registry has them, `BUILD_COMMAND` builds them.
BUILT_HERE = (IMAGE_BUSYBOX, IMAGE_PYTHON)
BUILD_COMMAND = "python -m sandbox images"
#: A pull that makes no progress for this long is given up.
PULL_IDLE_TIMEOUT = 120.0

PullProgress = Callable[[Mapping[str, Any]], object]


async def inspect_image(engine: Engine, name: str) -> dict[str, Any] | None:
    """The engine's inspect of image `name`, or None when it does not have it."""
    try:
        data: dict[str, Any] = await engine.query_json("inspect the image", f"images/{name}/json")
    except EngineNotFound:
        return None
    return data


async def ensure_image(
    engine: Engine, ref: ImageRef, policy: str, on_progress: PullProgress | None, *,
    platform: str = "", inspected: Awaitable[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Apply the pull policy ("missing" pulls when absent, "always" pulls, "never" never does)
    and return the image's inspect; ``inspected`` is an `inspect_image` of ``ref`` already
    under way (the create's, beside its ping), used instead of a new one."""
    name = ref.engine_name
    if policy != "always":
        found = await (inspected if inspected is not None else inspect_image(engine, name))
        if found is not None:
            return found
    if name in BUILT_HERE:
        # No registry has them: they are built on this machine, by the package itself.
        raise SandboxInitFailed(
            f"image {name!r} is not on the engine: it is one of the SDK's own images, built "
            f"locally; build it with `{BUILD_COMMAND}`",
            details="or choose another image in SandboxConfig.image",
        )
    if policy == "never":
        raise SandboxInitFailed(
            f"image {name!r} is not on the engine and pull_policy is 'never'",
            details=f"build or load the image first (`{BUILD_COMMAND}` builds the SDK's "
            "default images), or set pull_policy='missing'",
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
        # No total deadline (a big image takes long), but neither the answer's headers nor any
        # later progress line may take longer than the idle limit.
        async with engine.json_lines(f"pull image {ref.engine_name!r}", "images/create",
                                     "POST", params=params,
                                     idle_timeout=PULL_IDLE_TIMEOUT) as records:
            async for record in records:
                if not isinstance(record, Mapping):
                    continue
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
                                details=f"{exc}; {pull_hint(ref)}", cause=exc) from exc
    if error:
        raise SandboxInitFailed(f"could not pull image {ref.engine_name!r}",
                                details=f"{error}; {pull_hint(ref)}")


def pull_hint(ref: ImageRef) -> str:
    """What to do when an image is neither on the engine nor pullable: the next steps."""
    return (f"it is not on the engine, so pull_policy={'missing'!r} asked the registry "
            f"{ref.domain} for it: check the name and tag, log the engine in to that registry "
            f"if it is private (docker login {ref.domain}), or build or load the image on the "
            f"engine yourself and set pull_policy='never'. The SDK's own images "
            f"({', '.join(BUILT_HERE)}) are in no registry: `{BUILD_COMMAND}` builds them")



class DockerImageStore:
    """The local engine's images, as the process backend reads them (`ImageStore`)."""

    async def inspect(self, name: str) -> Mapping[str, Any] | None:
        async with engine_over() as engine:
            return await inspect_image(engine, name)

    async def export(self, name: str, write: Callable[[bytes], object]) -> None:
        async with engine_over() as engine:
            created = await engine.query_json(
                "create a container to export the image", "containers/create", "POST",
                data={"Image": name, "Cmd": ["/nonexistent"], "Labels": owner_labels(),
                      "NetworkDisabled": True})
            container = str(created["Id"])
            try:
                await engine.download("export the image's filesystem",
                                      f"containers/{container}/export", write, deadline=600)
            finally:
                with anyio.CancelScope(shield=True), contextlib.suppress(SandboxError):
                    await engine.query_json("remove the export container",
                                            f"containers/{container}", "DELETE",
                                            params={"force": "1"})

    async def image_ids(self, docker: Any) -> set[str]:
        async with engine_over(docker) as engine:
            images = await engine.query_json("list images", "images/json",
                                             params={"all": "1"})
        return {str(image.get("Id", "")) for image in images}


#: What `sandbox._registry.image_store` loads.
IMAGES: ImageStore = DockerImageStore()
