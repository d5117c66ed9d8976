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
