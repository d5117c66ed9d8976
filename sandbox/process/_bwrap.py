"""The bubblewrap command line that holds one sandbox's namespaces, from its `ProcessPlan`.

The root filesystem is bound read-only at /; when a mount point the sandbox needs (the
working directory, a tmpfs path) is missing from it, the root is instead a tmpfs made
read-only at the end, holding each top-level entry bound read-only, so the new mount point
needs no write to the shared image cache. The holder process is the keep-alive shell;
commands are spawned into it by its zygote (see `_sandbox`). Also reads names from the image's
/etc/passwd and /etc/group, never through a symlink.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from .._errors import SandboxInitFailed
from ._plan import Lookup, ProcessPlan
from ._repository import RepoBind

__all__ = ["KEEPALIVE", "bwrap_argv", "find_bwrap", "lookup_in", "prepare_state"]

#: The sandbox's main process: says it is ready (the namespaces and mounts are complete) on
#: its stdout, a pipe (a descriptor of 10 or more would be beyond dash's redirections), then
#: lets it go, waits forever and ends on SIGTERM (bwrap is pid 1, reaps).
KEEPALIVE = ("/bin/sh", "-c", "printf ready; exec >/dev/null; trap 'exit 0' TERM; "
             "while :; do sleep 3600 & wait $!; done", "sandbox-keepalive")

#: Directories the sandbox can write, kept on the host in its state directory.
WRITABLE = {"tmp": "/tmp", "vartmp": "/var/tmp"}


def find_bwrap() -> str:
    """The bwrap binary, or a clear error naming the package that provides it."""
    found = shutil.which("bwrap") or next(
        (p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap") if os.access(p, os.X_OK)), None)
    if not found:
        raise SandboxInitFailed(
            "type='process' needs bubblewrap, and no bwrap is installed",
            details="install Debian/Ubuntu's package 'bubblewrap' (apt-get install "
                    "bubblewrap; `make test-tools` does it), or use type='docker'")
    return found


def _is_dir(root: Path, rel: str) -> bool:
    """Whether ``root/rel`` is a directory, with no symlink on the way."""
    path = root
    for part in rel.strip("/").split("/"):
        path = path / part
        try:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                return False
        except OSError:
            return False
    return True


def lookup_in(root: Path) -> Lookup:
    """A `_plan.Lookup` over the root's /etc/passwd and /etc/group (no symlinks followed)."""
    def read(name: str) -> list[list[str]]:
        if not _is_dir(root, "etc"):
            return []
        try:
            fd = os.open(root / "etc" / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return []
        with os.fdopen(fd, "rb") as f:
            text = f.read(1 << 20).decode(errors="replace")
        return [line.split(":") for line in text.splitlines() if line.count(":") >= 3]

    def lookup(kind: str, name: str) -> int | None:
        rows = read("group" if kind == "group" else "passwd")
        column = 3 if kind == "passwd-gid" else 2
        for row in rows:
            if row[0] == name and row[column].isdigit():
                return int(row[column])
        return None
    return lookup


def home_of(root: Path, uid: int) -> str:
    """The home directory /etc/passwd gives ``uid`` if it is a directory below /, else ""."""
    try:
        fd = os.open(root / "etc" / "passwd", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        text = f.read(1 << 20).decode(errors="replace")
    for row in (line.split(":") for line in text.splitlines()):
        if len(row) >= 6 and row[2] == str(uid):
            home = os.path.normpath(row[5])
            if home.startswith("/") and home != "/" and _is_dir(root, home):
                return home
    return ""


def prepare_state(state: Path, owner: tuple[int, int] | None) -> None:
    """Make the sandbox's writable host directories, owned by whoever runs the holder."""
    for name in (*WRITABLE, "work", "home"):
        path = state / name
        path.mkdir(mode=0o700)
        if owner is not None:
            os.chown(path, *owner)
    for name in WRITABLE:
        os.chmod(state / name, 0o1777)


def mount_points(plan: ProcessPlan) -> list[str]:
    """Where the sandbox mounts something over its root (each must exist there)."""
    return ["/proc", "/dev", "/tmp", plan.working_dir, *(p for p, _ in plan.tmpfs),
            *([plan.repository_mount] if plan.repository_mount else [])]


def bwrap_argv(bwrap: str, plan: ProcessPlan, root: Path, state: Path, *, home: str,
               userns_fds: tuple[int, int] = (3, 4), overlay: Path | None = None,
               repo: RepoBind | None = None, seccomp_fd: int = -1,
               holder: int | None = None) -> list[str]:
    """The holder's full command line.

    With ``userns_fds`` (block, info) bwrap waits while the caller writes the uid map itself:
    otherwise an unprivileged bwrap would nest a user namespace (to map the sandbox uid), and
    the namespaces it owns could not be joined from outside it (so no ``--disable-userns``:
    bwrap refuses it beside these; the default seccomp policy denies nested namespaces).
    ``holder`` is the in-namespace id the holder runs as when it is not the sandbox user's
    (root maps two ids); it then starts in / (it cannot enter the sandbox user's
    directories). With ``overlay`` (the merged directory of `_overlay`, for a writable root)
    that is bound at / instead. ``repo`` is the repository's bind (`_repository`), made over
    the working dir and tmpfs.
    """
    userns = ["--userns-block-fd", str(userns_fds[0]), "--info-fd", str(userns_fds[1])]
    argv = [bwrap, "--unshare-user", *userns, "--unshare-pid", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup", "--die-with-parent", "--new-session",
            "--uid", str(plan.uid if holder is None else holder),
            "--gid", str(plan.gid if holder is None else holder), "--hostname", plan.hostname]
    if not plan.host_network:
        argv.append("--unshare-net")
    points = mount_points(plan)
    if overlay is not None:
        argv += ["--bind", str(overlay), "/"]
    elif all(_is_dir(root, p) for p in points if p != "/"):
        # Every mount point exists in the image: bind it whole (one mount, not one per
        # top-level entry on a tmpfs; ~4 ms less here).
        argv += ["--ro-bind", str(root), "/"]
    else:
        argv += ["--tmpfs", "/"]
        for entry in sorted(os.listdir(root)):
            if entry in ("proc", "dev"):
                continue
            source = root / entry
            if os.path.islink(source):
                argv += ["--symlink", os.readlink(source), f"/{entry}"]
            else:
                argv += ["--ro-bind", str(source), f"/{entry}"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for name, target in WRITABLE.items():
        if target == "/tmp" or _is_dir(root, target):
            argv += ["--bind", str(state / name), target]
    covered = [p for p, _ in plan.tmpfs]
    workdir = plan.working_dir
    if workdir != "/" and not any(workdir == p or workdir.startswith(p + "/")
                                  for p in [*covered, *WRITABLE.values()]):
        argv += ["--bind", str(state / "work"), workdir]
    if home and home != workdir and home not in WRITABLE.values():
        argv += ["--bind", str(state / "home"), home]
    for path, extra in plan.tmpfs:
        argv += [*extra, "--tmpfs", path]
    if repo is not None:
        argv += ["--ro-bind" if repo.read_only else "--bind", str(repo.source), repo.target]
    for path in plan.masked_paths:
        if _is_dir(root, path):
            argv += ["--perms", "0000", "--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind-try", "/dev/null", path]
    for path in plan.read_only_paths:
        if path.startswith(("/proc/", "/sys/", "/dev/")) or os.path.lexists(root / path[1:]):
            argv += ["--remount-ro", path]
    if overlay is None:
        argv += ["--remount-ro", "/"]
    if seccomp_fd >= 0:  # the holder too: sandbox code could ptrace its keep-alive shell
        argv += ["--seccomp", str(seccomp_fd)]
    argv += ["--chdir", workdir if holder is None else "/", "--", *KEEPALIVE]
    return argv
