"""Where a process sandbox keeps its host side, and how a dead owner's leftovers are found.

Each sandbox has a state directory ``<base>/<id>`` holding its writable directories and an
``owner.json`` with the same owner labels the Docker backend puts on containers, plus its
cgroup directories. The holder dies with its owner (bwrap ``--die-with-parent``), so what a
killed owner leaves is this directory and the cgroups; `leftovers` finds them and `remove_state`
removes them (used by cleanup and by ``gc``), ``owner.json`` last.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from .._rmtree import remove_tree
from ._cgroup import SandboxCgroup

__all__ = ["OWNER_FILE", "base_dir", "leftovers", "new_state", "remove_state", "write_owner"]

OWNER_FILE = "owner.json"


def base_dir() -> Path:
    """SANDBOX_PROCESS_STATE, else ``sandbox-sdk-process-<uid>`` in the temp directory."""
    if env := os.environ.get("SANDBOX_PROCESS_STATE"):
        return Path(env)
    return Path(tempfile.gettempdir()) / f"sandbox-sdk-process-{os.getuid()}"


def new_state(sandbox_id: str, labels: Mapping[str, str]) -> Path:
    """Make the sandbox's state directory and record its owner there first."""
    base = base_dir()
    base.mkdir(mode=0o711, exist_ok=True)
    info = os.lstat(base)
    if info.st_uid != os.getuid() or os.path.islink(base):
        raise PermissionError(f"{base} belongs to uid {info.st_uid}, not to us")
    state = base / sandbox_id
    state.mkdir(mode=0o711)
    (state / OWNER_FILE).write_text(json.dumps({"id": sandbox_id, "labels": dict(labels)}))
    return state


def write_owner(state: Path, sandbox_id: str, labels: Mapping[str, str]) -> None:
    """Record a new owner in ``state`` (a spare taken over), replacing the old at once."""
    temp = state / f".{OWNER_FILE}.new"
    temp.write_text(json.dumps({"id": sandbox_id, "labels": dict(labels)}))
    os.replace(temp, state / OWNER_FILE)


def read_owner(state: Path) -> dict[str, str]:
    """The owner labels of a state directory ({} if unreadable)."""
    with contextlib.suppress(OSError, ValueError, TypeError):
        data = json.loads((state / OWNER_FILE).read_text())
        return {str(k): str(v) for k, v in dict(data.get("labels") or {}).items()}
    return {}


def leftovers() -> Iterator[Path]:
    """Every state directory under the base directory."""
    base = base_dir()
    with contextlib.suppress(FileNotFoundError):
        for entry in sorted(base.iterdir()):
            if entry.is_dir() and not entry.is_symlink():
                yield entry


def remove_state(state: Path) -> list[str]:
    """Kill what is left in the sandbox's cgroup, remove it and the state directory.

    The tree is the sandbox's to shape (any depth, modes, links): `remove_tree` takes any of
    it, and removes ``owner.json`` last, only when all else went, so that whatever is left
    stays collectable by ``gc``. Returns what is left, one line each.
    """
    errors = SandboxCgroup(state.name).remove()
    left = remove_tree(state, last=OWNER_FILE)
    if left:
        errors.append(f"the state directory {state} is left, with its {OWNER_FILE} for gc "
                      f"(it removes the rest once this process has exited): {'; '.join(left)}")
    return errors
