"""A missing default image is an error naming the build command, never a pull attempt (no
registry has the SDK's own images); other images still follow the pull policy."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox import IMAGE_BUSYBOX, IMAGE_PYTHON, SandboxInitFailed
from sandbox._image_ref import parse_image_ref
from sandbox.docker._gateway import EngineNotFound
from sandbox.docker._images import ensure_image


class NoImages:
    """An engine that has no image and records pull attempts."""

    def __init__(self) -> None:
        self.pulls: list[str] = []

    async def query_json(self, action: str, path: str, *args: Any, **kw: Any) -> Any:
        raise EngineNotFound(f"{action}: no such image", status=404)

    def json_lines(self, action: str, path: str, *args: Any, **kw: Any) -> Any:
        self.pulls.append(path)
        raise EngineNotFound("no registry here", status=404)


@pytest.mark.asyncio
@pytest.mark.parametrize("image", [IMAGE_BUSYBOX, IMAGE_PYTHON])
@pytest.mark.parametrize("policy", ["missing", "always", "never"])
async def test_missing_default_image_names_the_build_command(image: str, policy: str) -> None:
    engine = NoImages()
    with pytest.raises(SandboxInitFailed) as ei:
        await ensure_image(engine, parse_image_ref(image), policy, None)  # type: ignore[arg-type]
    assert f"image {image!r} is not on the engine" in str(ei.value)
    assert "python -m sandbox images" in str(ei.value) and "make" not in str(ei.value)
    assert engine.pulls == []


@pytest.mark.asyncio
async def test_other_images_are_still_pulled() -> None:
    engine = NoImages()
    with pytest.raises(SandboxInitFailed, match="could not pull"):
        await ensure_image(engine, parse_image_ref("example.org/x:1"), "missing",  # type: ignore[arg-type]
                           None)
    assert engine.pulls == ["images/create"]
