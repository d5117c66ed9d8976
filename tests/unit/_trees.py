"""A small host tree for the repository selection and copy tests: files, modes, links."""

from __future__ import annotations

import os
from pathlib import Path


def sample_tree(root: Path) -> None:
    """Fill `root` with sources, junk to exclude, an empty dir, a link in and a dangling link."""
    for rel, text in {
        "README.md": "hi", "setup.py": "", "src/pkg/__init__.py": "", "src/pkg/mod.py": "x",
        "src/pkg/mod.pyc": "", "src/data/blob.bin": "b", ".env": "SECRET=1",
        "node_modules/a/index.js": "", ".git/HEAD": "ref: refs/heads/main\n",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "empty").mkdir()
    (root / "link-to-src").symlink_to("src")
    (root / "dangling").symlink_to("/nonexistent/target")
    os.chmod(root / "setup.py", 0o755)
