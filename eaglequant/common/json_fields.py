"""JSON both ways. Reading: a JSON file's objects, each value checked as it is taken, and a wrong one named by its
key and file in a one-line error. Writing: :class:`JsonRecord`, the one rule by which records are written, each
record declaring only where its JSON is not its fields."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Final, Protocol, TypeVar

from eaglequant.common.errors import EagleQuantError, InputError
from eaglequant.common.findings import Finding
from eaglequant.common.record_reading import json_type, read_record


class ErrorType(Protocol):
    def __call__(self, message: str, *, hint: str | None = None) -> EagleQuantError: ...


class JsonObject:
    """A JSON object read key by key: a missing or wrong-typed value raises ``error`` (an exception class
    taking a message and a hint) naming the file (``where``) and the key (``quantized[2].sqnr_db``)."""

    def __init__(self, data: Any, where: str, error: ErrorType, hint: str, path: str = "") -> None:
        self.where, self.error, self.hint, self.path = where, error, hint, path
        if not isinstance(data, dict):
            raise error(f"{where}: {path or 'the content'} is {json_type(data)}, not an object", hint=hint)
        self.data: dict[str, Any] = data

    def _child(self, data: Any, path: str) -> JsonObject:
        return JsonObject(data, self.where, self.error, self.hint, path)

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def wrong(self, name: str, expected: str) -> EagleQuantError:
        value = self.data.get(name)
        return self.error(
            f"{self.where}: {self.key(name)!r} must be {expected}, not {json_type(value)}", hint=self.hint
        )

    def get(self, name: str) -> Any:
        if name not in self.data:
            raise self.error(f"{self.where}: key {self.key(name)!r} is missing", hint=self.hint)
        return self.data[name]

    def refuse_unknown(self, known: Iterable[str]) -> None:
        unknown = sorted(set(self.data) - set(known))
        if unknown:
            raise self.error(f"{self.where}: unknown key {unknown[0]!r}", hint=self.hint)

    def text(self, name: str) -> str:
        value = self.get(name)
        if not isinstance(value, str):
            raise self.wrong(name, "a string")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.get(name)
        if not (value is None or isinstance(value, str)):
            raise self.wrong(name, "a string or null")
        return value

    def integer(self, name: str) -> int:
        value = self.get(name)
        if type(value) is not int:
            raise self.wrong(name, "an integer")
        return value

    def optional_integer(self, name: str) -> int | None:
        value = self.get(name)
        if not (value is None or type(value) is int):
            raise self.wrong(name, "an integer or null")
        return value

    def number(self, name: str) -> float:
        value = self.get(name)
        if type(value) not in (int, float):
            raise self.wrong(name, "a number")
        return value

    def boolean(self, name: str) -> bool:
        value = self.get(name)
        if type(value) is not bool:
            raise self.wrong(name, "true or false")
        return value

    def texts(self, name: str) -> tuple[str, ...]:
        value = self.get(name)
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise self.wrong(name, "a list of strings")
        return tuple(value)

    def findings(self, name: str) -> tuple[Finding, ...]:
        """A list of findings, each an object of code, subject and message, or a bare string (a record written
        before findings had codes: an ``unrecorded`` finding)."""
        value = self.get(name)
        try:
            if not isinstance(value, list):
                raise ValueError
            return tuple(Finding.from_json(item) for item in value)
        except ValueError:
            raise self.wrong(name, "a list of findings (code, subject, message)") from None

    def text_map(self, name: str) -> dict[str, str]:
        value = self.get(name)
        if not (isinstance(value, dict) and all(isinstance(v, str) for v in value.values())):
            raise self.wrong(name, "an object of strings")
        return dict(value)

    def number_map(self, name: str) -> dict[str, float]:
        value = self.get(name)
        if not (isinstance(value, dict) and all(type(v) in (int, float) for v in value.values())):
            raise self.wrong(name, "an object of numbers")
        return dict(value)

    def child(self, name: str) -> JsonObject:
        return self._child(self.get(name), self.key(name))

    def children(self, name: str) -> list[JsonObject]:
        value = self.get(name)
        if not isinstance(value, list):
            raise self.wrong(name, "a list of objects")
        return [self._child(item, f"{self.key(name)}[{i}]") for i, item in enumerate(value)]

    def child_map(self, name: str) -> dict[str, JsonObject]:
        value = self.get(name)
        if not isinstance(value, dict):
            raise self.wrong(name, "an object")
        return {key: self._child(item, f"{self.key(name)}.{key}") for key, item in value.items()}


def read_json_file(path: Path, error: ErrorType, hint: str) -> Any:
    """The parsed content of the JSON file at ``path``; None when there is no such file. One that cannot be read
    or is not JSON raises ``error`` (with ``hint``) naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror})", hint=hint) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise error(f"{path}: not JSON ({exc})", hint=hint) from None


def json_value(value: Any) -> Any:
    """``value`` as JSON: a record by its own ``to_json``, a path as its string, a tuple or list as a list, a mapping
    value by value."""
    if hasattr(value, "to_json"):
        return value.to_json()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value


class JsonReadError(InputError):
    """A record's JSON that is not what its declaration reads."""


R = TypeVar("R", bound="JsonRecord")

# What a value rule gives for an entry that is not written.
NOT_WRITTEN: Final = object()

# How a written value is made from the value read: a function of it, or the name of a method of the record taking
# it (where the value depends on other fields).
ValueRule = Callable[[Any], Any] | str


class JsonRecord:
    """A dataclass record that writes itself as JSON by one rule: every field, in declaration order, by
    :func:`json_value` (a nested record by its own ``to_json``, a path as its string, a tuple as a list), then the
    computed entries. A record declares only where its JSON differs:

    - ``json_renamed``: field or computed entry -> the key it is written under (declared with :func:`named`, as is
      ``json_values``);
    - ``json_computed``: properties, or methods taking no argument, written after the fields, in this order;
    - ``json_omitted``: fields not written;
    - ``json_values``: field or computed entry -> how its value is written (a :data:`ValueRule`); a rule giving
      :data:`NOT_WRITTEN` leaves the entry out (an entry the record's version does not have);
    - ``json_first``: fields or computed entries written before the others, in this order (the order of keys a
      reader already knows, where it is not the fields' own);
    - ``json_inlined``: fields holding a record whose entries are written in place of the field, first (a wrapper
      record: its own entries then replace theirs in place, or follow them);
    - ``json_error``, ``json_hint``: the error a value read wrong raises, and its hint, where the caller names none
      (a file's own error class, and how to repair the file);
    - ``json_read``: field -> how its value is read back, given the object read and the field's key (where the value
      written is not the field's own by its type: the inverse of its ``json_values`` rule; where the key is missing,
      the rule says what that means, as for files written before it); for an omitted field, how it is read from the
      entries that are written (a field the JSON holds only within another entry).

    A name that is neither a field nor a declared computed entry is refused (``TypeError``) when the record is
    first written."""

    json_renamed: ClassVar[Mapping[str, str]] = {}
    json_computed: ClassVar[tuple[str, ...]] = ()
    json_omitted: ClassVar[tuple[str, ...]] = ()
    json_values: ClassVar[Mapping[str, ValueRule]] = {}
    json_first: ClassVar[tuple[str, ...]] = ()
    json_read: ClassVar[Mapping[str, Callable[[JsonObject, str], Any]]] = {}
    json_inlined: ClassVar[tuple[str, ...]] = ()
    json_error: ClassVar[ErrorType | None] = None
    json_hint: ClassVar[str] = ""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        for name in type(self).json_inlined:
            data.update(json_value(getattr(self, name)))
        entries = ((key, write(self)) for key, write in json_plan(type(self)))
        data.update((key, json_value(value)) for key, value in entries if value is not NOT_WRITTEN)
        return data

    @classmethod
    def from_json(cls: type[R], data: Any, where: str = "JSON", error: ErrorType | None = None, hint: str = "") -> R:
        """The record :meth:`to_json` wrote as ``data``, by the same declarations: each written field from its key
        (renamed as declared), by its type (a nested record by its own ``from_json``, a finding, a tuple, a path,
        an enum), or by its ``json_read`` rule where its written value is not its field's; a field not written
        (omitted without a ``json_read`` rule, or absent in the record's version) takes its default. Computed
        entries are not read. A value that is not what its field takes raises ``error`` (:class:`JsonReadError`),
        with ``hint``, naming ``where`` and the key (``data`` may be a :class:`JsonObject`, whose error and place
        are then used)."""
        error = error or cls.json_error or JsonReadError
        obj = data if isinstance(data, JsonObject) else JsonObject(data, where, error, hint or cls.json_hint)
        return read_record(cls, obj)


Writer = Callable[[Any], Any]


_PLANS: dict[type[JsonRecord], tuple[tuple[str, Writer], ...]] = {}


def json_plan(record_type: type[JsonRecord]) -> tuple[tuple[str, Writer], ...]:
    """``record_type``'s JSON keys in order, each with how its value is taken from a record (checked once)."""
    if record_type not in _PLANS:
        _PLANS[record_type] = _plan(record_type)
    return _PLANS[record_type]


def _plan(record_type: type[JsonRecord]) -> tuple[tuple[str, Writer], ...]:
    fields = [f.name for f in dataclasses.fields(record_type)]  # type: ignore[arg-type]
    written = [name for name in fields if name not in (*record_type.json_omitted, *record_type.json_inlined)]
    wrong = _undeclared(record_type, fields, written)
    if wrong:
        raise TypeError(f"{record_type.__name__}: JSON declarations name {wrong[0]!r}, which it does not write")
    first = record_type.json_first
    order = [*first, *(n for n in written if n not in first), *(n for n in record_type.json_computed if n not in first)]
    keys = [record_type.json_renamed.get(name, name) for name in order]
    if len(set(keys)) < len(keys):
        raise TypeError(f"{record_type.__name__}: two JSON entries are written under one key ({keys})")
    return tuple((key, _writer(record_type, name, name in fields)) for key, name in zip(keys, order, strict=True))


def _undeclared(record_type: type[JsonRecord], fields: list[str], written: list[str]) -> list[str]:
    """The names ``record_type``'s declarations give that are not what they must be."""
    known = {*written, *record_type.json_computed}
    named = {*record_type.json_renamed, *record_type.json_values, *record_type.json_first}
    methods = [rule for rule in record_type.json_values.values() if isinstance(rule, str)]
    return [
        *sorted(named - known),
        *sorted(set(record_type.json_omitted) - set(fields)),
        *(name for name in (*record_type.json_computed, *methods) if not hasattr(record_type, name)),
    ]


def _writer(record_type: type[JsonRecord], name: str, is_field: bool) -> Writer:
    is_method = not is_field and callable(getattr(record_type, name))
    rule = record_type.json_values.get(name)

    def read(record: Any) -> Any:
        value = getattr(record, name)
        return value() if is_method else value

    if rule is None:
        return read
    if isinstance(rule, str):
        method_name = rule
        return lambda record: getattr(record, method_name)(read(record))
    function = rule
    return lambda record: function(read(record))


def named(**entries: Any) -> Mapping[str, Any]:
    """A record's declaration by name (``named(tolerance="near_tie_nats")``), read-only: every record of the class
    shares it."""
    return MappingProxyType(entries)


def finite_or_text(value: float) -> float | str:
    """A :data:`ValueRule`: a figure that is not finite (``inf``, ``-inf``, ``nan``) as text, which JSON can hold."""
    return value if math.isfinite(value) else str(value)


def number_or_text(obj: JsonObject, key: str) -> float:
    """:func:`finite_or_text`'s value read back (a ``json_read`` rule): a number, or ``inf``, ``-inf`` or ``nan``."""
    value = obj.get(key)
    return float(value) if value in ("inf", "-inf", "nan") else float(obj.number(key))


def rounded(digits: int) -> Callable[[float], float]:
    """A :data:`ValueRule`: the value rounded to ``digits`` decimals."""
    return functools.partial(round, ndigits=digits)
