"""``sandbox images``: build the SDK's default images here (``sandbox.docker._image_build``)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

__all__ = ["add"]


def add(sub: Any, common: argparse.ArgumentParser) -> None:
    from ..docker._image_build import BUILDERS

    p = sub.add_parser(
        "images", parents=[common], help="build the default images (no registry needed)",
        description="Make sure the SDK's default images (sandbox-busybox:latest, "
        "sandbox-python:latest) are on the engine, building the missing ones from this "
        "machine's Debian packages (busybox-static, mmdebstrap; installed when run as root). "
        "Images already there are kept, so a second run is a quick check.",
    )
    p.add_argument("--rebuild", action="store_true", help="build even if the image exists")
    p.add_argument("--only", choices=sorted(BUILDERS), help="just this image")
    p.add_argument("--tag", default="", metavar="NAME",
                   help="with --only: build it under this name instead (e.g. to try a build)")
    p.set_defaults(run=run, parser=p)


def run(args: argparse.Namespace) -> int:
    from ..docker._image_build import build_images
    from ._common import usage_error

    if args.tag and not args.only:
        usage_error(args, "--tag needs --only: it names one image")
    quiet = bool(getattr(args, "quiet", False))

    def say(line: str) -> None:
        if not quiet:
            print(f"images: {line}", file=sys.stderr, flush=True)

    asyncio.run(build_images(only=args.only, rebuild=args.rebuild, tag=args.tag, quiet=quiet,
                             say=say))
    return 0
