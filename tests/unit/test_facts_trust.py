"""When kept engine facts are planned from without a new read (`_facts_cache.trusted`): for
as long as the daemon named with them answers, else within a window after the read."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from sandbox.docker import _facts_cache
from sandbox.docker._engine_identity import EngineInstance
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


DAEMON = EngineInstance(b"boot", 4242, 0, 1000, 2, 1 << 20)


def test_facts_kept_with_the_daemons_name_are_trusted_past_the_window(
        monkeypatch: pytest.MonkeyPatch) -> None:
    facts = EngineFacts()
    _facts_cache.keep(ADDRESS, facts, time.monotonic() - 60, DAEMON)
    _facts_cache.keep_api(ADDRESS, "v1.41")
    assert _facts_cache.trusted(ADDRESS, "runc") == facts
    assert _facts_cache.same_daemon(None, ADDRESS, facts) is not None  # type: ignore[arg-type]
    assert _facts_cache.trusted(ADDRESS, "runsc") is None  # the runtime rule still holds
    monkeypatch.setattr(_facts_cache, "TRUSTED_FOR", 0.0)  # the tests' and bench's switch
    assert _facts_cache.trusted(ADDRESS, "runc") is None


def test_the_latest_reads_name_labels_the_facts() -> None:
    facts = EngineFacts()
    _facts_cache.keep(ADDRESS, facts, time.monotonic() - 60, DAEMON)
    _facts_cache.keep_api(ADDRESS, "v1.41")
    _facts_cache.keep(ADDRESS, facts, time.monotonic() - 90, None)  # older, unnamed: no say
    assert _facts_cache.same_daemon(None, ADDRESS, facts) is not None  # type: ignore[arg-type]
    _facts_cache.keep(ADDRESS, facts, time.monotonic() - 30, None)  # newer, daemon unnamed
    assert _facts_cache.same_daemon(None, ADDRESS, facts) is None  # type: ignore[arg-type]
    assert _facts_cache.trusted(ADDRESS, "runc") is None  # 30 s: past the window
    _facts_cache.keep(ADDRESS, facts, time.monotonic() - 60, DAEMON)  # older again
    assert _facts_cache.trusted(ADDRESS, "runc") is None
