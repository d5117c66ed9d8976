"""JSON encoding of the public models, compatible with the Go SDK's ``encoding/json`` output."""

from __future__ import annotations

import base64
import enum
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory, mapping_structure_factory
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ._errors import ConfigError
from ._lazy_usage import LazyUsage
from ._models import Command, CommandResult, RepositoryConfig, ResourceUsage, usage_of

__all__ = ["configure_converter", "from_json", "to_json"]

T = TypeVar("T")

#: Fields that exist only in Python (streams and raw bytes) and never appear in JSON.
_EXCLUDED: dict[type, tuple[str, ...]] = {
    Command: ("stdin",),
    CommandResult: ("stdout_bytes", "stderr_bytes"),
}

#: Go's zero time.Time, which it writes for a time never set; read as None.
_GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)

#: Private fields behind a property (decoded lazily), in JSON under the property's name.
_TEXT_FIELDS: dict[type, tuple[str, ...]] = {
    CommandResult: ("stdout", "stderr", "combined"),
}

#: The same for a usage built on first read (`LazyUsage`): a `ResourceUsage` in JSON.
_USAGE_FIELDS: dict[type, tuple[str, ...]] = {
    CommandResult: ("resource_usage",),
}

_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:\.(?P<frac>\d+))?(?P<offset>[Zz]|[+-]\d{2}:\d{2})"
)


def _type_name(value: object) -> str:
    """Name a JSON value's type the way error messages show it."""
    return type(value).__name__


def _strict_primitive(tp: type) -> Callable[[Any, type], Any]:
    """Build a structure hook accepting only JSON values of exactly `tp` (ints for float)."""

    def structure(value: Any, cl: type) -> Any:
        if cl is not tp and issubclass(cl, enum.Enum):
            # Singledispatch sends str-based enums to the str hook.
            return _structure_enum(value, cl)
        if tp is float and type(value) is int:
            return float(value)
        if type(value) is not tp:
            raise TypeError(f"expected {tp.__name__}, got {_type_name(value)} {value!r}")
        return value

    return structure


def _structure_enum(value: Any, cl: type[enum.Enum]) -> enum.Enum:
    """Structure an enum from its value, listing the allowed values on error."""
    allowed = [member.value for member in cl]
    if type(value) not in {type(v) for v in allowed}:
        raise TypeError(f"expected {cl.__name__} string, got {_type_name(value)} {value!r}")
    try:
        return cl(value)
    except ValueError:
        choices = ", ".join(str(v) for v in allowed)
        raise ValueError(f"expected one of {choices}, got {value!r}") from None


def _unstructure_datetime(value: datetime) -> str:
    """Format like Go's time.RFC3339Nano: trailing fraction zeros trimmed, UTC as Z."""
    if value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r} has no offset")
    text = value.isoformat()
    if value.microsecond:
        head, _, tail = text.partition(".")
        text = f"{head}.{tail[:6].rstrip('0')}{tail[6:]}"
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _structure_datetime(value: Any, _: type) -> datetime:
    """Parse RFC 3339 with an offset; digits past microseconds are truncated."""
    if type(value) is not str:
        raise TypeError(f"expected RFC 3339 string, got {_type_name(value)} {value!r}")
    match = _RFC3339.fullmatch(value)
    if match is None:
        raise ValueError(f"expected RFC 3339 time with offset, got {value!r}")
    frac = f".{match['frac'][:6]}" if match["frac"] else ""
    offset = "+00:00" if match["offset"] in "Zz" else match["offset"]
    return datetime.fromisoformat(f"{match['date']}T{match['time']}{frac}{offset}")


def _unstructure_timedelta(value: timedelta) -> int:
    """Encode as Go's time.Duration: integer nanoseconds."""
    return (value.days * 86_400 + value.seconds) * 1_000_000_000 + value.microseconds * 1_000


def _structure_timedelta(value: Any, _: type) -> timedelta:
    """Decode integer nanoseconds; the sub-microsecond part is truncated toward zero."""
    if type(value) is not int:
        raise TypeError(f"expected integer nanoseconds, got {_type_name(value)} {value!r}")
    if not -(2**63) <= value <= 2**63 - 1:
        raise ValueError("integer nanoseconds out of Go's time.Duration (int64) range, got "
                         f"a number of {len(str(abs(value)))} digits")
    micros = abs(value) // 1_000
    return timedelta(microseconds=micros if value >= 0 else -micros)


def _structure_optional_datetime(value: Any, _: type) -> datetime | None:
    """Like `_structure_datetime`, reading null and Go's zero time (a time never set) as None."""
    if value is None:
        return None
    parsed = _structure_datetime(value, datetime)
    return None if parsed == _GO_ZERO_TIME else parsed


def _structure_bytes(value: Any, _: type) -> bytes:
    """Decode standard base64, as Go encodes []byte; null (Go's nil slice) is empty."""
    if value is None:
        return b""
    if type(value) is not str:
        raise TypeError(f"expected base64 string, got {_type_name(value)} {value!r}")
    return base64.b64decode(value, validate=True)


def _is_homogeneous_tuple(tp: Any) -> bool:
    args = get_args(tp)
    return get_origin(tp) is tuple and len(args) == 2 and args[1] is Ellipsis


def _is_dict(tp: Any) -> bool:
    return get_origin(tp) in (dict, Mapping)


def _require(
    kind: type,
    label: str,
    hook: Callable[[Any, Any], Any],
    *,
    empty: Callable[[], Any] | None = None,
) -> Callable[[Any, Any], Any]:
    """Wrap `hook` to first check the JSON value is a `kind` (a JSON `label`); JSON null, which
    Go writes for a nil slice or map, becomes ``empty()`` when that is given."""

    def structure(value: Any, cl: Any) -> Any:
        if value is None and empty is not None:
            return empty()
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {_type_name(value)} {value!r}")
        return hook(value, cl)

    return structure


def _field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each attrs field of `cls`."""
    return {f.name: f.type for f in attrs.fields(attrs.resolve_types(cls))}


def _go_zero_json(tp: Any) -> Any:
    """What Go's encoding/json writes for the zero value of the struct mirroring `tp`."""
    if attrs.has(tp):
        return {
            f.name: _go_zero_json(f.type)
            for f in attrs.fields(attrs.resolve_types(tp))
            if f.name not in _EXCLUDED.get(tp, ())
        }
    if tp is str:
        return ""
    if tp is bool:
        return False
    if tp in (int, float, timedelta):
        return 0
    if tp is datetime or tp == datetime | None:
        return "0001-01-01T00:00:00Z"
    return None  # nil slice, map or pointer


def _is_go_zero(value: Any, tp: Any) -> bool:
    """Tell whether `value` is what Go writes (or could write) for a zero `tp`: every key
    absent, null, or its zero; nested structs likewise. Unknown keys are not zero."""
    if value is None:
        return True
    if attrs.has(tp):
        types = _field_types(tp)
        return isinstance(value, dict) and all(
            key in types and _is_go_zero(item, types[key]) for key, item in value.items()
        )
    if _is_homogeneous_tuple(tp) or _is_dict(tp):
        return value in ([], {})
    zero = _go_zero_json(tp)
    return zero is not None and type(value) is type(zero) and bool(value == zero)


def _structure_repository(converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """Read Go's zero RepositoryConfig (``"repository": {"url": "", ...}``, which Go always
    writes) as "no repository", that is None."""

    def structure(value: Any, _: Any) -> RepositoryConfig | None:
        if _is_go_zero(value, RepositoryConfig):
            return None
        return converter.structure(value, RepositoryConfig)

    return structure


def configure_converter(converter: cattrs.Converter, *, strict: bool = True) -> None:
    """Configure `converter` for JSON compatible with Go's encoding/json.

    Rules:

    * int, str and bool accept only that exact JSON type ("5", 1.9 and true are not ints);
      float also accepts ints.
    * Enums are their string values; unknown values are errors listing the allowed ones.
    * datetime is RFC 3339 with an offset (UTC written as "Z", fraction trimmed like Go's
      RFC3339Nano); naive times are refused both ways. An optional time reads null and Go's
      zero time ("0001-01-01T00:00:00Z") as None; None is omitted on output.
    * timedelta is integer nanoseconds (Go's time.Duration); sub-microsecond parts truncate.
    * bytes are standard base64 strings (Go's []byte).
    * Tuples are JSON arrays and dicts JSON objects; null (Go's nil slice or map) reads as
      empty; anything else is an error. Empty ones are written as [] and {}.
    * attrs classes are JSON objects keyed by attribute name. With `strict` (the default)
      unknown keys are errors naming them; otherwise they are ignored, as Go does. Missing
      keys take the default, None-valued fields are omitted on output (Go's omitempty for
      pointers) and zero values are kept. Python-only fields (Command.stdin,
      CommandResult.stdout_bytes and stderr_bytes) are never written, and are unknown keys
      when read.
    * SandboxConfig.repository is always written, None as Go's zero RepositoryConfig; that
      zero value (every key absent, null or zero) reads back as None.
    """
    for primitive in (int, float, str, bool):
        converter.register_structure_hook(primitive, _strict_primitive(primitive))
    converter.register_unstructure_hook(enum.Enum, lambda member: member.value)
    converter.register_structure_hook(enum.Enum, _structure_enum)
    converter.register_unstructure_hook(datetime, _unstructure_datetime)
    converter.register_structure_hook(datetime, _structure_datetime)
    converter.register_structure_hook_factory(
        lambda tp: tp == datetime | None, lambda _: _structure_optional_datetime
    )
    converter.register_unstructure_hook(timedelta, _unstructure_timedelta)
    converter.register_structure_hook(timedelta, _structure_timedelta)
    converter.register_unstructure_hook(bytes, lambda data: base64.b64encode(data).decode())
    converter.register_structure_hook(bytes, _structure_bytes)
    converter.register_structure_hook_factory(
        lambda tp: tp == RepositoryConfig | None, lambda _: _structure_repository(converter)
    )

    def tuple_hook(tp: Any) -> Callable[[Any, Any], Any]:
        base = homogenous_tuple_structure_factory(tp, converter)
        return _require(list, "array", base, empty=tuple)

    def dict_hook(tp: Any) -> Callable[[Any, Any], Any]:
        return _require(dict, "object", mapping_structure_factory(tp, converter), empty=dict)

    strict_str = _strict_primitive(str)

    def text(value: Any, _: Any) -> str:
        result: str = strict_str(value, str)
        return result

    def usage(value: Any, _: Any) -> ResourceUsage:
        return converter.structure(value, ResourceUsage)

    def usage_json(value: ResourceUsage | LazyUsage) -> Any:
        return converter.unstructure(usage_of(value), ResourceUsage)

    def texts(cls: type) -> dict[str, Any]:
        hooks = {f"_{name}": override(rename=name, struct_hook=text, unstruct_hook=str)
                 for name in _TEXT_FIELDS.get(cls, ())}
        for name in _USAGE_FIELDS.get(cls, ()):
            hooks[f"_{name}"] = override(rename=name, struct_hook=usage,
                                         unstruct_hook=usage_json)
        return hooks

    def attrs_structure(cls: type) -> Callable[[Any, Any], Any]:
        skip: dict[str, Any] = {name: override(omit=True) for name in _EXCLUDED.get(cls, ())}
        skip.update(texts(cls))
        return _require(dict, "object", make_dict_structure_fn(
            cls, converter, _cattrs_forbid_extra_keys=strict, **skip
        ))

    def attrs_unstructure(cls: type) -> Callable[[Any], dict[str, Any]]:
        skip: dict[str, Any] = {name: override(omit=True) for name in _EXCLUDED.get(cls, ())}
        skip.update(texts(cls))
        base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, converter, **skip)
        # Go always writes a struct field; None there is Go's zero value.
        zeros = {
            name: _go_zero_json(RepositoryConfig)
            for name, tp in _field_types(cls).items()
            if tp == RepositoryConfig | None
        }
        return lambda obj: {
            k: zeros[k] if v is None and k in zeros else v
            for k, v in base(obj).items()
            if v is not None or k in zeros
        }

    converter.register_structure_hook_factory(_is_homogeneous_tuple, tuple_hook)
    converter.register_structure_hook_factory(_is_dict, dict_hook)
    converter.register_structure_hook_factory(attrs.has, attrs_structure)
    converter.register_unstructure_hook_factory(attrs.has, attrs_unstructure)


_converter = cattrs.Converter()
configure_converter(_converter)
_lenient_converter = cattrs.Converter()
configure_converter(_lenient_converter, strict=False)


def to_json(obj: Any, *, indent: int | None = None) -> str:
    """Encode a model (or a list/dict of models) as JSON; compact unless `indent` is given."""
    separators = (",", ":") if indent is None else (",", ": ")
    return json.dumps(
        _converter.unstructure(obj),
        indent=indent,
        separators=separators,
        ensure_ascii=False,
        allow_nan=False,
    )


def from_json(text: str | bytes, cls: type[T], *, strict: bool = True) -> T:
    """Decode JSON into `cls`, accepting what Go's encoding/json writes for the same structs.

    Args:
        text: The JSON document.
        cls: The model (or e.g. ``list[PortMapping]``) to build.
        strict: Refuse keys `cls` does not have (the default), so a misspelt or misplaced
            setting is an error rather than silently dropped; False ignores them, as Go does.

    Raises:
        ConfigError: The text is not JSON or does not describe a valid `cls`; the details
            list every problem with its field path, separated by "; ".
    """
    what = f"invalid {getattr(cls, '__name__', repr(cls))} JSON"
    try:
        raw = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, NaN/Infinity
        raise ConfigError(what, details=f"malformed JSON: {exc}", cause=exc) from exc
    try:
        return (_converter if strict else _lenient_converter).structure(raw, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError, KeyError) as exc:
        problems: list[str] = []
        _describe(exc, "", problems)
        raise ConfigError(what, details="; ".join(problems), cause=exc) from exc


def _reject_constant(name: str) -> Any:
    """Refuse NaN and Infinity, which Python's json accepts but JSON (and Go) do not."""
    raise ValueError(f"{name} is not valid JSON")


def _describe(exc: BaseException, path: str, out: list[str]) -> None:
    """Append one "path: problem" line per leaf error of a cattrs error tree."""
    if isinstance(exc, ClassValidationError | IterableValidationError):
        # Each sub-error with its note (an attribute or an index), then those without one.
        with_notes, without = exc.group_exceptions()
        for sub, note in with_notes:
            _describe(sub, _join(path, note), out)
        for sub in without:
            _describe(sub, path, out)
    elif isinstance(exc, ForbiddenExtraKeysError):
        where = f"{path}: " if path else ""
        keys = ", ".join(sorted(exc.extra_fields))
        out.append(f"{where}unknown key(s) {keys} in {exc.cl.__name__}: remove or move them "
                   "(from_json(..., strict=False) ignores unknown keys)")
    elif isinstance(exc, ConfigError):
        # Raised by a model validator; its message starts with the field name.
        out.append(f"{path}.{exc}" if path else str(exc))
    elif isinstance(exc, KeyError):
        out.append(f"{path or '$'}: required field missing")
    else:
        out.append(f"{path}: {exc}" if path else str(exc))


def _join(path: str, note: AttributeValidationNote | IterableValidationNote) -> str:
    """Extend a field path with an attribute name, list index or mapping key."""
    if isinstance(note, AttributeValidationNote):
        return f"{path}.{note.name}" if path else note.name
    index = note.index
    return f"{path}[{index}]" if isinstance(index, int) else f"{path}[{json.dumps(index)}]"
