"""File operations done by exec'd POSIX tools (sh, cat, tar, stat), run as the sandbox's user.

Exec rather than the engine's archive API: the archive API cannot see tmpfs mounts, fails on a
read-only root even for writable mounts, and writes as root whatever user the sandbox runs as.
Through exec, permissions are the sandbox user's own, and every mount behaves as inside.
"""

from __future__ import annotations

import functools
import posixpath
import stat as stat_mod
import tarfile
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol

import anyio
import attrs

from .._archive import TarSpool, check_limits, extract_tar
from .._constants import DEFAULT_COPY_MAX_BYTES, DEFAULT_COPY_MAX_ENTRIES
from .._errors import (
    FileOperationFailed,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPermissionDenied,
)
from .._models import CommandResult, FileInfo

#: read_file refuses larger files (it returns them whole); copy_files streams to disk instead.
DEFAULT_READ_LIMIT = 1 << 30
_SPOOL = 64 << 20

_READ_SH = r"""f="$1"; lim="$2"
[ -e "$f" ] || [ -L "$f" ] || { echo "No such file or directory" >&2; exit 2; }
[ -d "$f" ] && { echo "Is a directory" >&2; exit 21; }
[ -e "$f" ] || { echo "No such file or directory" >&2; exit 2; }
[ -f "$f" ] || { echo "Not a regular file (a device, FIFO or socket has no end)" >&2; exit 22; }
s=$(stat -L -c %s -- "$f") || exit 1
[ "$s" -gt "$lim" ] && { echo "File too large: $s bytes, over the limit of $lim" >&2; exit 27; }
exec head -c "$((lim + 1))" -- "$f"
"""

_WRITE_SH = r"""f="$1"; m="$2"
[ -d "$f" ] && { echo "Is a directory" >&2; exit 21; }
mkdir -p -- "$(dirname -- "$f")" || exit 1
cat > "$f" || exit 1
chmod "$m" -- "$f"
"""

# A line per entry: hex mode/size/mtime/uid/gid/owner/group/name; a symlink adds "->target".
_LIST_SH = r"""p="$1"
[ -e "$p" ] || [ -L "$p" ] || { echo "No such file or directory" >&2; exit 2; }
one() { stat -c '%f/%s/%Y/%u/%g/%U/%G/%n' -- "$1" || return
  [ -L "$1" ] && printf '%s\n' "->$(readlink -- "$1")"; return 0; }
if [ -d "$p" ] && [ ! -L "$p" ]; then
  for e in "$p"/* "$p"/.[!.]* "$p"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    one "$e"
  done
else
  one "$p"
fi
"""

_KIND_SH = r"""if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; else echo none; fi
"""

_UNTAR_SH = r"""mkdir -p -- "$1" && exec tar -x -f - -C "$1" """

_TAR_SH = r"""[ -e "$1/$2" ] || [ -L "$1/$2" ] || { echo "No such file or directory" >&2; exit 2; }
exec tar -c -f - -C "$1" -- "$2" """


class Runner(Protocol):
    """How file operations run a helper command in the sandbox."""

    def __call__(
        self, argv: Sequence[str], *, stdin: bytes | AsyncIterator[bytes] | None = None,
        on_stdout: Callable[[bytes], object] | None = None,
    ) -> Awaitable[CommandResult]: ...


def raise_for(result: CommandResult, op: str, path: str) -> None:
    """Raise the FileOperationFailed subclass matching a failed helper's message."""
    if result.success:
        return
    msg = (result.stderr or result.stdout or result.error).strip()
    low = msg.lower()
    what = f"{op} {path!r} failed"
    if "no such file" in low:
        raise SandboxFileNotFound(f"{what}: no such file or directory", path=path, details=msg)
    if "is a directory" in low:
        raise SandboxIsADirectory(f"{what}: it is a directory", path=path, details=msg)
    if "read-only file system" in low:
        raise SandboxPermissionDenied(f"{what}: read-only file system", path=path, details=msg)
    if "permission denied" in low or "operation not permitted" in low:
        raise SandboxPermissionDenied(f"{what}: permission denied", path=path, details=msg)
    if "not a directory" in low:
        raise SandboxFileNotFound(f"{what}: a parent is not a directory", path=path, details=msg)
    raise FileOperationFailed(what, path=path, details=msg or f"exit code {result.exit_code}")


async def read_file(run: Runner, path: str, *, limit: int = DEFAULT_READ_LIMIT) -> bytes:
    parts: list[bytes] = []
    result = await run(["/bin/sh", "-c", _READ_SH, "sandbox-read", path, str(limit)],
                       on_stdout=parts.append)
    if result.exit_code == 27:
        raise FileOperationFailed(
            f"read {path!r} refused: the file is larger than read_file's limit",
            path=path,
            details=f"{result.stderr.strip()}; use copy_files('sandbox:{path}', host_path), "
            "which streams to disk",
        )
    if result.exit_code == 22:
        raise FileOperationFailed(
            f"read {path!r} refused: it is not a regular file", path=path,
            details=f"{result.stderr.strip()}; read a bounded amount with execute_command, "
                    f"e.g. ['head', '-c', '4096', {path!r}]",
        )
    raise_for(result, "read", path)
    data = b"".join(parts)
    if len(data) > limit:
        raise FileOperationFailed(
            f"read {path!r} refused: the file grew past read_file's limit while being read",
            path=path, details=f"limit {limit} bytes; use copy_files('sandbox:{path}', host_path)",
        )
    return data


async def write_file(run: Runner, path: str, content: bytes, mode: int) -> None:
    result = await run(["/bin/sh", "-c", _WRITE_SH, "sandbox-write", path, f"{mode:o}"],
                       stdin=content)
    raise_for(result, "write", path)


def _permissions(mode: int) -> str:
    return stat_mod.filemode(mode)


def parse_listing(text: str, base: str) -> list[FileInfo]:
    """Parse the output of the list script into FileInfo values."""
    infos: list[FileInfo] = []
    for line in text.splitlines():
        if line.startswith("->") and infos:
            infos[-1] = _with_target(infos[-1], line[2:])
            continue
        fields = line.split("/", 7)
        if len(fields) != 8:
            continue
        hexmode, size, mtime, uid, gid, owner, group, name = fields
        mode = int(hexmode, 16)
        full = posixpath.normpath(name) if name.startswith("/") else posixpath.join(base, name)
        infos.append(FileInfo(
            name=posixpath.basename(full) or full,
            path=full,
            size=int(size),
            mode=stat_mod.S_IMODE(mode),
            mod_time=datetime.fromtimestamp(int(mtime), UTC),
            is_dir=stat_mod.S_ISDIR(mode),
            owner=uid if owner in ("UNKNOWN", "") else owner,
            group=gid if group in ("UNKNOWN", "") else group,
            permissions=_permissions(mode),
            is_symlink=stat_mod.S_ISLNK(mode),
        ))
    return infos


def _with_target(info: FileInfo, target: str) -> FileInfo:
    return attrs.evolve(info, link_target=target)


async def list_files(run: Runner, path: str) -> list[FileInfo]:
    parts: list[bytes] = []
    result = await run(["/bin/sh", "-c", _LIST_SH, "sandbox-list", path], on_stdout=parts.append)
    raise_for(result, "list", path)
    return parse_listing(b"".join(parts).decode("utf-8", "replace"), path)


async def path_kind(run: Runner, path: str) -> str:
    parts: list[bytes] = []
    result = await run(["/bin/sh", "-c", _KIND_SH, "sandbox-kind", path], on_stdout=parts.append)
    raise_for(result, "inspect", path)
    return b"".join(parts).decode().strip()


# -- copy between host and sandbox -----------------------------------------------------------


def _tar_host_path(src: Path, arcname: str, out: IO[bytes]) -> None:
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        tf.add(str(src), arcname=arcname, recursive=True)


async def _file_chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        chunk = await anyio.to_thread.run_sync(f.read, 1 << 20)
        if not chunk:
            return
        yield chunk


async def copy_to_sandbox(run: Runner, src: Path, dest: str) -> None:
    """Copy a host file or tree into the sandbox with ``docker cp`` semantics, in one archive."""
    if not await anyio.Path(src).exists():
        raise SandboxFileNotFound(f"copy {str(src)!r} failed: no such file on the host",
                                  path=str(src))
    kind = await path_kind(run, dest)
    if kind == "dir":
        target_dir, arcname = dest, src.name
    else:
        target_dir, arcname = posixpath.dirname(dest) or "/", posixpath.basename(dest)
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
        await anyio.to_thread.run_sync(_tar_host_path, src, arcname, spool)
        spool.seek(0)
        result = await run(["/bin/sh", "-c", _UNTAR_SH, "sandbox-untar", target_dir],
                           stdin=_file_chunks(spool))
    raise_for(result, "copy into", dest)


async def copy_from_sandbox(
    run: Runner, src: str, dest: Path, *, max_bytes: int = DEFAULT_COPY_MAX_BYTES,
    max_entries: int = DEFAULT_COPY_MAX_ENTRIES,
) -> None:
    """Copy a sandbox file or tree to the host, streamed through a bounded temporary file.

    The archive is unpacked by `extract_tar` under the copy-out rules (see sandbox/_archive.py):
    built beside the destination, moved into place only when every member passed.
    """
    check_limits(max_bytes, max_entries)
    parent, base = posixpath.dirname(src) or "/", posixpath.basename(src.rstrip("/"))
    target = dest / base if await anyio.Path(dest).is_dir() else dest
    if not await anyio.Path(target.parent).is_dir():
        raise SandboxFileNotFound(
            f"copy to {str(dest)!r} failed: the host directory {str(target.parent)!r} does not "
            "exist", path=str(dest))
    with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
        sink = TarSpool(spool, source=src, max_bytes=max_bytes, max_entries=max_entries)
        result = await run(["/bin/sh", "-c", _TAR_SH, "sandbox-tar", parent, base],
                           on_stdout=sink.write)
        raise_for(result, "copy from", src)
        spool.seek(0)
        await anyio.to_thread.run_sync(functools.partial(
            extract_tar, spool, target, base, source=src, max_bytes=max_bytes,
            max_entries=max_entries))


def resolve(cwd: str, path: str) -> str:
    """Resolve a sandbox path against the working directory and normalize ``..``."""
    if not path:
        raise FileOperationFailed("an empty path was given", path=path)
    if "\0" in path:
        raise FileOperationFailed("the path contains a NUL byte", path=path)
    joined = path if path.startswith("/") else posixpath.join(cwd, path)
    norm = posixpath.normpath(joined)
    return "/" + norm.lstrip("/")

