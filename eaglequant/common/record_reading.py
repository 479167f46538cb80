"""Reading a :class:`~eaglequant.common.json_fields.JsonRecord` back by the declarations it is written by
(:meth:`JsonRecord.from_json`): each written field from its key, by its type."""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from eaglequant.common.errors import EagleQuantError
from eaglequant.common.findings import Finding

# JsonObject and JsonRecord are json_fields', which imports this module: here they are known by what they do.
JsonObject = Any
R = TypeVar("R")

JSON_TYPES = {dict: "an object", list: "a list", str: "a string", int: "an integer", float: "a number"}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    return JSON_TYPES.get(type(value), type(value).__name__)


def _is_record(hint: Any) -> bool:
    """A JsonRecord class (known by its declarations: this module is imported by json_fields, not the other way)."""
    return isinstance(hint, type) and dataclasses.is_dataclass(hint) and hasattr(hint, "json_renamed")


def read_record(record_type: type[R], obj: JsonObject) -> R:
    """The record of ``record_type`` (a JsonRecord) written as ``obj`` (a JsonObject)."""
    hints = typing.get_type_hints(record_type)
    fields = [f for f in dataclasses.fields(record_type) if f.init]  # type: ignore[arg-type]
    declared: Any = record_type  # its declarations: json_inlined, json_omitted, json_renamed, json_read
    values: dict[str, Any] = {}
    for field in fields:
        if field.name in declared.json_inlined:
            values[field.name] = read_record(hints[field.name], obj)
            continue
        key = declared.json_renamed.get(field.name, field.name)
        read = declared.json_read.get(field.name)
        if read:  # from its key, or (omitted) from the entries written; where its key is missing, as the rule says
            values[field.name] = read(obj, key)
            continue
        if field.name in declared.json_omitted:
            continue
        if key not in obj.data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                obj.get(key)  # raises: the key is missing
            continue
        values[field.name] = _read_value(hints[field.name], obj, key, obj.data[key])
    return record_type(**values)


_PLURAL = {str: "strings", int: "integers", float: "numbers", bool: "true or false values"}


def _expected(hint: Any) -> str:
    """What a value of type ``hint`` is in JSON, in words (``an object of strings``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_expected(a) for a in args if a is not type(None)) + (
            " or null" if type(None) in args else ""
        )
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        return f"an object of {_PLURAL[args[1]]}" if args and args[1] in _PLURAL else "an object"
    if origin in (tuple, list, frozenset, set, collections.abc.Sequence):
        return f"a list of {_PLURAL[args[0]]}" if args and args[0] in _PLURAL else "a list"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(member.value) for member in hint)
    if hint in (str, Path):
        return "a string"
    return {int: "an integer", float: "a number", bool: "true or false", Finding: "a finding"}.get(hint, "an object")


def _read_value(hint: Any, obj: JsonObject, key: str, value: Any) -> Any:
    """``value``, written under ``key`` of ``obj`` (as :func:`json_value` wrote it), as a value of type ``hint``;
    a value that is not raises ``obj``'s error naming the key."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    wrong = obj.error(f"{obj.where}: {obj.key(key)!r} must be {_expected(hint)}, not {json_type(value)}", hint=obj.hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _read_value(arg, obj, key, value)
            except EagleQuantError:
                if len(args) <= 2:  # an optional value: the error names what is wrong inside it
                    raise
        raise wrong
    if hint is Any or hint is object or origin is typing.Literal:
        return value
    if _is_record(hint):
        return read_record(hint, obj._child(value, obj.key(key)))
    if hint is Finding:
        try:
            return Finding.from_json(value)
        except ValueError:
            raise wrong from None
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise wrong from None
    if hint is Path:
        if not isinstance(value, str):
            raise wrong
        return Path(value)
    if isinstance(hint, type) and issubclass(hint, tuple) and hasattr(hint, "_fields"):  # a NamedTuple
        if not isinstance(value, list) or len(value) != len(hint._fields):
            raise wrong
        inner = typing.get_type_hints(hint)
        return hint(
            *(_item(inner[n], obj, key, i, v) for i, (n, v) in enumerate(zip(hint._fields, value, strict=True)))
        )
    if origin in (tuple, list, frozenset, set, collections.abc.Sequence):
        if not isinstance(value, list):
            raise wrong
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise wrong
            return tuple(_item(a, obj, key, i, v) for i, (a, v) in enumerate(zip(args, value, strict=True)))
        items = [_item(args[0] if args else Any, obj, key, i, v) for i, v in enumerate(value)]
        return (tuple if origin is collections.abc.Sequence else origin)(items)
    if origin in (dict, collections.abc.Mapping) or hint is dict:
        if not isinstance(value, dict):
            raise wrong
        item = args[1] if args else Any
        entries = obj._child(value, obj.key(key))
        return {k: _read_value(item, entries, k, v) for k, v in value.items()}
    if hint is float:
        if type(value) not in (int, float):
            raise wrong
        return float(value)
    if hint in (int, str, bool):
        if type(value) is not hint:
            raise wrong
        return value
    if hint is type(None):
        if value is not None:
            raise wrong
        return None
    raise TypeError(f"no JSON reader for {hint} ({obj.key(key)})")


def _item(hint: Any, obj: JsonObject, key: str, index: int, value: Any) -> Any:
    """Item ``index`` of the list under ``key``, named ``key[index]`` in an error."""
    holder = obj._child({f"{key}[{index}]": value}, obj.path)
    return _read_value(hint, holder, f"{key}[{index}]", value)
