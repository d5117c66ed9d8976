"""User specs read as the engine reads them: Go's Atoi, runc's split, and never a wider user.

`runc_resolve` (tests/unit/_runc_user.py) is a model of moby/sys/user ``GetExecUser`` (what
dockerd runs for an exec's ``User``), written apart from `sandbox._ids`;
tests/integration/test_command_users.py checks it against the real engine. Here every spelling
a generator makes (signs, zeros, colons, names, junk, random strings) is put through
`narrow_user`, and what it hands the engine must resolve, under the model, to ids the sandbox
user has or to nobody.
"""

from __future__ import annotations

import itertools
import random

import pytest

from sandbox._ids import Identity, go_atoi, names_root, narrow_user, split_spec
from tests.unit._runc_user import ref_atoi, runc_resolve

PASSWD = {"root": (0, 0), "daemon": (1, 1), "www-data": (33, 33), "sandbox": (1000, 1000),
          "nobody": (65534, 65534)}
# The image made its user a member of shadow: the implicit form (a bare user) joins it.
GROUPS = {"root": (0, []), "shadow": (42, ["sandbox"]), "users": (100, []),
          "sandbox": (1000, []), "nogroup": (65534, [])}


def resolve(spec: str) -> tuple[int, int, frozenset[int]] | None:
    return runc_resolve(spec, PASSWD, GROUPS)


@pytest.mark.parametrize(("text", "value"), [
    ("0", 0), ("00", 0), ("+0", 0), ("-0", 0), ("+00", 0), ("007", 7), ("+1000", 1000),
    ("-1", -1), ("9223372036854775807", 2**63 - 1), ("-9223372036854775808", -(2**63)),
    ("9223372036854775808", None), ("", None), ("+", None), ("-", None), ("++0", None),
    ("+-0", None), (" 0", None), ("0 ", None), ("0x0", None), ("1_000", None), ("\u0661", None),
    ("0.0", None), ("1e3", None), ("root", None),
])
def test_go_atoi(text: str, value: int | None) -> None:
    assert go_atoi(text) == value


def spellings() -> list[str]:
    """Signs x leading zeros x numbers, names, and their user:group pairs with junk."""
    numbers = ["0", "1", "42", "100", "1000", "1001", "65534", "2147483647", "2147483648",
               "9223372036854775808"]
    fields = {f"{sign}{'0' * zeros}{number}" for sign, zeros, number in
              itertools.product(["", "+", "-", "++"], range(3), numbers)}
    fields |= {"", " 0", "0 ", "0x0", "root", "sandbox", "nobody", "nogroup", "shadow",
               "users", "www-data", "\u0661", "Root"}
    out = sorted(fields)
    short = sorted(f for f in fields if len(f) <= 5)
    out += [f"{u}:{g}" for u, g in itertools.product(short, short)]
    out += [f"{u}:{g}:x" for u, g in itertools.product(["0", "1000", "nobody"], short)]
    return out


def test_go_atoi_matches_a_second_reading_on_every_spelling() -> None:
    for spec in spellings():
        for field in spec.split(":"):
            assert go_atoi(field) == ref_atoi(field), field
            assert names_root(field) == (field == "root" or ref_atoi(field) == 0), field


def check_never_widens(asked: str, own_user: str, own: Identity) -> None:
    runs_as, why = narrow_user(asked, own_user=own_user, own=own)
    if why:
        assert runs_as == ""
        return
    got = resolve(runs_as)
    assert got is not None, (asked, runs_as)
    uid, gid, sgids = got
    own_resolved = resolve(own_user)
    assert own_resolved is not None
    assert uid in {own.uid, 65534} and gid in {own.gid, 65534}, (asked, runs_as, got)
    assert sgids <= own_resolved[2], (asked, runs_as, got)  # groups only narrow too
    asked_resolved = resolve(asked)
    if runs_as != own_user and asked_resolved is not None:
        assert (uid, gid) == asked_resolved[:2], (asked, runs_as)  # the same ids as asked


@pytest.mark.parametrize(("own_user", "own"), [
    ("1000:1000", Identity(1000, 1000, "sandbox", "sandbox")),
    ("1000:1000", Identity(1000, 1000)),
    ("sandbox", Identity(1000, 1000, "sandbox", "sandbox")),  # the image's user, by name
    ("1000:100", Identity(1000, 100, "sandbox", "users")),
])
def test_no_spelling_widens_the_sandbox_user(own_user: str, own: Identity) -> None:
    for asked in spellings():
        check_never_widens(asked, own_user, own)


def test_random_strings_never_widen() -> None:
    rng = random.Random(25)
    alphabet = "+-0123456789:: rotsandbxyw"
    own = Identity(1000, 1000, "sandbox", "sandbox")
    for _ in range(20000):
        asked = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10)))
        check_never_widens(asked, "1000:1000", own)


@pytest.mark.parametrize("asked", ["00", "+0", "000:000", "00:1000", "-0", ":1000", ":",
                                   "0:0:x", "1000:42", "1000:shadow", "1000:+042", "sandbox:0",
                                   "www-data", "33", "1000:-0"])
def test_the_issue_spellings_are_refused(asked: str) -> None:
    runs_as, why = narrow_user(asked, own_user="1000:1000", own=Identity(1000, 1000, "sandbox",
                                                                          "sandbox"))
    assert (runs_as, bool(why)) == ("", True)


def test_the_model_agrees_that_these_spellings_widen() -> None:
    """What makes the refusals above right: the engine would give root or shadow."""
    assert resolve("00") == resolve("+0") == resolve("-0") == (0, 0, frozenset())
    assert resolve("00:1000") == (0, 1000, frozenset())
    assert resolve(":1000") == (0, 1000, frozenset())
    assert resolve("1000:42") == (1000, 42, frozenset())
    assert resolve("sandbox") == resolve("1000") == (1000, 1000, frozenset({42}))
    assert split_spec("0:0:x") == ("0", "0")
