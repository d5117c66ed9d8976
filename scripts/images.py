#!/usr/bin/env python3
"""Build the local test images without any registry: busybox-static and Debian bookworm.

Usage: python scripts/images.py [--rebuild] [--only busybox|python]

The builder ships in the package as ``python -m sandbox images`` (sandbox/docker/_image_build.py);
this script runs it from the checkout, with the interpreter of a virtualenv that has the
package's dependencies (``make images`` uses the project's). Idempotent: an image that exists
is kept unless --rebuild. As root on Debian it installs busybox-static and mmdebstrap when
missing; it needs an engine that answers (scripts/engine.sh).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox._cli import main  # (the checkout first on the path)

if __name__ == "__main__":
    sys.exit(main(["images", *sys.argv[1:]]))
