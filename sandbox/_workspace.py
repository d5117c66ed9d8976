"""Put a repository into the sandbox: a live bind mount, a fresh checkout, or a filtered copy.

Three modes, picked from the `RepositoryConfig`:

* live: ``local_path`` without filters is bind-mounted as it is. Edits made inside are edits of
  the user's directory; the SDK never changes its ownership or content on its own. Writable,
  the sandbox runs as the directory's owner (`live_mount_user`; root's is refused), and at
  cleanup set-id bits set during the sandbox's life are stripped and links pointing outside
  are reported (`sandbox._live_mount`): the one mode change the SDK makes there.
* mounted copy: ``read_only`` with ``url`` or filters. A host directory the SDK owns (the
  checkout, or a filtered copy of it) is bind-mounted read-only, so every write fails with EROFS.
* container copy: read-write with ``url`` or filters. The selected files are streamed into the
  container's own filesystem as one tar, owned by the sandbox user; results come back with
  ``copy_files("sandbox:/workspace/...", host_path)``.

Clones go through a bare mirror per URL under the user's cache directory (`sandbox._git`), then
a fresh local clone per sandbox in a temporary directory that cleanup removes; include and
exclude globs are `sandbox._glob`'s.
"""

from __future__ import annotations

import enum
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

import anyio

from ._audit import Auditor
from ._constants import DEFAULT_CLEANUP_TIMEOUT
from ._errors import SandboxInitFailed
from ._git import checkout
from ._glob import PathFilter, select_entries
from ._helper_files import file_chunks
from ._live_mount import scan_live_mount
from ._models import CommandResult, RepositoryConfig
from ._rmtree import remove_tree

#: Environment for every host git call: never prompt for credentials, stable messages.
TEMP_PREFIX = "sandbox-repo-"
_SPOOL = 64 << 20
_NUMERIC = re.compile(r"\d+")

_UNTAR_SH = r"""d="$1"; mkdir -p -- "$d" && exec tar -x -f - -C "$d" """

_OWN_SH = r"""d="$1"; o="$2"; m="$3"
if [ -n "$o" ]; then chown -hR -- "$o" "$d" || exit 1; fi
if [ -n "$m" ]; then chmod -- "$m" "$d" || exit 1; fi
"""

# Pairs of (key, value) follow the script name; exit 127 tells "no git" from a bad key.
# git's global file lives in $HOME; on a read-only root (or a uid whose home is /) that cannot
# be written, so the file goes to /tmp and GIT_CONFIG_GLOBAL (git >= 2.32) points every later
# command at it. The script prints that assignment for the sandbox to export.
_GIT_CONFIG_SH = r"""command -v git >/dev/null 2>&1 || { echo "git: not found" >&2; exit 127; }
h="${HOME:-/}"
# Probe by writing: git needs a lock file beside .gitconfig, and test -w ignores a read-only fs.
if ( : > "$h/.sandbox-probe-$$" ) 2>/dev/null; then rm -f "$h/.sandbox-probe-$$"; else
  export GIT_CONFIG_GLOBAL="/tmp/.gitconfig-$(id -u)"
  : >> "$GIT_CONFIG_GLOBAL" || exit 1
  echo "GIT_CONFIG_GLOBAL=$GIT_CONFIG_GLOBAL"
fi
while [ $# -ge 2 ]; do
  git config --global --replace-all -- "$1" "$2" || exit 1
  shift 2
done
"""


class Mode(enum.Enum):
    """How the repository reaches the sandbox."""

    LIVE = "live"
    MOUNTED_COPY = "mounted-copy"
    CONTAINER_COPY = "container-copy"


class Runner(Protocol):
    """Runs a helper command in the sandbox as a given user (None: the sandbox user)."""

    def __call__(
        self, argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
        user: str | None = None,
    ) -> Awaitable[CommandResult]: ...


def write_tar(root: Path, entries: Sequence[str], out: IO[bytes]) -> None:
    """Archive ``entries`` of ``root`` owned by root (the sandbox re-owns them)."""

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        for rel in entries:
            tf.add(str(root / rel), arcname=rel, recursive=False, filter=owned_by_root)


def stage_copy(root: Path, entries: Sequence[str], dest: Path) -> None:
    """Copy ``entries`` of ``root`` into the existing directory ``dest``, links as links."""
    for rel in entries:
        src, dst = root / rel, dest / rel
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_dir():
            dst.mkdir()
            shutil.copymode(src, dst)
        else:
            shutil.copy2(src, dst, follow_symlinks=False)


def is_within(path: str, mount_point: str) -> bool:
    """``path`` is ``mount_point`` or below it (both absolute POSIX paths)."""
    path, mount_point = posixpath.normpath(path), posixpath.normpath(mount_point)
    return path == mount_point or path.startswith(mount_point.rstrip("/") + "/")


# -- the workspace ---------------------------------------------------------------------------


def _mode_of(repo: RepositoryConfig) -> Mode:
    if repo.local_path and not (repo.include_files or repo.exclude_files):
        return Mode.LIVE
    return Mode.MOUNTED_COPY if repo.read_only else Mode.CONTAINER_COPY


def _check(repo: RepositoryConfig) -> None:
    """Refuse configurations that cannot be honoured, before anything is created."""
    if bool(repo.url) == bool(repo.local_path):
        raise SandboxInitFailed("repository needs exactly one of url and local_path",
                                details=f"url={repo.url!r} local_path={repo.local_path!r}")
    mp = repo.mount_point
    if not mp.startswith("/") or posixpath.normpath(mp) == "/" or "\0" in mp or ":" in mp:
        raise SandboxInitFailed(f"repository mount_point {mp!r} must be an absolute path "
                                "other than '/' (and without ':')")
    if repo.local_path and (repo.branch or repo.commit_hash):
        raise SandboxInitFailed("repository branch and commit_hash need a url; a local_path "
                                "is used as it is")
    for name in ("branch", "commit_hash"):
        value: str = getattr(repo, name)
        if value.startswith("-"):
            raise SandboxInitFailed(f"repository {name} {value!r} must not start with '-'")
    try:
        PathFilter(repo.include_files, repo.exclude_files)
    except ValueError as exc:
        raise SandboxInitFailed(f"invalid repository glob: {exc}") from exc
    mode = _mode_of(repo)
    if mode is Mode.LIVE and (repo.owner or repo.group or repo.permissions):
        raise SandboxInitFailed(
            "repository owner/group/permissions would change your host directory "
            f"{repo.local_path!r}, which a live mount never does",
            details="to give the sandbox its own copy with that ownership, add "
                    "exclude_files (e.g. ['.git/hooks']) or include_files=['**']; or change "
                    "the directory's ownership on the host yourself",
        )
    if mode is Mode.MOUNTED_COPY:
        for name in ("owner", "group"):
            value = getattr(repo, name)
            if value and not _NUMERIC.fullmatch(value):
                raise SandboxInitFailed(
                    f"repository {name} {value!r} must be numeric for a read-only copy",
                    details="a read-only copy is prepared on the host, where names of the "
                            "image's users mean nothing")


async def live_mount_user(repo: RepositoryConfig | None) -> str:
    """For a writable live mount, the ``uid:gid`` its owner has on the host ("" otherwise).

    The sandbox user becomes that owner (the devcontainer convention): the agent can edit the
    checkout, and its edits come back owned by the user. A root-owned checkout is refused
    here, because only root could write it.

    Raises:
        SandboxInitFailed: The directory is root's; the message names the ways out.
    """
    if repo is None or _mode_of(repo) is not Mode.LIVE or repo.read_only:
        return ""
    _check(repo)  # a config that cannot be honoured is named first
    try:
        st = await (await anyio.Path(repo.local_path).expanduser()).stat()
    except OSError:
        return ""  # `Workspace.prepare` names a missing directory
    if st.st_uid == 0:
        raise SandboxInitFailed(
            f"repository local_path {repo.local_path!r} is owned by root, so the sandbox's "
            "non-root user could not write it, and a writable live mount runs as the "
            "directory's owner",
            details="choose one: security.run_as_user='0' (root inside the sandbox, without "
                    "capabilities; audited), or a copy the sandbox owns and cannot use to "
                    "reach your directory: include_files=['**'] (take results back with "
                    "copy_files), or read_only=True, or chown the directory to a non-root "
                    "user")
    # A root group would give the sandbox root's group: the owner's uid serves as gid then.
    return f"{st.st_uid}:{st.st_gid or st.st_uid}"


class Workspace:
    """What the SDK made on the host for one sandbox's repository, and how to undo it."""

    def __init__(self, repo: RepositoryConfig | None) -> None:
        self.repo = repo
        self.mode = _mode_of(repo) if repo is not None else None
        self._temp_dirs: list[Path] = []
        self._source: Path | None = None
        self._entries: list[str] | None = None
        self.mount_source: Path | None = None
        self._sandbox_user = ""
        self._since: float | None = None  # when a live mount was handed to the sandbox

    def covers(self, path: str) -> bool:
        """``path`` lies in a bind mount, where the SDK must not create or chown anything."""
        return (self.repo is not None and self.mode is not Mode.CONTAINER_COPY
                and is_within(path, self.repo.mount_point))

    async def _mkdtemp(self) -> Path:
        path = Path(await anyio.to_thread.run_sync(lambda: tempfile.mkdtemp(prefix=TEMP_PREFIX)))
        self._temp_dirs.append(path)
        return path

    async def prepare(self, body: dict[str, Any], *, sandbox_user: str = "") -> None:
        """Before create: fetch or check the source, stage a copy, add the bind mount to body.

        `sandbox_user` ("uid:gid") gets the root of a read-only copy that names no owner: the
        copy is a private 0700 temp dir, which a non-root sandbox user could not even list.
        """
        self._sandbox_user = sandbox_user
        repo = self.repo
        if repo is None:
            return
        _check(repo)
        if repo.local_path:
            local = await anyio.Path(repo.local_path).expanduser()
            if not await local.is_dir():
                raise SandboxInitFailed(
                    f"repository local_path {repo.local_path!r} is not an existing directory")
            source = Path(await local.resolve())
        else:
            source = await self._mkdtemp()
            await checkout(repo, source)
        self._source = source
        path_filter = PathFilter(repo.include_files, repo.exclude_files)
        filtered = bool(repo.include_files or repo.exclude_files)
        if filtered:
            self._entries = await anyio.to_thread.run_sync(select_entries, source, path_filter)
        if self.mode is Mode.LIVE:
            self.mount_source = source
            self._since = time.time()
        elif self.mode is Mode.MOUNTED_COPY:
            if filtered:
                staged = await self._mkdtemp()
                assert self._entries is not None
                await anyio.to_thread.run_sync(stage_copy, source, self._entries, staged)
                source = staged
            await anyio.to_thread.run_sync(self._own_on_host, source)
            self.mount_source = source
        if self.mount_source is not None:
            host = body.setdefault("HostConfig", {})
            mounts = list(host.get("Mounts") or [])
            mounts.append({
                "Type": "bind", "Source": str(self.mount_source), "Target": repo.mount_point,
                "ReadOnly": repo.read_only,
                # rprivate: mounts made later on the host never show up inside.
                "BindOptions": {"Propagation": "rprivate"},
            })
            host["Mounts"] = mounts
            # read_only_root puts a scratch tmpfs on the working dir; at the same path it would
            # hide the repository (and the engine refuses duplicate mount points).
            tmpfs = host.get("Tmpfs") or {}
            tmpfs.pop(posixpath.normpath(repo.mount_point), None)

    def _own_on_host(self, root: Path) -> None:
        """Apply permissions and numeric owner/group to a copy the SDK owns (blocking)."""
        repo = self.repo
        assert repo is not None
        if repo.owner or repo.group:
            uid = int(repo.owner) if repo.owner else -1
            gid = int(repo.group) if repo.group else -1
            try:
                for dirpath, dirnames, filenames in os.walk(root):
                    for name in (*dirnames, *filenames):
                        os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)
                os.chown(root, uid, gid)
            except PermissionError as exc:
                raise SandboxInitFailed(
                    "cannot give the read-only repository copy the requested owner/group",
                    details=f"{exc}; changing ownership on the host needs root") from exc
        else:
            user, _, group = self._sandbox_user.partition(":")
            if user.isdigit() and group.isdigit() and user != "0":
                try:
                    os.chown(root, int(user), int(group))
                except PermissionError:
                    # Not root on the host: readable by all is the next best (its files keep
                    # the modes they had in the repository).
                    os.chmod(root, 0o755)
        if repo.permissions:
            os.chmod(root, int(repo.permissions, 8))

    async def populate(self, run: Runner, *, sandbox_user: str) -> dict[str, str]:
        """After start: copy files in, set their owner and mode, and configure git.

        Returns environment variables later commands need (where git's config went).
        """
        repo = self.repo
        if repo is None:
            return {}
        if self.mode is Mode.CONTAINER_COPY:
            await self._copy_in(run, sandbox_user)
        return await self._configure_git(run)

    async def _copy_in(self, run: Runner, sandbox_user: str) -> None:
        repo, source = self.repo, self._source
        assert repo is not None and source is not None
        entries = self._entries
        if entries is None:
            entries = await anyio.to_thread.run_sync(select_entries, source, PathFilter())
        # Root in the sandbox has no CAP_CHOWN: a non-root sandbox user unpacks its own copy
        # (so it owns it), and only an explicit owner/group needs root (and CHOWN added).
        as_user = not (repo.owner or repo.group) and \
            sandbox_user.split(":", 1)[0] not in ("", "0", "root")
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            await anyio.to_thread.run_sync(write_tar, source, entries, spool)
            spool.seek(0)
            result = await run(["/bin/sh", "-c", _UNTAR_SH, "sandbox-repo", repo.mount_point],
                               stdin=file_chunks(spool),
                               user=sandbox_user if as_user else "0:0")
        if not result.success:
            hint = ("; put mount_point inside the working dir, where the sandbox user can "
                    "write; with security.read_only_root, on the working dir or in "
                    "security.tmpfs_paths")
            raise SandboxInitFailed(
                f"could not copy the repository into the sandbox at {repo.mount_point!r}",
                details=(result.stderr or result.error).strip() + hint)
        owner = repo.owner
        if repo.group:
            owner = f"{owner}:{repo.group}"
        if owner or repo.permissions:
            result = await run(["/bin/sh", "-c", _OWN_SH, "sandbox-own", repo.mount_point,
                                owner, repo.permissions],
                               user=sandbox_user if as_user else "0:0")
            if not result.success:
                raise SandboxInitFailed(
                    f"could not set owner {owner!r} / permissions {repo.permissions!r} on "
                    f"{repo.mount_point!r}", details=(result.stderr or result.error).strip()
                    + ("; changing the owner needs security.add_capabilities=('CHOWN',)"
                       if owner else ""))
        # The sandbox has its copy; the host checkout is no longer needed.
        if repo.url:
            await self._remove_temp(source)

    async def _configure_git(self, run: Runner) -> dict[str, str]:
        repo = self.repo
        assert repo is not None
        gc = repo.git_config
        wanted = [("user.name", gc.user_name), ("user.email", gc.user_email),
                  ("user.signingkey", gc.signing_key)]
        pairs = [(k, v) for k, v in wanted if v] + list(gc.config_values.items())
        # The mount may belong to another uid; without this, git refuses to work in it.
        argv = ["/bin/sh", "-c", _GIT_CONFIG_SH, "sandbox-git"]
        for key, value in [*pairs, ("safe.directory", repo.mount_point)]:
            argv += [key, value]
        result = await run(argv)
        if result.exit_code == 127:
            if pairs:
                raise SandboxInitFailed(
                    "repository git_config is set, but the image lacks git",
                    details="use an image with git (e.g. sandbox-python:latest) or drop "
                            "git_config")
            return {}  # nothing was asked for explicitly; a git-less image simply has no git
        if not result.success:
            raise SandboxInitFailed("could not apply repository git_config in the sandbox",
                                    details=(result.stderr or result.error).strip())
        key, _, value = result.stdout.strip().partition("=")
        return {key: value} if key == "GIT_CONFIG_GLOBAL" and value else {}

    @property
    def left(self) -> list[str]:
        """The temporary copies not removed (yet)."""
        return [str(path) for path in self._temp_dirs]

    async def _remove_temp(self, path: Path) -> None:
        # A clone's tree is the repository's to shape: remove_tree takes any depth or mode.
        left = await anyio.to_thread.run_sync(remove_tree, path)
        if left or await anyio.Path(path).exists():
            raise OSError(f"could not remove {path}: {'; '.join(left)}")
        self._temp_dirs.remove(path)

    async def remove(self, audit: Auditor | None = None) -> list[str]:
        """Delete the SDK's temporary checkouts and copies; never the user's directory.

        A live mount is checked instead (`_live_mount`): set-id bits the sandbox set there are
        stripped, and those and links pointing outside it are reported to ``audit``.
        """
        errors: list[str] = []
        if self.mode is Mode.LIVE and self.mount_source is not None and \
                self.repo is not None and not self.repo.read_only and self._since is not None:
            source, since, self._since = str(self.mount_source), self._since, None
            try:
                findings = await anyio.to_thread.run_sync(scan_live_mount, source, since)
            except OSError as exc:
                errors.append(f"check the live repository mount {source}: {exc}")
                findings = []
            for finding in findings:
                if audit is not None:
                    audit.live_mount(finding.kind, finding.path, finding.detail)
        if not self._temp_dirs:
            return errors  # most sandboxes: no cancel scope to open on every cleanup
        with anyio.move_on_after(DEFAULT_CLEANUP_TIMEOUT) as scope:
            for path in list(self._temp_dirs):
                try:
                    await self._remove_temp(path)
                except OSError as exc:
                    errors.append(f"remove temporary repository copy {path}: {exc}")
        if scope.cancelled_caught:
            errors.append(f"removing temporary repository copies timed out: {self._temp_dirs}")
        return errors
