"""FrozenMap, the mapping every model holds (sandbox/_validate.py)."""

from __future__ import annotations

import pytest

from sandbox._validate import FrozenMap


def test_frozen_map_is_a_read_only_hashable_copy() -> None:
    source = {"b": "2", "a": "1"}
    m = FrozenMap(source)
    source["c"] = "3"
    assert dict(m) == {"b": "2", "a": "1"} and list(m) == ["b", "a"] and len(m) == 2
    assert m == {"a": "1", "b": "2"}
    assert {"a": "1", "b": "2"} == m  # noqa: SIM300 (dict on the left: the reflected __eq__)
    assert m != {"a": "1"} and m != FrozenMap({"a": "1", "b": "3"})
    assert hash(m) == hash(FrozenMap([("a", "1"), ("b", "2")]))  # order does not matter
    assert repr(m) == "{'b': '2', 'a': '1'}"
    with pytest.raises(TypeError):
        m["a"] = "9"  # type: ignore[index]
    with pytest.raises(TypeError):
        del m["a"]  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        m.update({"a": "9"})  # type: ignore[attr-defined]
    with pytest.raises(AttributeError):
        m.x = 1  # type: ignore[attr-defined]
    assert m["a"] == "1" and m.get("z") is None and "b" in m


def test_the_exact_type_fast_path_keeps_every_refusal() -> None:
    """A bool is no int, a str subclass is still a str, a wrong type is still refused."""
    import enum

    import pytest as _pytest

    from sandbox._errors import ConfigError as _ConfigError
    from sandbox._models import CommandResult as _CommandResult
    from sandbox._models import ResourceUsage as _ResourceUsage

    class Name(enum.StrEnum):
        A = "a"

    assert _CommandResult(exit_code=0, error=Name.A).error == "a"
    with _pytest.raises(_ConfigError, match="exit_code must be an int"):
        _CommandResult(exit_code=True)
    with _pytest.raises(_ConfigError, match="memory_usage must be an int"):
        _ResourceUsage(memory_usage=1.5)  # type: ignore[arg-type]
    with _pytest.raises(_ConfigError, match="process_id must be >= 0"):
        _CommandResult(process_id=-1)
