"""The SDK's default images, built on this machine without any registry: ``python -m sandbox
images`` (``scripts/images.py`` and ``make images`` call this too).

- ``sandbox-busybox:latest``: busybox-static's applets, a passwd with root, nobody and
  ``sandbox`` (1000), and /workspace.
- ``sandbox-python:latest``: Debian bookworm (minbase) with python3, git, ca-certificates and
  procps, made by mmdebstrap from the machine's own Debian sources, with the same user.

Both hold /workspace as ``WORKSPACE_OWNER`` (1000:0) mode ``WORKSPACE_MODE`` (0775): the
default user owns it, so a create needs no archive PUT to hand it over (`_workdir` reads the
owner from the image's own files, once per image id); root without capabilities writes it
through group 0; any other ``run_as_user`` is handed the (empty) directory as before.

Idempotent: an image the engine has is kept unless ``rebuild``. Building needs Debian's
``busybox-static`` and ``mmdebstrap``; as root they are installed when missing, otherwise the
error says what to install. The root filesystem is imported through the engine API (no docker
CLI needed), with progress on a terminal.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import attrs

from .._constants import IMAGE_BUSYBOX, IMAGE_PYTHON
from .._errors import SandboxError
from .._progress import Progress, human_bytes

if TYPE_CHECKING:
    from ._gateway import Engine

__all__ = ["BUILDERS", "ImageBuildFailed", "build_images"]

ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    "sandbox:x:1000:1000:sandbox user:/home/sandbox:/bin/sh\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\nsandbox:x:1000:\n"
#: /workspace's owner (uid, gid) and mode in both images (see the module's docstring).
WORKSPACE_OWNER = (1000, 0)
WORKSPACE_MODE = 0o775
#: Seconds the engine may take to import a root filesystem.
IMPORT_TIMEOUT = 600.0
_CHUNK = 1 << 20


class ImageBuildFailed(SandboxError):
    """Raised when a default image cannot be built; the message says what to do."""

    code = "IMAGE_BUILD_FAILED"


@attrs.frozen
class Outcome:
    """What happened to one image: ``"present"`` or ``"built"``."""

    image: str
    action: str


Say = Callable[[str], None]


def _run(argv: list[str], what: str, **kwargs: Any) -> None:
    try:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       **kwargs)
    except FileNotFoundError as exc:
        raise ImageBuildFailed(f"{what}: {argv[0]} is not installed") from exc
    except subprocess.CalledProcessError as exc:
        err = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        raise ImageBuildFailed(f"{what} failed (exit {exc.returncode})",
                               details=" / ".join(err[-5:])) from exc


def _need(program: str, package: str) -> None:
    """Install Debian's ``package`` for ``program`` as root; otherwise say how."""
    if shutil.which(program) or Path(program).exists():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise ImageBuildFailed(
            f"building the default images needs {program} (Debian package {package})",
            details=f"install it (`sudo apt-get install {package}`) or run this as root on "
            "Debian, where it is installed for you")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _run(["apt-get", "update", "-qq"], "apt-get update", env=env)
    _run(["apt-get", "install", "-y", "-qq", package], f"installing {package}", env=env)


def rootfs_busybox(work: Path) -> Path:
    """A tarball of busybox-static's applets and the sandbox user."""
    busybox = Path("/bin/busybox")
    _need(str(busybox), "busybox-static")
    root = work / "rootfs"
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "tmp", "root", "home/sandbox",
              "workspace", "proc", "sys", "dev", "var/www"):
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox, root / "bin/busybox")
    applets = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True,
                             check=True).stdout.split()
    for applet in applets:
        target = root / applet
        if applet == "bin/busybox" or target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to("/bin/busybox")
    (root / "etc/passwd").write_text(PASSWD)
    (root / "etc/group").write_text(GROUP)
    os.chmod(root / "tmp", 0o1777)

    def owner(member: tarfile.TarInfo) -> tarfile.TarInfo:
        # Owners set here, not taken from the builder: root's, and the sandbox user's home,
        # whoever builds (root is not needed for this image).
        uid = 1000 if member.name in ("./home/sandbox", "home/sandbox") else 0
        member.uid = member.gid = uid
        if member.name in ("./workspace", "workspace"):
            member.uid, member.gid = WORKSPACE_OWNER
            member.mode = WORKSPACE_MODE
        member.uname = member.gname = ""
        return member

    tarball = work / "busybox.tar"
    with tarfile.open(tarball, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(root, arcname=".", filter=owner)
    return tarball


def rootfs_python(work: Path) -> Path:
    """A tarball of Debian bookworm with python3 and git, from this machine's Debian sources."""
    _need("mmdebstrap", "mmdebstrap")
    if os.geteuid() != 0:
        raise ImageBuildFailed("building sandbox-python needs root (mmdebstrap as root)",
                               details="run `sudo python -m sandbox images`")
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    legacy = Path("/etc/apt/sources.list")
    source = deb822 if deb822.exists() else legacy
    if not source.exists():
        raise ImageBuildFailed("building sandbox-python needs Debian's apt sources",
                               details=f"neither {deb822} nor {legacy} exists")
    tarball = work / "python.tar"
    uid, gid = WORKSPACE_OWNER
    hook = ("chroot \"$1\" sh -c 'groupadd -g 1000 sandbox && "
            "useradd -m -u 1000 -g 1000 -s /bin/bash sandbox && mkdir -p /workspace && "
            f"chown {uid}:{gid} /workspace && chmod {WORKSPACE_MODE:o} /workspace'")
    _run(["mmdebstrap", "--quiet", "--variant=minbase",
          "--include=python3,git,ca-certificates,procps", f"--customize-hook={hook}",
          "--aptopt=APT::Install-Recommends \"false\"", "bookworm", str(tarball), "-"],
         "mmdebstrap", input=source.read_bytes())
    return tarball


#: Short name -> (image, root filesystem builder).
BUILDERS: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "busybox": (IMAGE_BUSYBOX, rootfs_busybox),
    "python": (IMAGE_PYTHON, rootfs_python),
}


async def _import(engine: Engine, tarball: Path, image: str, progress: Progress) -> None:
    """Import a root filesystem tarball as ``image`` through the engine API."""
    repo, _, tag = image.rpartition(":")
    size = (await anyio.Path(tarball).stat()).st_size
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        async with await anyio.open_file(tarball, "rb") as f:
            while chunk := await f.read(_CHUNK):
                sent += len(chunk)
                progress.update(f"importing {image}: {human_bytes(sent)} of "
                                f"{human_bytes(size)}")
                yield chunk

    # `changes` repeats, which a params mapping cannot say: the query is written here.
    query = urllib.parse.urlencode({"fromSrc": "-", "repo": repo, "tag": tag,
                                    "changes": [f"ENV {ENV_PATH}", 'CMD ["/bin/sh"]']},
                                   doseq=True)
    answer = await engine.request(f"import image {image!r}", f"images/create?{query}", "POST",
                                  data=body(),
                                  headers={"Content-Type": "application/x-tar"},
                                  deadline=IMPORT_TIMEOUT)
    for line in answer.decode(errors="replace").splitlines():
        record = json.loads(line) if line.strip().startswith("{") else {}
        if isinstance(record, dict) and record.get("error"):
            raise ImageBuildFailed(f"the engine could not import {image!r}",
                                   details=str(record["error"]))


async def _ticking(progress: Progress, text: str, work: Callable[[], Path]) -> Path:
    """Run blocking ``work`` in a thread while the progress line counts the seconds."""
    async with anyio.create_task_group() as tg:
        async def tick() -> None:
            while True:
                progress.update(text)
                await anyio.sleep(0.5)

        tg.start_soon(tick)
        try:
            made = await anyio.to_thread.run_sync(work)
        finally:
            tg.cancel_scope.cancel()
    return made


async def build_images(*, only: str | None = None, rebuild: bool = False, tag: str = "",
                       quiet: bool = False, say: Say | None = None) -> list[Outcome]:
    """Make sure the default images exist on the engine (DOCKER_HOST), building what is
    missing (everything with ``rebuild``). ``tag`` builds the one image ``only`` names under
    another name."""
    from ._gateway import Engine, new_client
    from ._images import inspect_image

    if tag and not only:
        raise ImageBuildFailed("--tag needs --only: it names one image")
    progress = Progress(quiet=quiet)
    outcomes: list[Outcome] = []
    client = new_client()
    try:
        engine = Engine(client)
        for key, (default, make_rootfs) in BUILDERS.items():
            if only and key != only:
                continue
            image = tag or default
            if not rebuild and await inspect_image(engine, image) is not None:
                outcomes.append(Outcome(image, "present"))
                if say:
                    say(f"{image} is present")
                continue
            progress.start()
            with tempfile.TemporaryDirectory(prefix="sandbox-image-") as tmp:
                try:
                    tarball = await _ticking(progress, f"building {image}: making its root "
                                             "filesystem", functools.partial(make_rootfs,
                                                                             Path(tmp)))
                    await _import(engine, tarball, image, progress)
                finally:
                    progress.done()
            outcomes.append(Outcome(image, "built"))
            if say:
                say(f"built {image}")
    finally:
        await client.close()
    return outcomes
