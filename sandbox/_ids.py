"""User and group specs read as the engine reads them, so a check compares numbers, not text.

runc and the Docker daemon (moby/sys/user) take ``user[:group]``: the text is split on ``:``
(fields past the second are ignored), and a field is a number when Go's ``strconv.Atoi``
accepts it (an optional ``+`` or ``-`` sign, then ASCII digits, within int64), so ``"00"``,
``"+0"``, ``"-0"`` and ``"000:000"`` all mean root. Anything else is a name, looked up in the
container's ``/etc/passwd`` and ``/etc/group`` at exec time (files the sandbox may have
rewritten). An empty user field is the container's default user, which is root for every
backend's exec (the SDK keeps the container's own user root).

`narrow_user` decides a per-command user for a non-root sandbox in pure Python: it allows only
the sandbox's own uid and gid and ``nobody`` (65534), and hands the backend plain numbers, so
no spelling and no name in the sandbox's files can widen what the engine runs.
"""

from __future__ import annotations

import attrs

__all__ = ["MAX_ID", "NOBODY_ID", "Identity", "go_atoi", "names_root", "narrow_user",
           "split_spec"]

#: The largest uid or gid the engine accepts.
MAX_ID = 2**31 - 1
#: nobody and nogroup: own nothing, in every image the SDK knows.
NOBODY_ID = 65534
_NOBODY_USERS = ("nobody",)
_NOBODY_GROUPS = ("nogroup", "nobody")
_DIGITS = frozenset("0123456789")


@attrs.frozen
class Identity:
    """The sandbox user's real ids, and their names as the image had them at create ("" if
    unknown): what a per-command user is compared with."""

    uid: int
    gid: int
    user_name: str = ""
    group_name: str = ""


def go_atoi(text: str) -> int | None:
    """What Go's ``strconv.Atoi`` makes of ``text`` (64-bit), or None where it fails."""
    sign, digits = 1, text
    if text[:1] in ("+", "-"):
        sign, digits = (-1 if text[0] == "-" else 1), text[1:]
    if not digits or not _DIGITS.issuperset(digits):
        return None
    value = sign * int(digits)
    return value if -(2**63) <= value < 2**63 else None


def split_spec(spec: str) -> tuple[str, str]:
    """``user[:group]`` split as runc splits it: the first two ``:`` fields, the rest ignored."""
    parts = spec.split(":")
    return parts[0], parts[1] if len(parts) > 1 else ""


def names_root(field: str) -> bool:
    """True when one user or group field means id 0 to the engine (``root``, ``0``, ``+00``)."""
    return field == "root" or go_atoi(field) == 0


def identity_of(spec: str) -> Identity | None:
    """The ids a numeric ``uid:gid`` (or bare uid) spec names; names in it are kept as
    names, and a spec that is not numeric in its user gives None."""
    user, group = split_spec(spec)
    uid, gid = go_atoi(user), go_atoi(group or user)
    if uid is None or gid is None:
        return None
    return Identity(uid, gid)


def narrow_user(asked: str, *, own_user: str, own: Identity | None) -> tuple[str, str]:
    """The spec to run ``asked`` as in a sandbox whose user is ``own_user`` (with the real
    ids ``own``, when known) and "", or "" and the reason it is refused.

    Allowed: the sandbox's own uid and gid, and nobody/nogroup (65534), as numbers or as the
    names the sandbox's user and group had at create. The answer is ``own_user`` itself when
    ``asked`` names exactly its ids (so it keeps its groups), else numeric ``uid:gid`` (no
    supplementary groups: a per-command user only narrows).
    """
    if asked == own_user:
        return own_user, ""
    own = own or identity_of(own_user)
    spec_user, spec_group = split_spec(own_user)
    user_names = {n for n in (own.user_name if own else "", spec_user) if n and
                  go_atoi(n) is None}
    group_names = {n for n in (own.group_name if own else "", spec_group) if n and
                   go_atoi(n) is None}
    user, group = split_spec(asked)
    uid = go_atoi(user)
    if user in ("", "root"):
        uid = 0  # "": the container's default user, root
    elif uid is None:
        uid = NOBODY_ID if user in _NOBODY_USERS else \
            own.uid if own is not None and user in user_names else None
    what = (f"the sandbox's own ids ({own.uid}:{own.gid}) or nobody (65534)" if own is not None
            else "the sandbox's own user or nobody (65534)")
    uids = {NOBODY_ID} | ({own.uid} if own is not None else set())
    gids = {NOBODY_ID} | ({own.gid} if own is not None else set())
    if uid is None:
        return "", f"user {user!r} is not the sandbox user's name nor nobody; only {what} " \
                   "may be given"
    if uid not in uids:
        return "", f"it resolves to uid {uid}{' (root)' if uid == 0 else ''}; only {what} " \
                   "may be given"
    gid = go_atoi(group)
    if group == "":
        gid = NOBODY_ID if uid == NOBODY_ID else own.gid if own is not None else None
    elif group == "root":
        gid = 0
    elif gid is None:
        gid = NOBODY_ID if group in _NOBODY_GROUPS else \
            own.gid if own is not None and group in group_names else None
    if gid is None:
        return "", f"group {group!r} is not the sandbox user's group nor nogroup; only " \
                   f"{what} may be given"
    if gid not in gids:
        return "", f"it resolves to uid {uid} gid {gid}{' (root)' if gid == 0 else ''}; " \
                   f"only {what} may be given"
    if own is not None and (uid, gid) == (own.uid, own.gid):
        return own_user, ""
    return f"{uid}:{gid}", ""
