"""A model of how the engine resolves an exec's ``user[:group]`` (moby/sys/user GetExecUser),
written apart from `sandbox._ids` so each can check the other; the integration tests check
this model against the real engine, spelling by spelling."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

_GO_INT = re.compile(r"[+-]?[0-9]+")

#: name -> (uid, gid) in /etc/passwd order
Passwd = Mapping[str, tuple[int, int]]
#: name -> (gid, members) in /etc/group order
Groups = Mapping[str, tuple[int, Sequence[str]]]


def ref_atoi(text: str) -> int | None:
    """strconv.Atoi as a regex and a range: a second reading of the same rule."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value <= 2**63 - 1 else None


def parse_passwd(text: str) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        f = line.split(":")
        if len(f) >= 4 and f[2].isdigit() and f[3].isdigit():
            out.setdefault(f[0], (int(f[2]), int(f[3])))
    return out


def parse_group(text: str) -> dict[str, tuple[int, list[str]]]:
    out: dict[str, tuple[int, list[str]]] = {}
    for line in text.splitlines():
        f = line.split(":")
        if len(f) >= 4 and f[2].isdigit():
            out.setdefault(f[0], (int(f[2]), [m for m in f[3].split(",") if m]))
    return out


def runc_resolve(spec: str, passwd: Passwd, groups: Groups
                 ) -> tuple[int, int, frozenset[int]] | None:
    """(uid, gid, supplementary gids) the engine runs ``spec`` as, in a container whose
    default user is root; None where the exec fails."""
    user, group, *_ = [*spec.split(":"), ""]
    uid, gid, sgids, matched = 0, 0, frozenset[int](), ""
    n = ref_atoi(user)

    def match(name: str, ids: tuple[int, int]) -> bool:
        if not user:
            return ids[0] == 0  # the default user's entry
        return ids[0] == n if n is not None else name == user

    hits = [(name, ids) for name, ids in passwd.items() if match(name, ids)]
    if hits:
        matched, (uid, gid) = hits[0]
    elif not user:
        pass
    elif n is None or not 0 <= n <= 2**31 - 1:
        return None
    else:
        uid = n
    if group:
        g = ref_atoi(group)
        hits_g = [gid_ for name, (gid_, _) in groups.items()
                  if (gid_ == g if g is not None else name == group)]
        if hits_g:
            gid = hits_g[0]
        elif g is None or not 0 <= g <= 2**31 - 1:
            return None
        else:
            gid = g
    elif matched:
        sgids = frozenset(gid_ for gid_, members in groups.values() if matched in members)
    return uid, gid, sgids
