#!/usr/bin/env python3
"""Build the local test images without any registry: busybox-static and Debian bookworm.

Usage: python3 scripts/images.py [--rebuild] [--only busybox|python]

Idempotent: an image that exists is kept unless --rebuild. The image names come from
sandbox/_constants.py, the one place they are defined. Needs root on Debian (it installs
busybox-static and mmdebstrap when missing) and an engine that answers (scripts/engine.sh).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType


def _load_constants() -> ModuleType:
    """Read sandbox/_constants.py alone: the package needs its dependencies, this must not."""
    path = Path(__file__).resolve().parent.parent / "sandbox" / "_constants.py"
    spec = importlib.util.spec_from_file_location("sandbox_constants", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_CONSTANTS = _load_constants()
IMAGE_BUSYBOX: str = _CONSTANTS.IMAGE_BUSYBOX
IMAGE_PYTHON: str = _CONSTANTS.IMAGE_PYTHON

ENV_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PASSWD = (
    "root:x:0:0:root:/root:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    "sandbox:x:1000:1000:sandbox user:/home/sandbox:/bin/sh\n"
)
GROUP = "root:x:0:\nnogroup:x:65534:\nsandbox:x:1000:\n"


def say(msg: str) -> None:
    print(f"images: {msg}", file=sys.stderr, flush=True)


def exists(image: str) -> bool:
    probe = subprocess.run(["docker", "image", "inspect", image], capture_output=True)
    return probe.returncode == 0


_apt_updated = False


def apt_install(*packages: str) -> None:
    """Install Debian packages; refresh the package lists first (once per run).

    On a fresh machine the lists may be empty (engine.sh refreshes them only when it installs
    something itself), so an install without ``apt-get update`` could find nothing.
    """
    global _apt_updated
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    say(f"installing {' '.join(packages)} from Debian's packages")
    if not _apt_updated:
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        _apt_updated = True
    subprocess.run(["apt-get", "install", "-y", "-qq", *packages], check=True, env=env,
                   stdout=subprocess.DEVNULL)


def docker_import(tarball: Path, image: str) -> None:
    subprocess.run(
        ["docker", "import", "--change", f"ENV {ENV_PATH}", "--change", 'CMD ["/bin/sh"]',
         str(tarball), image],
        check=True, stdout=subprocess.DEVNULL,
    )


def build_busybox(work: Path) -> None:
    busybox = Path("/bin/busybox")
    if not busybox.exists():
        apt_install("busybox-static")
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
    os.chown(root / "home/sandbox", 1000, 1000)
    tarball = work / "busybox.tar"
    subprocess.run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tarball), "."],
                   check=True)
    docker_import(tarball, IMAGE_BUSYBOX)


def build_python(work: Path) -> None:
    if shutil.which("mmdebstrap") is None:
        apt_install("mmdebstrap")
    tarball = work / "python.tar"
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    text = (deb822 if deb822.exists() else Path("/etc/apt/sources.list")).read_text()
    # A user with a home, so tests and agents can run as an unprivileged account.
    hook = ("chroot \"$1\" sh -c 'groupadd -g 1000 sandbox && "
            "useradd -m -u 1000 -g 1000 -s /bin/bash sandbox && mkdir -p /workspace'")
    subprocess.run(
        ["mmdebstrap", "--quiet", "--variant=minbase",
         "--include=python3,git,ca-certificates,procps",
         f"--customize-hook={hook}", "--aptopt=APT::Install-Recommends \"false\"",
         "bookworm", str(tarball), "-"],
        input=text, text=True, check=True,
    )
    docker_import(tarball, IMAGE_PYTHON)


BUILDERS = {"busybox": (IMAGE_BUSYBOX, build_busybox), "python": (IMAGE_PYTHON, build_python)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rebuild", action="store_true", help="build even if the image exists")
    parser.add_argument("--only", choices=sorted(BUILDERS), help="build just this image")
    args = parser.parse_args()
    for key, (image, build) in BUILDERS.items():
        if args.only and key != args.only:
            continue
        if exists(image) and not args.rebuild:
            say(f"{image} exists")
            continue
        say(f"building {image}")
        with tempfile.TemporaryDirectory(prefix="sandbox-image-") as tmp:
            build(Path(tmp))
        say(f"built {image}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
