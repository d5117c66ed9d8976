"""When kept engine facts are planned from without a new read (`_facts_cache.trusted`)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sandbox.docker import _facts_cache
from sandbox.docker._facts import EngineFacts

ADDRESS = "unix:///test/trust.sock"


@pytest.fixture(autouse=True)
def clean() -> Iterator[None]:
    _facts_cache.forget(ADDRESS)
    yield
    _facts_cache.forget(ADDRESS)


def keep(facts: EngineFacts, *, ago: float = 0.0, api: str = "v1.41") -> None:
    _facts_cache.keep(ADDRESS, facts, time.monotonic() - ago)
    if api:
        _facts_cache.keep_api(ADDRESS, api)


def test_runc_moments_after_a_read_is_trusted() -> None:
    facts = EngineFacts(runtimes=frozenset({"runc", "runsc"}))
    keep(facts)
    assert _facts_cache.trusted(ADDRESS, "runc") == facts
    assert _facts_cache.trusted(ADDRESS, "") == facts  # the default is runc


def test_other_runtimes_are_always_read_again() -> None:
    # runsc's arguments (--ignore-cgroups) change with a daemon reload; runc's cannot.
    keep(EngineFacts(runtimes=frozenset({"runc", "runsc"})))
    assert _facts_cache.trusted(ADDRESS, "runsc") is None
    keep(EngineFacts(runtimes=frozenset({"runc", "runsc"}), default_runtime="runsc"))
    assert _facts_cache.trusted(ADDRESS, "") is None
    assert _facts_cache.trusted(ADDRESS, "runc") is not None


def test_old_or_unstamped_facts_or_no_api_version_are_read_again() -> None:
    keep(EngineFacts(), ago=_facts_cache.TRUSTED_FOR + 0.1)
    assert _facts_cache.trusted(ADDRESS, "runc") is None
    _facts_cache.keep(ADDRESS, EngineFacts())  # read when? unknown
    assert _facts_cache.trusted(ADDRESS, "runc") is None
    _facts_cache.forget(ADDRESS)
    keep(EngineFacts(), api="")
    assert _facts_cache.trusted(ADDRESS, "runc") is None


def test_a_stamp_never_moves_back() -> None:
    keep(EngineFacts())
    _facts_cache.keep(ADDRESS, EngineFacts(), time.monotonic() - 60)  # an older read's answer
    assert _facts_cache.trusted(ADDRESS, "runc") is not None


def test_an_older_reads_other_answer_does_not_replace_a_newer_one() -> None:
    newer = EngineFacts(runtimes=frozenset({"runc"}))
    keep(newer)
    _facts_cache.keep(ADDRESS, EngineFacts(runtimes=frozenset({"runc", "runsc"})),
                      time.monotonic() - 1)
    assert _facts_cache.kept(ADDRESS) == newer
