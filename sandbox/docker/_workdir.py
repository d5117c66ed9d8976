"""The sandbox user's working directory and HOME, made and handed over without capabilities.

Root in a default sandbox has no capabilities, so it cannot chown: a working dir the user must
own is written by the engine's archive API with that owner instead, before start where the ids
are numeric (gVisor does not see what the archive API changes after start), else after start.
A probe run as the user reads its real ids and whether its HOME is writable.

Both steps cost about a third of a create, so what they learn is kept per image id (a content
hash: every fresh container of it holds the same files) and the settings that change what a
fresh container holds (`mounts_key`). Only what needs no exec to be true is skipped: the archive
hand-over where the image's working dir is already the user's (the SDK's own images hold
/workspace as 1000:0 mode 0775: the default user owns it, capability-less root writes it
through group 0, any other uid gets it handed over as it is empty; `DirEntry.needs_owner`),
and the probe for a numeric non-root ``uid:gid`` (the engine runs an exec as exactly those
ids, whatever the image says; the probe's root check is for names, which the image's files
resolve, and always runs). A checkpoint this process committed from a sandbox whose working
dir its create dealt with is not looked at by a sandbox alike (a fork's children:
`settle_by_commit`).
An image's labels are never read here: an image can lie.
"""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from .._audit import Auditor
from .._constants import ROOT_PATH
from .._errors import (
    CommandExecutionFailed,
    SandboxError,
    SandboxInitFailed,
    SecurityViolation,
)
from .._ids import go_atoi, split_spec
from .._models import CommandResult
from .._single_flight import SingleFlight
from ._gateway import Engine, EngineNotFound


class Runner(Protocol):
    """How these steps run a helper command in the sandbox."""

    async def __call__(self, argv: Sequence[str], *, user: str | None = None,
                       what: str = ...) -> CommandResult: ...


@attrs.frozen
class UserIds:
    """What the probe found: the user's real uid and gid, whether HOME is writable, and the
    names the image's /etc/passwd and /etc/group give those ids ("" for none)."""

    uid: int
    gid: int
    home_writable: bool
    user_name: str = ""
    group_name: str = ""


#: Run as the sandbox user at start: print "uid gid home-writable", then (with "1" as $3) the
#: names of uid and gid in the image's /etc/passwd and /etc/group ("-" for none or not asked),
#: and with "1" as $1 make the working dir $2 (it may sit in the user's own home, where
#: capability-less root cannot write). Shell built-ins only: no tool is started for the names
#: (dash reads a byte per call, about 5 ms here: hence asked once per image and user).
_WHOAMI_SH = r"""u=; g=; n=-; m=-
while read -r k a _; do case "$k" in Uid:) u=$a;; Gid:) g=$a;; esac; done < /proc/self/status
if [ "$1" = 1 ] && [ ! -d "$2" ]; then mkdir -p -- "$2" 2>/dev/null; fi
h=0; f="$HOME/.sandbox-probe-$$"
if ( : > "$f" ) 2>/dev/null; then rm -f -- "$f"; h=1; fi
if [ "$3" = 1 ] && [ -r /etc/passwd ]; then
  while IFS=: read -r a _ c _; do [ "$c" = "$u" ] && { n=$a; break; }; done < /etc/passwd
fi
if [ "$3" = 1 ] && [ -r /etc/group ]; then
  while IFS=: read -r a _ c _; do [ "$c" = "$g" ] && { m=$a; break; }; done < /etc/group
fi
echo "$u $g $h $n $m"
"""

#: As root (without capabilities: it can mkdir only where root owns the parent): make the
#: working dir and say whether the SDK should give it to the sandbox user. The tools come from
#: the system's own directories: a PATH entry the sandbox user could write (a conda prefix)
#: must not put its program in a root exec of a checkpoint's child.
_WORKDIR_SH = f"PATH={ROOT_PATH}; " + r"""d="$1"
[ -d "$d" ] || mkdir -p -- "$d" || exit 1
if [ "$(stat -c %u -- "$d")" = 0 ] && [ -z "$(ls -A -- "$d")" ]; then echo chown; fi
"""


#: A file for the same archive PUT as the working dir: its tar entry and contents.
Extra = tuple[tarfile.TarInfo, bytes]


def entries_tar(entries: Sequence[Extra]) -> bytes:
    """A tar of ``entries``, in order, for an archive PUT before start."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for member, data in entries:
            tf.addfile(member, io.BytesIO(data))
    return buf.getvalue()


def dir_tar(name: str, uid: int, gid: int, extra: Sequence[Extra] = ()) -> bytes:
    """A tar of one directory entry, which the engine extracts with that owner (a chown that
    needs no capability inside the sandbox), and the ``extra`` files after it."""
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    info.mode = 0o755
    info.uid, info.gid = uid, gid
    return entries_tar([(info, b""), *extra])


@attrs.frozen
class Handover:
    """What `give_workdir_before_start` did: whether it dealt with the working dir (else the
    steps after start do), and whether its PUT carried the ``extra`` files."""

    dealt: bool
    wrote_extra: bool = False


#: Enough of a directory's tar to read its own entry and see whether a second one follows.
PROBE_BYTES = 64 << 10


@attrs.frozen
class DirEntry:
    """What a fresh container holds at the working dir, read from the engine's tar of it
    (the archive, unlike an image's labels, cannot lie about it)."""

    exists: bool
    is_dir: bool = False
    uid: int = -1
    gid: int = -1
    mode: int = 0
    #: Holds nothing (only the directory's own entry came, and the tar ended).
    empty: bool = False

    def needs_owner(self, uid: int) -> bool:
        """Must the SDK hand this working dir to ``uid`` (an archive PUT) so it can write?

        - missing: made with that owner;
        - already ``uid``'s and writable and searchable by its owner: no (the SDK's own
          images hold /workspace as 1000:0 mode 0775, so the default user needs no PUT and
          root without capabilities still writes through group 0);
        - empty: yes, whoever owns it (an empty directory holds nothing to give away);
        - anything else (a file, or a directory with contents that another uid owns, or
          too big to tell): never handed over.
        """
        if not self.exists:
            return True
        if not self.is_dir:
            return False
        if self.uid == uid and self.mode & 0o300 == 0o300:
            return False
        return self.empty


def read_dir_entry(head: bytes) -> DirEntry:
    """The working dir's entry from the first bytes (up to `PROBE_BYTES`) of the engine's tar
    of it; anything unreadable counts as an existing non-directory (never handed over)."""
    members: list[tarfile.TarInfo] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(head), mode="r|") as tf:
            for member in tf:
                members.append(member)
                if len(members) > 1:
                    break
    except (tarfile.TarError, EOFError):
        pass  # cut short inside the second entry, or not a tar: decided below
    if not members or not members[0].isdir():
        return DirEntry(exists=True)
    first = members[0]
    return DirEntry(exists=True, is_dir=True, uid=first.uid, gid=first.gid, mode=first.mode,
                    empty=len(members) == 1 and len(head) < PROBE_BYTES)


_PROBES_KEPT = 256

#: Per (image id, working dir, mounts key): what a fresh container holds there. Image ids are
#: content hashes, so an answer holds for every container of that image and those mounts.
#: Asked once: concurrent creates of one new image wait for the first one's look.
_WORKDIR_ENTRIES: SingleFlight[tuple[str, str, str], DirEntry] = SingleFlight(_PROBES_KEPT)


#: (image id, user, working dir, mounts key) of checkpoints the SDK committed from a sandbox
#: of that user, working dir and mounts whose working dir its own create dealt with (see
#: `settle_by_commit`): a create of the same from that image makes no look and no hand-over.
_SETTLED: set[tuple[str, str, str, str]] = set()


def settle_by_commit(image_id: str, user: str, cwd: str, mounts: str) -> None:
    """Note that checkpoint ``image_id`` was committed (by this process) from a sandbox of
    ``user`` (numeric, non-root), working dir ``cwd`` and `mounts_key` ``mounts`` whose
    working dir `give_workdir_before_start` dealt with, and whose image declares no volume.

    A sandbox of the same user, working dir and mounts made from that image (a fork's ten
    children) then skips the look at its working dir (an archive GET every child waited on)
    and any hand-over: its working dir is the source's as the commit froze it, nothing else.
    What the SDK knows without asking the checkpoint: its own create left that working dir
    one the user may keep (its hand-over, or one `DirEntry.needs_owner` found the user's
    already, or one it does not give away); so a look finds a hand-over due only where code
    in the source changed the directory since (its user emptied or chmodded its own
    directory; a root replaced or removed it). Such a child gets the source's directory as
    it was left, never a privileged step more: the look (cut short) and the hand-over (an
    engine chown) are what is skipped, nothing is read from the checkpoint instead. The key
    holds the image id (a content hash), so another user, working dir or mounts, or an image
    made anywhere else, still looks. (A volume's contents are not in the commit, so a
    checkpoint declaring one is never noted.)
    """
    if not image_id or numeric_non_root(user) is None or cwd == "/":
        return
    if len(_SETTLED) >= _PROBES_KEPT:
        _SETTLED.clear()
    _SETTLED.add((image_id, user, cwd, mounts))


def settled(image_id: str, user: str, cwd: str, mounts: str) -> bool:
    """Whether `settle_by_commit` noted ``image_id`` for this user, working dir and mounts: a
    create of them makes no look, no hand-over and (`_hosts_init`) no exec of its own."""
    return bool(image_id) and (image_id, user, cwd, mounts) in _SETTLED


#: Per (image id, user spec): the names the image gives the user's ids. A fresh container's
#: /etc/passwd is its image's, so one answer holds for every container of that image.
_NAMES: dict[tuple[str, str], tuple[str, str]] = {}


#: Per (image id, user, working dir, mounts key): what the probe found, for a numeric non-root
#: user whose working dir the steps before start dealt with (see `settle_user`); asked once.
_PROBED: SingleFlight[tuple[str, str, str, str], UserIds] = SingleFlight(_PROBES_KEPT)


def numeric_non_root(user: str) -> tuple[int, int] | None:
    """The ids of a ``uid:gid`` of two numbers, neither 0, as the engine reads them (else
    None): an exec as it runs with exactly those ids, whatever the image's passwd says."""
    uid_text, gid_text = split_spec(user)
    uid, gid = go_atoi(uid_text), go_atoi(gid_text)
    return (uid, gid) if uid is not None and gid is not None and uid > 0 and gid > 0 else None


def mounts_key(body: Mapping[str, Any]) -> str:
    """What in a create body changes the files a fresh container of an image holds (and so
    whether HOME is writable): the root's read-only flag, mounts, volumes and runtime."""
    host = body.get("HostConfig") or {}
    return json.dumps([host.get(k) for k in ("ReadonlyRootfs", "Tmpfs", "Binds", "Mounts",
                                               "VolumesFrom", "Runtime", "UsernsMode")]
                      + [body.get("Volumes")], sort_keys=True)


async def probe_user(run: Runner, user: str, cwd: str, *, image: str,
                     make_dir: bool, image_id: str = "") -> UserIds:
    """Run the probe as `user` (making `cwd` if `make_dir` and it is missing): an unknown user
    shows up here, at start, rather than at the first command."""
    known = _NAMES.get((image_id, user)) if image_id else None
    try:
        result = await run(["/bin/sh", "-c", _WHOAMI_SH, "sandbox-init", "1" if make_dir else "0",
                            cwd, "0" if known else "1"], user=user,
                           what=f"start a command as {user!r}")
    except CommandExecutionFailed as exc:
        raise SandboxInitFailed(
            f"security.run_as_user {user!r} cannot run commands in image {image!r}",
            details=exc.details, cause=exc) from exc
    fields = result.stdout.split()
    if not result.success or len(fields) != 5 or not all(f.isdigit() for f in fields[:3]):
        raise SandboxInitFailed(
            f"security.run_as_user {user!r}: could not read its ids in image {image!r}",
            details=(result.stderr or result.stdout or result.error).strip()[:500])
    if known is None:
        known = ("" if fields[3] == "-" else fields[3], "" if fields[4] == "-" else fields[4])
        if image_id:
            if len(_NAMES) >= _PROBES_KEPT:
                _NAMES.clear()
            _NAMES[(image_id, user)] = known
    return UserIds(int(fields[0]), int(fields[1]), fields[2] == "1", *known)


async def give_workdir_after_start(run: Runner, engine: Engine, container_id: str, cwd: str,
                                   ids: UserIds) -> None:
    """Make `cwd` as root and, if root owns it and it is empty, give it to the user."""
    result = await run(["/bin/sh", "-c", _WORKDIR_SH, "sandbox-init", cwd], user="0:0",
                       what=f"prepare the working directory {cwd!r}")
    if not result.success:
        raise SandboxInitFailed(
            f"could not prepare the working directory {cwd!r}",
            details=(result.stderr or result.stdout or result.error).strip(),
        )
    if result.stdout.strip() == "chown" and ids.uid != 0:
        parent, name = posixpath.split(posixpath.normpath(cwd))
        try:
            await engine.request(
                "give the working directory to the sandbox user",
                f"containers/{container_id}/archive", "PUT",
                params={"path": parent}, data=dir_tar(name, ids.uid, ids.gid),
                headers={"Content-Type": "application/x-tar"})
        except SandboxError as exc:
            raise SandboxInitFailed(
                f"could not give the working directory {cwd!r} to uid {ids.uid}",
                details=f"{exc}; with security.read_only_root use a numeric run_as_user",
                cause=exc) from exc


async def give_workdir_before_start(engine: Engine, container_id: str, cwd: str, user: str, *,
                                    image_id: str, mounts: str = "",
                                    extra: Sequence[Extra] = ()) -> Handover:
    """Before start, make `cwd` owned by a numeric non-root `user` ("uid:gid") where
    `DirEntry.needs_owner` says so (missing, or empty and not already the user's), with the
    ``extra`` files (paths relative to /) in the same PUT. Say whether this step dealt with
    the working dir (not for a name, root, or "/": left to the steps after start) and
    wrote the extra files (only in a hand-over: where none is needed, the caller chooses how
    to write them, `_netless`).
    """
    uid, _, gid = user.partition(":")
    if not (uid.isdigit() and gid.isdigit()) or uid == "0" or cwd == "/":
        return Handover(dealt=False)
    if settled(image_id, user, cwd, mounts):
        return Handover(dealt=True)  # a checkpoint of a sandbox alike (`settle_by_commit`)
    archive = f"containers/{container_id}/archive"
    # What a new container holds at cwd is the image's: probe once per image (an archive
    # call on a created container costs about a fifth of its start).
    async def look() -> DirEntry:
        try:
            head = await engine.request(
                "look at the working directory", archive, params={"path": cwd},
                max_bytes=PROBE_BYTES)
        except EngineNotFound:
            return DirEntry(exists=False)
        return read_dir_entry(head)

    found = await _WORKDIR_ENTRIES.ask((image_id, cwd, mounts), look) if image_id \
        else await look()
    if found.needs_owner(int(uid)):
        # Relative to /: the engine makes missing parents (root's, 0755) and gives the user
        # only the working dir itself.
        await engine.request(
            "give the working directory to the sandbox user", archive, "PUT",
            params={"path": "/"}, data=dir_tar(cwd.lstrip("/"), int(uid), int(gid), extra),
            headers={"Content-Type": "application/x-tar"})
        return Handover(dealt=True, wrote_extra=bool(extra))
    return Handover(dealt=True)


def _probe_key(image_id: str, user: str, cwd: str, mounts: str | None, *, covered: bool,
               given: bool) -> tuple[str, str, str, str] | None:
    """The key `settle_user` keeps its probe's answer under (None: it probes every time)."""
    return (image_id, user, cwd, mounts) if mounts is not None and image_id and \
        (covered or given) and numeric_non_root(user) is not None else None


def probe_kept(image_id: str, user: str, cwd: str, mounts: str | None, *, covered: bool,
               given: bool) -> bool:
    """Whether `settle_user` (same arguments) will answer from an earlier create's probe,
    making no exec after start: else one runs (or another create's, which this one waits
    for), and other steps after start can run beside it."""
    key = _probe_key(image_id, user, cwd, mounts, covered=covered, given=given)
    return key is not None and _PROBED.get(key) is not None


async def settle_user(run: Runner, engine: Engine, container_id: str, *, user: str, cwd: str,
                      image: str, covered: bool, given: bool, root_ok: bool,
                      audit: Auditor, image_id: str = "", mounts: str | None = None) -> UserIds:
    """After start: probe the sandbox user's real ids, refuse one that is root without the
    opt-in, and give it the working dir unless the workspace or the pre-start hand-over did.

    With ``mounts`` (the create body's `mounts_key`), a numeric non-root user's probe runs
    once per image id and those settings: its ids are the spec's, its HOME and names the
    image's, and the working dir is already there (``covered`` or ``given``).
    """
    key = _probe_key(image_id, user, cwd, mounts, covered=covered, given=given)

    async def probe() -> UserIds:
        ids = await probe_user(run, user, cwd, image=image, make_dir=not covered,
                               image_id=image_id)
        if (numeric := numeric_non_root(user)) is not None:
            # The engine ran the probe as exactly these ids; what the image's shell printed
            # (a checkpoint's shell is the last user's) does not get to say otherwise.
            ids = attrs.evolve(ids, uid=numeric[0], gid=numeric[1])
        return ids

    ids = await (_PROBED.ask(key, probe) if key is not None else probe())
    if 0 in (ids.uid, ids.gid) and not root_ok:
        # A name, or the image's own user, that the image maps to root (user or group).
        raise audit.refused("security.run_as_user", f"user={user!r}", SecurityViolation(
            f"security.run_as_user: {user!r} runs as uid {ids.uid} gid {ids.gid} in image "
            f"{image!r}, which is root",
            details="give a non-root uid and security.run_as_group, or ask for root "
                    "explicitly with run_as_user='root'"))
    if not (covered or given):
        await give_workdir_after_start(run, engine, container_id, cwd, ids)
    return ids
