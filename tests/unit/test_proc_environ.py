"""`sandbox._proc_environ`: the sweeps read a sandbox process's environment with a bound and
find their entry without splitting it (a process chooses what its environment shows)."""

from __future__ import annotations

from pathlib import Path

from sandbox._proc_environ import (
    MAX_ENVIRON,
    has_entry,
    has_name,
    read_environ_file,
)


def test_an_entry_is_found_only_whole() -> None:
    env = b"A=1\0SANDBOX_EXEC_ID=abc\0B=2\0"
    assert has_entry(env, b"SANDBOX_EXEC_ID=abc") and has_entry(env, b"A=1")
    assert has_entry(env, b"B=2") and has_entry(b"B=2", b"B=2")
    assert has_entry(b"A=1\0B=2", b"B=2")  # the last entry without its NUL
    assert not has_entry(env, b"SANDBOX_EXEC_ID=ab")  # a prefix of the value
    assert not has_entry(env, b"EXEC_ID=abc")  # a suffix of the entry
    assert not has_entry(b"XSANDBOX_EXEC_ID=abc\0", b"SANDBOX_EXEC_ID=abc")
    assert not has_entry(b"", b"A=1")


def test_a_huge_environment_is_read_only_to_the_bound(tmp_path: Path) -> None:
    """A process that moved its environment over 1 GiB of its memory: the read stops at the
    bound (before: read whole, then a list item per NUL byte, many GiB at a timeout)."""
    path = tmp_path / "environ"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: 1 GiB of NULs, no disk used
    data = read_environ_file(path)
    assert len(data) == MAX_ENVIRON
    assert not has_entry(data, b"SANDBOX_EXEC_ID=abc")


def test_a_name_is_found_whole_at_any_value() -> None:
    assert has_name(b"SANDBOX_EXEC_ID=\0", b"SANDBOX_EXEC_ID")
    assert has_name(b"A=1\0SANDBOX_EXEC_ID=abc", b"SANDBOX_EXEC_ID")
    assert not has_name(b"XSANDBOX_EXEC_ID=abc\0A=SANDBOX_EXEC_ID=1", b"SANDBOX_EXEC_ID")
    assert not has_name(b"SANDBOX_EXEC_IDS=1\0", b"SANDBOX_EXEC_ID")
