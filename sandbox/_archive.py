"""Unpack a tar that came out of a sandbox on the host, treating it as hostile input.

Backend-neutral: any backend that gets a sandbox path as a tar stream (Docker's exec'd ``tar``
today) spools it with `TarSpool` and unpacks it with `extract_tar`. The sandbox may have replaced
its ``tar``, so the archive can hold anything. The rules (also in the README, "Copy-out rules"):

- Every member lies under the copied path: no absolute name, no ``..`` component, no other
  top-level name, never below a member that is not a directory (a symlink or a file), at most
  `MAX_DEPTH` components and `MAX_NAME_BYTES` bytes. A name appears once (a directory may
  repeat).
- Only directories, regular files, symlinks and hard links; no device, FIFO or other type.
- A symlink is kept only if its target is relative and, read from the link's own directory,
  stays inside the copied tree: ``..`` components only at its start, no more of them than the
  link's depth. Absolute targets and links out are refused; so is a copied path that is itself
  a symlink (its target would be read from the host directory).
- A hard link must name an earlier regular file of the archive; it becomes a hard link there.
- Ownership never comes from the archive (files belong to the calling user); modes keep the
  permission bits only (never setuid, setgid, sticky); mtimes of files and directories are kept.
- ``max_bytes`` bounds the file data written (counted as written: a sparse member counts its
  whole expanded size) and ``max_entries`` the files, directories and links created. The tar
  stream itself is bounded by `stream_limit` while it is spooled.

Everything is built in a fresh directory beside the destination with ``openat``-style calls on
directory descriptors and ``O_NOFOLLOW``, so no write goes through a symlink; only then is it
renamed into place. On any refusal the temporary directory is removed and nothing is left.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ._errors import ConfigError, CopyLimitExceeded, FileOperationFailed, UnsafeArchive

#: Longest member name or link target accepted (Linux PATH_MAX).
MAX_NAME_BYTES = 4096
#: Deepest member accepted, in path components below the copied path.
MAX_DEPTH = 256
#: Tar stream allowed per entry on top of max_bytes (header, long-name records, padding).
STREAM_PER_ENTRY = 4096
_STREAM_SLACK = 1 << 20
#: Header bytes (long names, PAX records, sparse maps) tarfile may read for one member.
_MAX_HEADER = 64 << 10
_CHUNK = 1 << 20
_ROOT = "root"  # the copied path's name inside the temporary directory
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def check_limits(max_bytes: int, max_entries: int) -> None:
    """Refuse caps that are not positive integers, naming the keyword."""
    for name, value in (("max_bytes", max_bytes), ("max_entries", max_entries)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"copy_files {name}={value!r} is not a positive integer",
                              details=f"give {name} as a number of "
                                      f"{'bytes' if name == 'max_bytes' else 'entries'} >= 1")


def stream_limit(max_bytes: int, max_entries: int) -> int:
    """Bytes of tar stream accepted from the sandbox for these caps."""
    return max_bytes + max_entries * STREAM_PER_ENTRY + _STREAM_SLACK


class TarSpool:
    """Sink for the sandbox's tar stream: writes to ``out`` until `stream_limit` is passed.

    Passing it raises `CopyLimitExceeded` from `write`, which ends the helper that produces the
    stream (a never-ending tar cannot fill the host's disk).
    """

    def __init__(self, out: IO[bytes], *, source: str, max_bytes: int, max_entries: int) -> None:
        self._out = out
        self._source = source
        self._max_bytes = max_bytes
        self.limit = stream_limit(max_bytes, max_entries)
        self.size = 0

    def write(self, data: bytes) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise CopyLimitExceeded(
                f"copy of {self._source!r} from the sandbox stopped: its tar stream passed "
                f"{self.limit} bytes (max_bytes={self._max_bytes} plus {STREAM_PER_ENTRY} per "
                "entry allowed by max_entries)", limit="max_bytes", value=self._max_bytes,
                path=self._source, details="nothing was written to the host; pass a larger "
                "max_bytes / max_entries to copy_files, or copy less")
        self._out.write(data)


class _HeaderTooLarge(Exception):
    """tarfile asked for more header bytes than one member may have."""


class _Guarded:
    """The spool as tarfile sees it: reads outside member data are bounded per member."""

    mode = "rb"

    def __init__(self, f: IO[bytes]) -> None:
        self._f = f
        self.budget: int | None = _MAX_HEADER

    def read(self, size: int = -1) -> bytes:
        if self.budget is not None:
            if size < 0 or size > self.budget:
                raise _HeaderTooLarge
            self.budget -= size
        return self._f.read(size)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def tell(self) -> int:
        return self._f.tell()


def extract_tar(
    archive: IO[bytes], dest: Path, arcroot: str, *, source: str, max_bytes: int,
    max_entries: int,
) -> None:
    """Unpack the sandbox's tar of ``arcroot`` (its top-level name) as ``dest``.

    ``dest`` is the final path; its parent must exist. An existing directory there is merged
    into (existing entries of the same name are replaced, except that a directory and a
    non-directory never replace each other); an existing file or symlink is replaced. Raises
    `UnsafeArchive` or `CopyLimitExceeded` (nothing left at ``dest``) or `FileOperationFailed`.
    ``source`` is the sandbox path, for messages.
    """
    try:
        _extract_into(archive, dest, arcroot, source, max_bytes, max_entries)
    except OSError as exc:  # the host's side: permissions, a full disk, a name too long
        raise FileOperationFailed(
            f"copy of {source!r} from the sandbox failed on the host at {str(dest)!r}",
            path=source, details=f"{exc}; nothing was left at the destination",
            cause=exc) from exc


def _extract_into(archive: IO[bytes], dest: Path, arcroot: str, source: str, max_bytes: int,
                  max_entries: int) -> None:
    parent_fd = os.open(dest.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tmp = tempfile.mkdtemp(prefix=f".{dest.name[:40]}.sandbox-copy-", dir=dest.parent)
        tmp_name = os.path.basename(tmp)
        try:
            tmp_fd = os.open(tmp_name, _DIR_FLAGS, dir_fd=parent_fd)
            try:
                ex = _Extractor(tmp_fd, arcroot, source, max_bytes, max_entries)
                ex.unpack(archive)
                ex.place(parent_fd, dest.name, str(dest))
            finally:
                os.close(tmp_fd)
        finally:
            with contextlib.suppress(OSError):
                _remove(parent_fd, tmp_name)
    finally:
        os.close(parent_fd)


def _remove(dir_fd: int, name: str, depth: int = 0) -> None:
    """Remove ``name`` and what it holds without following symlinks; bounded depth."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    try:
        os.fchmod(fd, 0o700)
        if depth <= MAX_DEPTH + 2:
            for child in os.listdir(fd):
                _remove(fd, child, depth + 1)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


class _Extractor:
    """Builds the tree under ``tmp_fd/root``, tracking what each path is."""

    def __init__(self, tmp_fd: int, arcroot: str, source: str, max_bytes: int,
                 max_entries: int) -> None:
        self._tmp_fd = tmp_fd
        self._arcroot = arcroot
        self._source = source
        self._max_bytes = max_bytes
        self._max_entries = max_entries
        self.kinds: dict[str, str] = {}  # path below the root ("" = root) -> dir/file/symlink
        self._dirs: dict[str, tuple[int, float | None]] = {}  # final mode and mtime
        self._written = 0
        self._entries = 0
        self._member = ""
        self._cached: tuple[str, int] | None = None

    # -- errors --------------------------------------------------------------------------------

    def _refuse(self, rule: str, todo: str = "") -> UnsafeArchive:
        return UnsafeArchive(
            f"copy of {self._source!r} from the sandbox refused: member {self._member!r} "
            f"{rule}", member=self._member, path=self._source,
            details="nothing was written to the host" + (f"; {todo}" if todo else ""))

    def _limit(self, limit: str, value: int, what: str) -> CopyLimitExceeded:
        return CopyLimitExceeded(
            f"copy of {self._source!r} from the sandbox stopped at member {self._member!r}: "
            f"{what} {limit}={value}", limit=limit, value=value, member=self._member,
            path=self._source, details=f"nothing was written to the host; pass a larger {limit} "
            "to copy_files, or copy less")

    # -- reading -------------------------------------------------------------------------------

    def unpack(self, archive: IO[bytes]) -> None:
        guard = _Guarded(archive)
        try:
            try:
                tf = tarfile.open(fileobj=guard, mode="r:")  # type: ignore[call-overload]  # noqa: SIM115
            except _HeaderTooLarge:
                raise self._refuse("has headers over 64 KiB (long names, PAX records or a "
                                   "sparse map)") from None
            except (tarfile.TarError, RecursionError) as exc:
                raise self._corrupt(exc) from None
            with tf:
                for member in self._members(tf, guard):
                    self._member = member.name
                    self._add(tf, member)
                self._check_end(archive, tf.offset)
        finally:
            self._uncache()
        if "" not in self.kinds:
            self._member = ""
            raise self._refuse("missing: the archive is empty", "is the sandbox's tar genuine?")

    def _members(self, tf: tarfile.TarFile, guard: _Guarded) -> Iterator[tarfile.TarInfo]:
        last = -1
        while True:
            guard.budget = _MAX_HEADER
            try:
                member = tf.next()
            except _HeaderTooLarge:
                raise self._refuse("is followed by headers over 64 KiB (long names, PAX records "
                                   "or a sparse map)") from None
            except (tarfile.TarError, RecursionError) as exc:
                raise self._corrupt(exc) from None
            guard.budget = None
            if member is None:
                return
            if member.size < 0 or member.offset <= last:
                self._member = member.name
                raise self._corrupt(ValueError("a negative size or a header that goes back"))
            last = member.offset
            tf.members.clear()  # type: ignore[attr-defined]  # keep memory flat
            if sum(len(k) + len(v) for k, v in tf.pax_headers.items()) > _MAX_HEADER:
                raise self._refuse("comes after global PAX headers over 64 KiB")
            yield member

    def _corrupt(self, exc: BaseException) -> UnsafeArchive:
        where = f"after member {self._member!r}" if self._member else "at its start"
        err = UnsafeArchive(
            f"copy of {self._source!r} from the sandbox refused: the archive is corrupt or "
            f"truncated {where}", member=self._member, path=self._source,
            details=f"{exc or type(exc).__name__}; nothing was written to the host")
        return err

    def _check_end(self, archive: IO[bytes], offset: int) -> None:
        """tarfile takes a bad or cut header for the end; only a zero block really is."""
        archive.seek(offset)
        if archive.read(tarfile.BLOCKSIZE) != bytes(tarfile.BLOCKSIZE):
            raise self._corrupt(EOFError("no end-of-archive block"))

    # -- members -------------------------------------------------------------------------------

    def _rel(self, name: str, what: str = "") -> str:
        """The path below the copied root that archive name ``name`` stands for."""
        if "\0" in name:
            raise self._refuse(f"{what}contains a NUL byte")
        try:
            size = len(os.fsencode(name))
        except UnicodeError:
            raise self._refuse(f"{what}cannot be encoded as a file name") from None
        if size > MAX_NAME_BYTES:
            raise self._refuse(f"{what}is longer than {MAX_NAME_BYTES} bytes")
        if name.startswith("/"):
            raise self._refuse(f"{what}is an absolute name",
                               "a genuine tar of the copied path never writes one")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self._refuse(f"{what}has a '..' component")
        if not parts or parts[0] != self._arcroot:
            raise self._refuse(f"{what}is outside the copied path {self._arcroot!r}")
        if len(parts) - 1 > MAX_DEPTH:
            raise self._refuse(f"{what}is more than {MAX_DEPTH} directories deep")
        return "/".join(parts[1:])

    def _add(self, tf: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        self._count()
        rel = self._rel(member.name)
        if rel in self.kinds and not (member.isdir() and self.kinds[rel] == "dir"):
            raise self._refuse("appears twice in the archive (a later member would replace an "
                               "earlier one)")
        try:
            if member.isdir():
                self._mkdir(rel, member.mode, member.mtime)
            elif member.isreg():
                self._file(tf, rel, member)
            elif member.issym():
                self._symlink(rel, member.linkname)
            elif member.islnk():
                self._hardlink(rel, member.linkname)
            else:
                raise self._refuse(
                    f"is a {_special(member)}, which is never created on the host",
                    "only directories, regular files and links are copied out; remove it in "
                    "the sandbox or copy a path without it")
        except (tarfile.TarError, RecursionError) as exc:
            raise self._corrupt(exc) from None
        except OSError as exc:
            raise FileOperationFailed(
                f"copy of {self._source!r} from the sandbox failed writing member "
                f"{self._member!r} on the host", path=self._source, details=str(exc),
                cause=exc) from exc

    def _count(self) -> None:
        self._entries += 1
        if self._entries > self._max_entries:
            raise self._limit("max_entries", self._max_entries, "more entries than")

    def _parent(self, rel: str) -> tuple[int, str]:
        """The directory fd that holds ``rel`` and its name there; makes missing parents."""
        if rel == "":
            return self._tmp_fd, _ROOT
        parent, _, base = rel.rpartition("/")
        chain = [""]
        if parent:
            parts = parent.split("/")
            chain += ["/".join(parts[: i + 1]) for i in range(len(parts))]
        for path in chain:
            kind = self.kinds.get(path)
            if kind is None:
                self._count()
                self._mkdir(path, 0o755, None)
            elif kind != "dir":
                shown = self._arcroot + ("/" + path if path else "")
                raise self._refuse(f"lies below {shown!r}, which the archive made a {kind}",
                                   "a genuine tar never writes through a link or a file")
        return self._open_dir(parent), base

    def _open_dir(self, rel: str) -> int:
        if self._cached is not None and self._cached[0] == rel:
            return self._cached[1]
        fd = self._walk(rel)
        self._uncache()
        self._cached = (rel, fd)
        return fd

    def _walk(self, rel: str) -> int:
        """Open directory `rel` of the tree one component at a time, never through a link."""
        fd = os.open(_ROOT, _DIR_FLAGS, dir_fd=self._tmp_fd)
        for part in rel.split("/") if rel else []:
            try:
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            finally:
                os.close(fd)
            fd = nxt
        return fd

    def _uncache(self) -> None:
        if self._cached is not None:
            os.close(self._cached[1])
            self._cached = None

    def _mkdir(self, rel: str, mode: int, mtime: float | None) -> None:
        if self.kinds.get(rel) != "dir":
            fd, base = self._parent(rel)
            os.mkdir(base, 0o700, dir_fd=fd)  # writable while it fills; final mode at the end
            self.kinds[rel] = "dir"
        self._dirs[rel] = (mode & 0o777, mtime)

    def _file(self, tf: tarfile.TarFile, rel: str, member: tarfile.TarInfo) -> None:
        left = self._max_bytes - self._written
        if member.size > left:
            raise self._limit("max_bytes", self._max_bytes,
                              f"its {member.size} bytes (after {self._written} written) "
                              "would go over")
        dir_fd, base = self._parent(rel)
        fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        self.kinds[rel] = "file"
        with open(fd, "wb") as out:
            data = tf.extractfile(member)
            assert data is not None
            while chunk := data.read(_CHUNK):
                self._written += len(chunk)
                if self._written > self._max_bytes:  # counted as written, whatever the header
                    raise self._limit("max_bytes", self._max_bytes, "file data went over")
                out.write(chunk)
            out.flush()
            os.fchmod(fd, member.mode & 0o777)
            _set_mtime(fd, member.mtime)

    def _symlink(self, rel: str, target: str) -> None:
        todo = ("a link is kept only when its target is relative and stays inside the copied "
                "tree; in the sandbox, replace it with what it points to (e.g. cp -L) or copy "
                "a directory that holds both")
        if rel == "":
            raise self._refuse(f"(the copied path itself) is a symlink to {target!r}; on the "
                               "host it would point beside the destination",
                               f"copy the path it points to instead; {todo}")
        if not target or "\0" in target or len(os.fsencode(target)) > MAX_NAME_BYTES:
            raise self._refuse("is a symlink with an empty, NUL-holding or over-long target")
        if target.startswith("/"):
            raise self._refuse(f"is a symlink to the absolute path {target!r}, which on the "
                               "host would be the host's file", todo)
        parts = [p for p in target.split("/") if p not in ("", ".")]
        up = 0
        while up < len(parts) and parts[up] == "..":
            up += 1
        if ".." in parts[up:]:
            raise self._refuse(f"is a symlink to {target!r}, which climbs after a name (it "
                               "could leave the tree through another link)", todo)
        if up > rel.count("/"):
            raise self._refuse(f"is a symlink to {target!r}, which leads outside the copied "
                               "tree", todo)
        fd, base = self._parent(rel)
        os.symlink(target, base, dir_fd=fd)
        self.kinds[rel] = "symlink"

    def _hardlink(self, rel: str, linkname: str) -> None:
        target = self._rel(linkname, f"is a hard link to {linkname!r}, whose target ")
        if target == "" or self.kinds.get(target) != "file":
            raise self._refuse(f"is a hard link to {linkname!r}, which is not an earlier "
                               "regular file of the archive")
        src_parent, _, src_base = target.rpartition("/")
        src_fd = self._walk(src_parent)
        try:
            fd, base = self._parent(rel)
            os.link(src_base, base, src_dir_fd=src_fd, dst_dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(src_fd)
        self.kinds[rel] = "file"

    # -- moving into place ---------------------------------------------------------------------

    def place(self, parent_fd: int, name: str, shown: str) -> None:
        """Move the finished tree to ``parent_fd/name``, merging into an existing directory.

        A first pass finds every conflict before anything moves, so a refusal leaves the host
        as it was.
        """
        children: dict[str, list[str]] = {}
        for rel in self.kinds:
            if rel:
                parent, _, base = rel.rpartition("/")
                children.setdefault(parent, []).append(base)
        for dry in (True, False):
            self._merge("", parent_fd, name, shown, children, dry)

    def _merge(self, rel: str, dst_fd: int, name: str, shown: str,
               children: dict[str, list[str]], dry: bool) -> None:
        kind = self.kinds[rel]
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dst_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is None or (kind != "dir" and not stat.S_ISDIR(st.st_mode)):
            if not dry:
                self._move(rel, dst_fd, name)
            return
        if kind != "dir" or not stat.S_ISDIR(st.st_mode):
            ours, theirs = ("a directory", "is not") if kind == "dir" else ("not a directory",
                                                                             "is")
            self._member = self._arcroot + ("/" + rel if rel else "")
            raise FileOperationFailed(
                f"copy of {self._source!r} from the sandbox refused: {shown!r} {theirs} a "
                f"directory on the host and member {self._member!r} is {ours}",
                path=self._source, details="nothing was changed on the host; remove it or "
                "copy to another destination")
        fd = os.open(name, _DIR_FLAGS, dir_fd=dst_fd)
        try:
            for child in children.get(rel, []):
                sub = f"{rel}/{child}" if rel else child
                self._merge(sub, fd, child, f"{shown}/{child}", children, dry)
        finally:
            os.close(fd)

    def _src(self, rel: str) -> tuple[int, str]:
        """Where ``rel`` is in the temporary tree, as (directory fd, name)."""
        if rel == "":
            return self._tmp_fd, _ROOT
        parent, _, base = rel.rpartition("/")
        return self._open_dir(parent), base

    def _move(self, rel: str, dst_fd: int, name: str) -> None:
        if self.kinds[rel] != "dir":
            src_fd, base = self._src(rel)
            os.rename(base, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            return
        prefix = f"{rel}/" if rel else ""
        below = [d for d in self._dirs if d != rel and d.startswith(prefix)]
        for sub in sorted(below, key=lambda d: -d.count("/")):  # deepest first
            self._finish_dir(self._open_dir(sub), sub)
            self._uncache()
        src_fd, base = self._src(rel)
        fd = os.open(base, _DIR_FLAGS, dir_fd=src_fd)
        try:
            # Moving a directory to a new parent needs write access to it: chmod after.
            os.rename(base, name, src_dir_fd=src_fd, dst_dir_fd=dst_fd)
            self._finish_dir(fd, rel)
        finally:
            os.close(fd)
            self._uncache()

    def _finish_dir(self, fd: int, rel: str) -> None:
        mode, mtime = self._dirs[rel]
        os.fchmod(fd, mode)
        _set_mtime(fd, mtime)


def _set_mtime(fd: int, mtime: float | None) -> None:
    if isinstance(mtime, int | float) and 0 <= mtime < 1 << 40:
        with contextlib.suppress(OSError, OverflowError, ValueError):
            os.utime(fd, (mtime, mtime))


def _special(member: tarfile.TarInfo) -> str:
    if member.ischr():
        return "character device"
    if member.isblk():
        return "block device"
    if member.isfifo():
        return "FIFO"
    return f"special file (tar type {member.type!r})"
