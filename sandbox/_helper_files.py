"""File operations done by exec'd POSIX tools (sh, cat, tar, stat), run as the sandbox's user.

Exec rather than the engine's archive API: the archive API cannot see tmpfs mounts, fails on a
read-only root even for writable mounts, and writes as root whatever user the sandbox runs as.
Through exec, permissions are the sandbox user's own, and every mount behaves as inside.
"""

from __future__ import annotations

import functools
import posixpath
import re
import stat as stat_mod
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol

import anyio

from . import _constants
from ._archive import TarSpool, check_limits, extract_tar
from ._constants import DEFAULT_COPY_MAX_BYTES, DEFAULT_COPY_MAX_ENTRIES
from ._errors import (
    FileOperationFailed,
    SandboxFileNotFound,
    SandboxIsADirectory,
    SandboxPermissionDenied,
)
from ._host_tar import write_host_tar
from ._models import CommandResult, FileInfo
from ._paths import resolve as resolve
from ._tasks import single_errors

#: read_file refuses larger files (it returns them whole); copy_files streams to disk instead.
DEFAULT_READ_LIMIT = 1 << 30
_SPOOL = 64 << 20

# $3 is "head" for a read of the first $lim bytes (a larger file is no error); else the whole
# file, refused past $lim, and one byte more asked for to see a file that grew.
_READ_SH = r"""f="$1"; lim="$2"
[ -e "$f" ] || [ -L "$f" ] || { echo "No such file or directory" >&2; exit 2; }
[ -d "$f" ] && { echo "Is a directory" >&2; exit 21; }
[ -e "$f" ] || { echo "No such file or directory" >&2; exit 2; }
[ -f "$f" ] || { echo "Not a regular file (a device, FIFO or socket has no end)" >&2; exit 22; }
[ "$3" = head ] && exec head -c "$lim" -- "$f"
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

# Three NUL-terminated fields per entry: the name as the shell's glob gave it, stat's fields,
# and the symlink target (empty if none). The name never passes through a tool; stat's and
# readlink's output pass through $(...), which cannot carry a NUL, so no name or target can
# forge a record. The "x" guard keeps the trailing newlines of a target.
_LIST_SH = r"""p="$1"
[ -e "$p" ] || [ -L "$p" ] || { echo "No such file or directory" >&2; exit 2; }
one() { v=$(stat -c '%f:%s:%Y:%u:%g:%U:%G' -- "$1") || return; t=
  if [ -L "$1" ]; then t=$(readlink -- "$1"; echo x); t=${t%x}; t=${t%?}; fi
  printf '%s\0%s\0%s\0' "$1" "$v" "$t"; }
if [ -d "$p" ] && [ ! -L "$p" ]; then
  d=${p%/}
  for e in "$d"/* "$d"/.[!.]* "$d"/..?*; do
    [ -e "$e" ] || [ -L "$e" ] || continue
    one "$e" || :
  done
else
  one "$p"
fi
"""

#: list_files stops reading (and kills the helper) past this many entries or bytes of listing.
MAX_LIST_ENTRIES = 100_000
MAX_LIST_BYTES = 64 << 20

_KIND_SH = r"""if [ -d "$1" ]; then echo dir; elif [ -e "$1" ]; then echo file; else echo none; fi
"""

_UNTAR_SH = r"""mkdir -p -- "$1" && exec tar -x -f - -C "$1" """

#: copy in, in one exec: say whether the destination $1 is a directory (the archive is then
#: named after the source and unpacked in it) or not (named after $1, unpacked in its parent
#: $2), then unpack what the SDK sends once it has read that line.
_COPY_IN_SH = r"""if [ -d "$1" ]; then echo dir; t=$1; else echo other; t=$2; fi
mkdir -p -- "$t" && exec tar -x -f - -C "$t" """

#: copy in of a directory, in one exec: the archive holds the tree's contents under "." (so it
#: is the same whatever the answer, and built while the exec starts); they are unpacked in
#: $1/$2 if the destination $1 is a directory (docker cp: the tree lands in it under its own
#: name $2), else in $1 itself.
_COPY_TREE_IN_SH = r"""if [ -d "$1" ]; then echo dir; t=$1/$2; else echo other; t=$1; fi
mkdir -p -- "$t" && exec tar -x -f - -C "$t" """

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


async def read_file(run: Runner, path: str, *, limit: int | None = None,
                    max_bytes: int | None = None) -> bytes:
    """The whole file (refused past ``limit``), or with ``max_bytes`` its first bytes only:
    the tool in the sandbox reads no more, and no more is ever held here."""
    head = max_bytes is not None
    if max_bytes is not None:
        limit = max_bytes
    elif limit is None:
        limit = DEFAULT_READ_LIMIT
    parts: list[bytes] = []
    size = 0

    def take(data: bytes) -> None:
        # Bounded while reading: a `head` replaced by `yes` would otherwise fill our memory.
        nonlocal size
        size += len(data)
        if size > limit:
            raise _overrun(path, limit) if head else _grew(path, limit)
        parts.append(data)

    result = await run(["/bin/sh", "-c", _READ_SH, "sandbox-read", path, str(limit),
                        "head" if head else "whole"], on_stdout=take)
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
    return b"".join(parts)


def _overrun(path: str, limit: int) -> FileOperationFailed:
    return FileOperationFailed(
        f"read {path!r} refused: the sandbox's `head` printed more than the {limit} bytes "
        "asked for", path=path,
        details="a tool in the sandbox was replaced; the read was stopped at the limit")


def _grew(path: str, limit: int) -> FileOperationFailed:
    return FileOperationFailed(
        f"read {path!r} refused: the file grew past read_file's limit while being read",
        path=path, details=f"limit {limit} bytes; use copy_files('sandbox:{path}', host_path)",
    )


async def write_file(run: Runner, path: str, content: bytes, mode: int) -> None:
    result = await run(["/bin/sh", "-c", _WRITE_SH, "sandbox-write", path, f"{mode:o}"],
                       stdin=content)
    raise_for(result, "write", path)


def _permissions(mode: int) -> str:
    return stat_mod.filemode(mode)


_STAT_FIELDS = re.compile(
    rb"([0-9a-fA-F]{1,8}):([0-9]{1,19}):(-?[0-9]{1,12}):([0-9]{1,10}):([0-9]{1,10}):"
    rb"([^:\n]*):([^:\n]*)")


class _Malformed(Exception):
    """A listing record that cannot be what the list script prints."""


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _entry(path_b: bytes, fields: bytes, target: bytes, base: str) -> FileInfo:
    base_b = base.encode()
    prefix = base_b.rstrip(b"/") + b"/"
    if path_b == base_b:
        name_b = posixpath.basename(base_b) or base_b
    elif path_b.startswith(prefix) and path_b[len(prefix):] not in (b"", b".", b"..") \
            and b"/" not in path_b[len(prefix):]:
        name_b = path_b[len(prefix):]
    else:
        raise _Malformed(f"entry {path_b[:200]!r} is not in {base!r}")
    m = _STAT_FIELDS.fullmatch(fields)
    if m is None:
        raise _Malformed(f"stat fields {fields[:200]!r} of {path_b[:200]!r} do not parse")
    hexmode, size, mtime, uid, gid, owner, group = m.groups()
    mode = int(hexmode, 16)
    if mode > 0xFFFF or int(size) >= 1 << 63:
        raise _Malformed(f"mode {hexmode!r} or size {size!r} of {path_b[:200]!r} is absurd")
    try:
        mod_time = datetime.fromtimestamp(int(mtime), UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise _Malformed(f"time {mtime!r} of {path_b[:200]!r} is out of range") from exc
    name = _decode(name_b)
    is_link = stat_mod.S_ISLNK(mode)
    return FileInfo(
        name=name,
        path=base if path_b == base_b else posixpath.join(base, name),
        size=int(size),
        mode=stat_mod.S_IMODE(mode),
        mod_time=mod_time,
        is_dir=stat_mod.S_ISDIR(mode),
        owner=_decode(uid if owner in (b"UNKNOWN", b"") else owner),
        group=_decode(gid if group in (b"UNKNOWN", b"") else group),
        permissions=_permissions(mode),
        is_symlink=is_link,
        link_target=_decode(target) if is_link else "",
    )


def parse_listing(data: bytes, base: str) -> list[FileInfo]:
    """Parse the list script's output (``name\\0stat-fields\\0link-target\\0`` per entry).

    The output is untrusted (the sandbox's root may have replaced ``stat`` or ``sh``): every
    entry must be ``base`` itself or a direct child of it, every field must parse and be in
    range, and at most `MAX_LIST_ENTRIES` entries are taken; anything else raises
    FileOperationFailed rather than a ValueError or a made-up entry.

    Names and link targets that are not valid UTF-8 are decoded with U+FFFD for each bad byte,
    so a FileInfo always serializes to JSON. Such a name cannot be passed back to a file
    operation: the Engine API's JSON cannot carry it either; reach it with a glob in
    execute_command.
    """
    if not data:
        return []
    fields = data.split(b"\0")
    if fields[-1] != b"" or len(fields) % 3 != 1:
        raise _malformed(base, f"{len(data)} bytes that are not whole NUL-terminated records")
    if len(fields) // 3 > MAX_LIST_ENTRIES:
        raise _too_big(base)
    infos: list[FileInfo] = []
    try:
        for i in range(0, len(fields) - 1, 3):
            infos.append(_entry(fields[i], fields[i + 1], fields[i + 2], base))
    except _Malformed as exc:
        raise _malformed(base, str(exc)) from None
    return infos


def _malformed(base: str, why: str) -> FileOperationFailed:
    return FileOperationFailed(
        f"list {base!r} failed: the listing the sandbox returned is malformed (has a tool in "
        "the sandbox been replaced?)", path=base, details=why)


def _too_big(base: str) -> FileOperationFailed:
    return FileOperationFailed(
        f"list {base!r} refused: more than {MAX_LIST_ENTRIES} entries or {MAX_LIST_BYTES} "
        "bytes of listing", path=base,
        details="list a subdirectory, or use execute_command with find/ls and a bound")


async def list_files(run: Runner, path: str) -> list[FileInfo]:
    parts: list[bytes] = []
    size = records = 0

    def take(data: bytes) -> None:
        # Bounded while reading: raising here stops the helper (a hostile one prints forever).
        nonlocal size, records
        size += len(data)
        records += data.count(b"\0")
        if size > MAX_LIST_BYTES or records > 3 * MAX_LIST_ENTRIES:
            raise _too_big(path)
        parts.append(data)

    result = await run(["/bin/sh", "-c", _LIST_SH, "sandbox-list", path], on_stdout=take)
    raise_for(result, "list", path)
    return parse_listing(b"".join(parts), path)


async def path_kind(run: Runner, path: str) -> str:
    parts: list[bytes] = []
    result = await run(["/bin/sh", "-c", _KIND_SH, "sandbox-kind", path], on_stdout=parts.append)
    raise_for(result, "inspect", path)
    return b"".join(parts).decode().strip()


# -- copy between host and sandbox -----------------------------------------------------------


def _tar_host_path(src: Path, arcname: str, out: IO[bytes]) -> None:
    write_host_tar(str(src), arcname, out)


async def file_chunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    while True:
        chunk = await anyio.to_thread.run_sync(f.read, 1 << 20)
        if not chunk:
            return
        yield chunk


async def copy_to_sandbox(run: Runner, src: Path, dest: str, *, ask_in_same_exec: bool = False,
                          ) -> None:
    """Copy a host file or tree into the sandbox with ``docker cp`` semantics, in one archive.

    With ``ask_in_same_exec`` (a runner that stops feeding stdin once the command exits, as
    Docker's does), in one exec: the command first says whether ``dest`` is a directory, and
    the archive goes once it has. A directory's archive does not depend on that answer (its
    contents under "."), so it is built while the exec starts; a file's is named for the
    answer. Otherwise an exec asks first.
    """
    if not await anyio.Path(src).exists():
        raise SandboxFileNotFound(f"copy {str(src)!r} failed: no such file on the host",
                                  path=str(src))
    # A link to a directory is copied as the link (nothing is followed): not a tree.
    is_tree = stat_mod.S_ISDIR((await anyio.Path(src).lstat()).st_mode)
    if not ask_in_same_exec:
        kind = await path_kind(run, dest)
        if kind == "dir":
            target_dir, arcname = dest, src.name
        else:
            target_dir, arcname = posixpath.dirname(dest) or "/", posixpath.basename(dest)
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
            await anyio.to_thread.run_sync(_tar_host_path, src, arcname, spool)
            spool.seek(0)
            result = await run(["/bin/sh", "-c", _UNTAR_SH, "sandbox-untar", target_dir],
                               stdin=file_chunks(spool))
        raise_for(result, "copy into", dest)
        return
    heard = bytearray()
    answered = anyio.Event()

    def take(data: bytes) -> None:
        if not answered.is_set():
            heard.extend(data[:8])
            if b"\n" in heard or len(heard) >= 8:
                answered.set()

    with tempfile.SpooledTemporaryFile(max_size=_SPOOL) as spool:
        if is_tree:
            built = _Build(src, ".", spool)
            argv = ["/bin/sh", "-c", _COPY_TREE_IN_SH, "sandbox-copy-in", dest, src.name]
        else:
            built = None
            argv = ["/bin/sh", "-c", _COPY_IN_SH, "sandbox-copy-in", dest,
                    posixpath.dirname(dest) or "/"]

        async def archive() -> AsyncIterator[bytes]:
            await answered.wait()  # (a command that never says is ended by the helper deadline)
            if built is not None:
                await built.done()
            else:
                into_dir = bytes(heard).split(b"\n", 1)[0] == b"dir"
                arcname = src.name if into_dir else posixpath.basename(dest)
                await anyio.to_thread.run_sync(_tar_host_path, src, arcname, spool)
            spool.seek(0)
            async for chunk in file_chunks(spool):
                yield chunk

        async with single_errors(), anyio.create_task_group() as tg:
            if built is not None:
                tg.start_soon(built.run)
            result = await run(argv, stdin=archive(), on_stdout=take)
        if built is not None:
            await built.done()  # a host file that could not be read is the news
    raise_for(result, "copy into", dest)


class _Build:
    """A tree's archive built into ``spool`` in a worker thread, waited for by the sender."""

    def __init__(self, src: Path, arcname: str, spool: IO[bytes]) -> None:
        self._args = (src, arcname, spool)
        self._finished = anyio.Event()
        self._error: OSError | None = None

    async def run(self) -> None:
        try:
            await anyio.to_thread.run_sync(_tar_host_path, *self._args)
        except OSError as exc:
            self._error = exc
        finally:
            self._finished.set()

    async def done(self) -> None:
        """Wait for the archive; raise what stopped it."""
        await self._finished.wait()
        if self._error is not None:
            raise self._error


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


class HelperFiles:
    """The file primitives of a `Backend`, run as the helper commands above.

    A backend that runs commands by argv (Docker, process) mixes this in and provides
    ``_helper(what, rate=, max_time=)``, the runner whose deadline error names ``what``.
    """

    def _helper(self, what: str, *, rate: float | None = None,
                max_time: float | None = None) -> Runner:
        raise NotImplementedError

    async def write_file(self, target: str, content: bytes, mode: int = 0o644) -> None:
        """Write a file at the absolute path ``target``, creating parent directories."""
        await write_file(self._helper(f"write {target!r}"), target, content, mode)

    async def read_file(self, target: str, max_bytes: int | None = None) -> bytes:
        """Read a whole file (up to 1 GiB; use copy_out for larger ones), or its first
        ``max_bytes`` bytes."""
        return await read_file(self._helper(f"read {target!r}"), target, max_bytes=max_bytes)

    async def list_files(self, target: str) -> list[FileInfo]:
        """List a directory (or describe one file)."""
        return await list_files(
            self._helper(f"list {target!r}", rate=_constants.LIST_MIN_RATE,
                         max_time=_constants.LIST_MAX_TIME), target)

    #: Whether the helper runner stops feeding stdin when its command exits (then copy in
    #: asks for the destination's kind in the exec that unpacks).
    stdin_stops_at_exit = False

    async def copy_in(self, source: Path, target: str) -> None:
        """Copy a host file or tree to the absolute sandbox path ``target``."""
        await copy_to_sandbox(self._helper(f"copy into {target!r}"), source, target,
                              ask_in_same_exec=self.stdin_stops_at_exit)

    async def copy_out(self, target: str, dest: Path, *, max_bytes: int,
                       max_entries: int) -> None:
        """Copy the sandbox file or tree at ``target`` to the host, by the copy-out rules."""
        await copy_from_sandbox(self._helper(f"copy from {target!r}"), target, dest,
                                max_bytes=max_bytes, max_entries=max_entries)

    async def path_kind(self, target: str) -> str:
        """What is at ``target``: "dir", "none", or another kind."""
        return await path_kind(self._helper(f"inspect {target!r}"), target)
