"""Converters, validators and type checks for the models in `_models`.

Every message starts with the field's name; a wrong type also says what was expected and got,
and how to set ``Class.field``. Mappings become `FrozenMap` copies, collections tuples.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any, TypeAlias, TypeVar, cast

import attrs

from ._errors import ConfigError
from ._lazy_usage import LazyUsage
from ._output import LazyText

_OCTAL_MODE = re.compile(r"[0-7]{3,4}")
ZERO = timedelta(0)
_T = TypeVar("_T")


# Converters. Each takes the attrs field so its messages can start with the field name:
# `named_converters`, every model's field_transformer, wraps them in attrs.Converter. The class
# bodies name the plain functions because mypy's attrs plugin only understands those.

_INT64_MAX = 2**63 - 1


def field_name(field: attrs.Attribute[Any] | None) -> str:
    return field.name if field is not None else "value"


_SHOW_MAX = 80


def show(value: object) -> str:
    """repr() for messages; huge ints (whose repr may even fail) are described, long reprs cut."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _SHOW_MAX else f"{text[:_SHOW_MAX - 3]}..."


def wrong_type(
    name: str, expected: str, value: object, owner: str, field: str, advice: str
) -> ConfigError:
    """Build the error for a value of the wrong type: what was expected, got, and what to do."""
    return ConfigError(
        f"{name} must be {expected}, got {type(value).__name__} {show(value)}",
        details=f"set {owner or 'the'}.{field} to {advice}",
    )


#: The longest duration the JSON wire format (Go's int64 nanoseconds) can carry.
MAX_DURATION = timedelta(microseconds=_INT64_MAX // 1000)


def to_timedelta(
    value: timedelta | float, field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> timedelta:
    """Accept a timedelta or a finite number of seconds within Go's time.Duration range."""
    name = field_name(field)
    if isinstance(value, timedelta):
        td = value
    else:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong_type(name, "a timedelta or a number of seconds", value, owner, name,
                              "a timedelta, or an int or float of seconds")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name} must be a finite number of seconds, got {value!r}")
        try:
            td = timedelta(seconds=value)
        except OverflowError:
            td = timedelta.max
    if abs(td) > MAX_DURATION:
        raise ConfigError(
            f"{name} must be within {MAX_DURATION.total_seconds():.0f} seconds (about 292 "
            f"years, the range of Go's time.Duration on the wire), got {show(value)}"
        )
    return td


def to_float(value: float, field: attrs.Attribute[Any] | None = None, owner: str = "") -> float:
    """Accept an int or float (not bool or str)."""
    name = field_name(field)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise wrong_type(name, "a number", value, owner, name, "an int or float")
    try:
        return float(value)
    except OverflowError:
        raise ConfigError(f"{name} is too large for a float, got {show(value)}") from None


def to_str_tuple(
    value: Iterable[str], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> tuple[str, ...]:
    """Copy an iterable of strings to a tuple, refusing a lone string."""
    if isinstance(value, str | bytes):
        name = field_name(field)
        raise wrong_type(name, "an iterable of str, not a single string", value, owner, name,
                          f"a list of str, e.g. [{value!r}]")
    return to_tuple(value, field, owner, "str", lambda item: isinstance(item, str))


def to_int_tuple(
    value: Iterable[int], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> tuple[int, ...]:
    """Copy an iterable of ints to a tuple."""
    return to_tuple(value, field, owner, "int", _is_int)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def to_tuple(
    value: Iterable[_T],
    field: attrs.Attribute[Any] | None,
    owner: str,
    item: str,
    ok: Callable[[object], bool],
) -> tuple[_T, ...]:
    name = field_name(field)
    advice = f"a list of {item}" + ("(...)" if item[0].isupper() else "")
    if isinstance(value, Mapping):
        # Iterating a dict gives its keys, which is never what was meant.
        raise wrong_type(name, f"an iterable of {item}", value, owner, name, advice)
    try:
        items = tuple(value)
    except TypeError:
        raise wrong_type(name, f"an iterable of {item}", value, owner, name, advice) from None
    for i, each in enumerate(items):
        if not ok(each):
            article = "an" if item[0] in "aeiou" else "a"
            raise wrong_type(f"{name}[{i}]", f"{article} {item}", each, owner, name, advice)
    return items


class FrozenMap(Mapping[str, str]):
    """An immutable, hashable mapping of str to str: what models hold for a dict they take.

    Equal to any mapping with the same items (a dict included); ``dict(m)`` gives a copy to
    change.
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._data: dict[str, str] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return repr(self._data)


def to_str_map(
    value: Mapping[str, str], field: attrs.Attribute[Any] | None = None, owner: str = ""
) -> FrozenMap:
    """Copy a mapping of str to str into a `FrozenMap`, so the frozen instance neither
    shares it with the caller nor lets it be changed."""
    name = field_name(field)
    advice = "a dict of str to str"
    if not isinstance(value, Mapping):
        raise wrong_type(name, "a mapping of str to str", value, owner, name, advice)
    copy = dict(value)
    for key, val in copy.items():
        if not isinstance(key, str):
            raise wrong_type(f"{name} key {show(key)}", "a str", key, owner, name, advice)
        if not isinstance(val, str):
            raise wrong_type(f"{name}[{key!r}]", "a str", val, owner, name, advice)
    return FrozenMap(copy)


_FieldConverter: TypeAlias = "Callable[..., Any]"
#: The converters above, which take the field (and class) to name them in their errors.
FIELD_AWARE: frozenset[Any] = frozenset(
    {to_timedelta, to_float, to_str_tuple, to_int_tuple, to_str_map}
)


def _type_check(
    annotation: str, owner: str, namespace: Mapping[str, Any]
) -> Callable[[Any, attrs.Attribute[Any], Any], None]:
    """Build a validator refusing values that do not match `annotation` (a field's type string).

    Names of classes are looked up in `namespace` (the models' module) when first needed, so a
    field may name a class defined further down.
    """
    parts = [part.strip() for part in annotation.split("|")]
    resolved: list[tuple[Callable[[object], bool], str, str]] = []
    # Types whose instances every rule set above accepts as they are (``type(v) is int`` is
    # an int and no bool): one set lookup instead of a test per member, the common case of
    # every model built (a command's result and usage are built on each command).
    exact: set[type] = set()

    def resolve() -> list[tuple[Callable[[object], bool], str, str]]:
        if not resolved:
            resolved.extend(_type_rule(part, namespace) for part in parts)
            exact.update(t for part in parts for t in _exact_types(part, namespace))
        return resolved

    def check(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value.__class__ in exact:
            return
        rules = resolve()
        if any(ok(value) for ok, _, _ in rules):
            return
        expected = " or ".join(dict.fromkeys(what for _, what, _ in rules))
        advice = " or ".join(dict.fromkeys(how for _, _, how in rules))
        if isinstance(value, Mapping) and any(how.endswith("(...)") for _, _, how in rules):
            advice += " (nested configs are not built from dicts; from_json() reads JSON)"
        # A private field behind a property is passed by its alias: name that.
        name = attribute.alias or attribute.name
        if owner == "ResourceLimits" and name.startswith("memory_"):  # "512m": say the unit
            advice += " of bytes (512 MiB is 512 << 20)"
        raise wrong_type(name, expected, value, owner, name, advice)

    return check


_EXACT: dict[str, tuple[type, ...]] = {
    "None": (type(None),), "str": (str,), "bool": (bool,), "int": (int,), "float": (float,),
    "bytes": (bytes,), "datetime": (datetime,), "timedelta": (timedelta,),
    "LazyText": (LazyText,), "LazyUsage": (LazyUsage,),
}


def _exact_types(part: str, namespace: Mapping[str, Any]) -> tuple[type, ...]:
    """Types whose instances (of exactly that type) `_type_rule` accepts for ``part``."""
    if part in _EXACT:
        return _EXACT[part]
    if part.startswith("tuple["):
        return (tuple,)
    if part.startswith("Mapping["):
        return (dict, FrozenMap)
    if part.startswith("Literal["):
        return (str,)
    cls = namespace.get(part)
    return (cls,) if isinstance(cls, type) else ()


def _type_rule(
    part: str, namespace: Mapping[str, Any]
) -> tuple[Callable[[object], bool], str, str]:
    """Return (test, expected, advice) for one member of a field's annotation."""
    simple: dict[str, tuple[Callable[[object], bool], str, str]] = {
        "None": (lambda v: v is None, "None", "None"),
        "str": (lambda v: isinstance(v, str), "a str", "a str"),
        "bool": (lambda v: isinstance(v, bool), "a bool", "True or False"),
        "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an int", "an int"),
        "float": (lambda v: isinstance(v, float), "a float", "an int or float"),
        "bytes": (lambda v: isinstance(v, bytes), "bytes", "bytes"),
        "datetime": (lambda v: isinstance(v, datetime), "a datetime",
                     "a timezone-aware datetime, e.g. datetime.now(UTC)"),
        "timedelta": (lambda v: isinstance(v, timedelta), "a timedelta", "a timedelta"),
        # Output text decoded on first read; users pass and see a str.
        "LazyText": (lambda v: isinstance(v, LazyText), "a str", "a str"),
        # A command's usage built on first read; users pass and see a ResourceUsage.
        "LazyUsage": (lambda v: isinstance(v, LazyUsage), "a ResourceUsage",
                      "ResourceUsage(...)"),
        "AsyncIterable[bytes]": (lambda v: hasattr(v, "__aiter__"),
                                 "an async iterable of bytes", "an async iterable of bytes"),
    }
    if part in simple:
        return simple[part]
    if part.startswith("tuple["):
        return (lambda v: isinstance(v, tuple), "a tuple", "a list or tuple")
    if part.startswith("Mapping["):
        return (lambda v: isinstance(v, Mapping), "a mapping", "a dict")
    if part.startswith("Literal["):
        # The field's own validator then lists the allowed values.
        return (lambda v: isinstance(v, str), "a str", f"one of {part[8:-1]}")
    cls = namespace[part]
    return (lambda v: isinstance(v, cls), f"a {part}", f"{part}(...)")


def named_converters(
    namespace: Mapping[str, Any], field_aware: Iterable[Any] = ()
) -> Callable[[type, list[attrs.Attribute[Any]]], list[attrs.Attribute[Any]]]:
    """Build the models' field_transformer: it checks every field's type (class names looked up
    in `namespace`) and passes the field and class to the converters in `FIELD_AWARE` and
    `field_aware`, so their errors can name them. A field marked ``derived`` is checked by its
    class instead."""
    aware = FIELD_AWARE | frozenset(field_aware)

    def transform(cls: type, fields: list[attrs.Attribute[Any]]) -> list[attrs.Attribute[Any]]:
        out = []
        for f in fields:
            if f.metadata.get("derived"):
                out.append(f)
                continue
            if f.converter in aware:
                convert = functools.partial(cast(_FieldConverter, f.converter),
                                            owner=cls.__name__)
                f = f.evolve(converter=attrs.Converter(convert, takes_field=True))
            if isinstance(f.type, str):
                check = _type_check(f.type, cls.__name__, namespace)
                validator = check if f.validator is None else attrs.validators.and_(
                    check, f.validator)
                f = f.evolve(validator=validator)
            out.append(f)
        return out

    return transform


# Validators. Messages start with the field name; `_json` prefixes the parent path.
# Fields with converters spell out attrs.field(...) in the class bodies because mypy's
# attrs plugin only sees converters written in place.


def non_negative(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Require a non-negative, finite float or a non-negative timedelta."""
    name = attribute.name
    if isinstance(value, timedelta):
        if value < ZERO:
            raise ConfigError(f"{name} must be >= 0, got {value!r}")
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be finite, got {value!r}")
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {value!r}")


def non_negative_int(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """Require an int (not bool or float) in 0..2**63-1, the range the engine and Go accept."""
    name = attribute.name
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ConfigError(f"{name} must be >= 0, got {show(value)}")
    if value > _INT64_MAX:
        raise ConfigError(f"{name} must be at most {_INT64_MAX} (int64), got {show(value)}")


MEMORY_EXAMPLE = "the unit is bytes: 512 MiB is 512 << 20 (536870912)"


def memory_bytes(obj: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    """A memory size: a non-negative int of bytes; errors say the unit, with an example."""
    try:
        non_negative_int(obj, attribute, value)
    except ConfigError as exc:
        raise ConfigError(exc.message, details=MEMORY_EXAMPLE) from None


def check_aware(_: object, attribute: attrs.Attribute[Any], value: datetime | None) -> None:
    """Require a timezone-aware datetime (or None)."""
    if value is not None and value.utcoffset() is None:
        raise ConfigError(f"{attribute.name} must be timezone-aware, got naive {value!r}")


def _check_port(name: str, value: int, *, allow_zero: bool) -> None:
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= 65535:
        raise ConfigError(f"{name} must be in {lowest}..65535, got {show(value)}")


def check_port(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    _check_port(attribute.name, value, allow_zero=False)


def check_host_port(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    _check_port(attribute.name, value, allow_zero=True)


def check_ports(_: object, attribute: attrs.Attribute[Any], value: tuple[int, ...]) -> None:
    for i, port in enumerate(value):
        _check_port(f"{attribute.name}[{i}]", port, allow_zero=False)


def one_of(*allowed: str, empty_means: str = "") -> Any:
    """Build a validator requiring the value to be one of `allowed`, or "" (what Go writes
    for a string never set) when `empty_means` names the value it then stands for."""

    def check(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in allowed and not (empty_means and value == ""):
            also = f" ('' means {empty_means})" if empty_means else ""
            raise ConfigError(
                f"{attribute.name} must be one of {', '.join(allowed)}{also}, got {value!r}"
            )

    return check


def no_nul(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if "\0" in value:
        raise ConfigError(f"{attribute.name} must not contain NUL bytes")


def no_nul_items(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    for i, item in enumerate(value):
        if "\0" in item:
            raise ConfigError(f"{attribute.name}[{i}] must not contain NUL bytes")


def check_environment(env: Mapping[str, str], name: str = "environment") -> None:
    """Require variables that can be passed to exec: names non-empty without '=' or NUL,
    values without NUL; ``name`` leads the error message."""
    for key, val in env.items():
        if not key or "=" in key or "\0" in key:
            raise ConfigError(f"{name} key {key!r} must be non-empty without '=' or NUL bytes")
        if "\0" in val:
            raise ConfigError(f"{name}[{key!r}] must not contain NUL bytes")


def check_env(_: object, attribute: attrs.Attribute[Any], value: Mapping[str, str]) -> None:
    check_environment(value, attribute.name)


def check_octal(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    if value and not _OCTAL_MODE.fullmatch(value):
        raise ConfigError(f"{attribute.name} must be empty or octal like '0755', got {value!r}")
