"""The process sandbox's root filesystem: a directory, or a local Docker image exported once.

``image`` is either an absolute path to a directory (used as it is), or a reference to an
image the local Docker engine has: its filesystem is exported (``docker export`` of a created,
never started container) into a cache keyed by the image id, so the same images serve both
backends and the export is paid once per image. The image's ``Env`` (PATH) is kept beside it.
Extraction uses tarfile's ``tar`` filter: no absolute or ``..`` member, no link out of the
tree, no setuid/setgid bits; ownership kept only when root extracts.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import attrs

from .._errors import EngineUnavailable, SandboxError, SandboxInitFailed
from .._image_ref import parse_image_ref
from .._registry import image_store
from .._rmtree import remove_tree
from ._rootfs_cache import evict, max_bytes, prune_missing, record_size, touch

__all__ = ["Rootfs", "cache_dir", "resolve_rootfs"]

_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@attrs.frozen
class Rootfs:
    """A root directory on the host and what the image says about it."""

    path: Path
    env: dict[str, str]
    image_id: str = ""
    user: str = ""


def cache_dir() -> Path:
    """Where exported images live: SANDBOX_ROOTFS_CACHE, else a per-user cache."""
    if env := os.environ.get("SANDBOX_ROOTFS_CACHE"):
        return Path(env)
    if os.getuid() == 0:
        return Path("/var/cache/sandbox-sdk/rootfs")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sandbox-sdk" / "rootfs"


#: How long a Docker image name stays resolved in this process (image name -> export).
RESOLVED_TTL = 60.0
_resolved: dict[str, tuple[float, Rootfs]] = {}


async def resolve_rootfs(image: str) -> Rootfs:
    """The root directory for ``image`` (exporting a Docker image on first use).

    A Docker image name is asked of the engine at most once per `RESOLVED_TTL` seconds in a
    process (the ask took 10 ms of a 25 ms create here): an image re-tagged meanwhile is
    seen after that.
    """
    if not image.startswith("/"):
        hit = _resolved.get(image)
        if hit is not None and time.monotonic() - hit[0] < RESOLVED_TTL and \
                hit[1].path.is_dir():  # one stat: cheaper than a thread hand-off
            return hit[1]
        found = await _from_docker(image)
        _resolved[image] = (time.monotonic(), found)
        return found
    path = Path(image)
    if not await anyio.to_thread.run_sync(path.is_dir):
        raise SandboxInitFailed(f"image {image!r}: no such directory",
                                details="give a directory holding a root filesystem, or "
                                "the name of an image on the local Docker engine")
    return Rootfs(path=path, env={"PATH": _DEFAULT_PATH})


async def _from_docker(image: str) -> Rootfs:
    store = image_store()  # the Docker engine's images, through the registry
    ref = parse_image_ref(image)
    try:
        found = await store.inspect(ref.engine_name)
    except SandboxError as exc:
        raise EngineUnavailable(
            f"image {image!r} names a Docker image, but the engine cannot be asked for it",
            details=f"{exc.message}; or give a root filesystem directory as image",
            cause=exc) from exc
    if found is None:
        raise SandboxInitFailed(
            f"image {image!r} is not on the local Docker engine",
            details="the process backend never pulls: pull or build it with Docker "
            "first, or give a root filesystem directory as image")
    image_id = str(found["Id"])
    config: dict[str, Any] = found.get("Config") or {}
    env = dict(e.partition("=")[::2] for e in config.get("Env") or [])
    env.setdefault("PATH", _DEFAULT_PATH)
    user = str(config.get("User") or "")
    target = cache_dir() / image_id.removeprefix("sha256:")
    if not (target / "rootfs").is_dir():
        await _export(ref.engine_name, target)
        # The cache stays under its cap: least recently used entries go (never this one,
        # nor one a sandbox has mounted).
        await anyio.to_thread.run_sync(lambda: evict(target.parent, max_bytes(),
                                                     keep=(target.name,)))
    else:
        touch(target)
    return Rootfs(path=target / "rootfs", env=env, image_id=image_id, user=user)


async def _export(name: str, target: Path) -> None:
    """Export the image's filesystem to ``target/rootfs``, atomically (rename at the end)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(target.parent, 0o755)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=target.parent))
    try:
        tar = await anyio.to_thread.run_sync(open, work / "rootfs.tar", "wb")
        with tar:
            await image_store().export(name, tar.write)
        await anyio.to_thread.run_sync(_install, work, target, name)
    finally:
        remove_tree(work)  # an image's tree may be of any depth or mode


def _install(work: Path, target: Path, name: str) -> None:
    """Unpack the export in ``work`` and rename it to ``target`` (atomically)."""
    _extract(work / "rootfs.tar", work / "rootfs")
    (work / "rootfs.tar").unlink()
    record_size(work, name)  # image.json: the image's name and the entry's size
    touch(work)
    os.chmod(work, 0o755)
    try:
        work.rename(target)
    except OSError:
        if not (target / "rootfs").is_dir():  # else another process won the race
            raise


def _extract(archive: Path, dest: Path) -> None:
    dest.mkdir()
    os.chmod(dest, 0o755)
    def keep(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        if member.isdev() or member.isfifo():
            return None  # the sandbox gets its own /dev; nodes would need root anyway
        return tarfile.tar_filter(member, path)

    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter=keep)  # directory modes last, so 0555 ones still fill


async def prune_cache(*, dry_run: bool,
                      docker: Any = None) -> tuple[list[Any], list[Any], list[Any]]:
    """Prune the rootfs cache of images the engine no longer has: (removed, kept, failed)
    entries, each with its reason. No engine answering: nothing is pruned."""
    try:
        present = await image_store().image_ids(docker)
    except EngineUnavailable:
        return [], [], []
    return await anyio.to_thread.run_sync(
        lambda: prune_missing(cache_dir(), present, dry_run=dry_run))
