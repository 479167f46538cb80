"""Typed reading of JSON objects: each wrong value named by its file and key, in one line; and records written by
their fields and declarations."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from eaglequant.common.errors import InputError
from eaglequant.common.json_fields import NOT_WRITTEN, JsonObject, JsonRecord, named, read_json_file, rounded

DATA = {
    "name": "x",
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "names": ["a", "b"],
    "files": {"a": "1"},
    "rows": [{"value": 1}, {"value": "two"}],
    "maybe": None,
}


def read(data: object = DATA) -> JsonObject:
    return JsonObject(data, "report.json", InputError, "convert it again")


def test_values_are_taken_with_their_types() -> None:
    top = read()
    assert (top.text("name"), top.integer("count"), top.number("ratio"), top.boolean("flag")) == ("x", 3, 0.5, True)
    assert top.texts("names") == ("a", "b") and top.text_map("files") == {"a": "1"}
    assert top.optional_text("maybe") is None and top.optional_integer("maybe") is None
    assert top.number("count") == 3  # an integer is a number


@pytest.mark.parametrize(
    ("take", "said"),
    [
        (lambda top: top.integer("ratio"), "report.json: 'ratio' must be an integer, not a number"),
        (lambda top: top.boolean("count"), "report.json: 'count' must be true or false, not an integer"),
        (lambda top: top.integer("flag"), "report.json: 'flag' must be an integer, not true/false"),
        (lambda top: top.text("absent"), "report.json: key 'absent' is missing"),
        (lambda top: top.children("rows")[1].integer("value"), "report.json: 'rows[1].value' must be an integer"),
        (lambda top: top.refuse_unknown(["name"]), "report.json: unknown key 'count'"),
    ],
)
def test_a_wrong_value_is_one_line_naming_file_and_key(take: object, said: str) -> None:
    with pytest.raises(InputError) as caught:
        take(read())  # type: ignore[operator]
    assert caught.value.one_line().startswith(said) and caught.value.hint == "convert it again"


def test_the_content_must_be_an_object() -> None:
    with pytest.raises(InputError, match=r"report\.json: the content is a list, not an object"):
        read([1, 2])


def test_a_json_file_is_none_when_absent_and_one_line_when_broken(tmp_path: Path) -> None:
    assert read_json_file(tmp_path / "absent.json", InputError, "redo it") is None
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(InputError, match=r"broken\.json: not JSON"):
        read_json_file(tmp_path / "broken.json", InputError, "redo it")
    (tmp_path / "ok.json").write_text('{"a": 1}')
    assert read_json_file(tmp_path / "ok.json", InputError, "redo it") == {"a": 1}


@dataclass(frozen=True)
class Run(JsonRecord):
    """A record declaring every kind of difference from its fields."""

    json_renamed = named(seconds="wall_s", size="total")
    json_computed = ("size", "ok", "label")
    json_omitted = ("scratch",)
    json_values = named(seconds=rounded(2), shape="_dims", label=str.upper)
    json_first = ("name", "ok")

    name: str
    seconds: float
    shape: tuple[int, ...]
    path: Path
    scratch: Path | None = None

    @property
    def ok(self) -> bool:
        return self.seconds < 10

    def size(self) -> int:
        return len(self.shape)

    @property
    def label(self) -> str:
        return f"{self.name}-{self.size()}"

    def _dims(self, shape: tuple[int, ...]) -> str:
        return "x".join(map(str, shape))


def test_a_record_writes_its_first_names_then_its_fields_then_its_computed_entries() -> None:
    written = Run("fc", 1.23456, (2, 3), Path("/out"), scratch=Path("/tmp")).to_json()
    assert written == {
        "name": "fc",
        "ok": True,
        "wall_s": 1.23,
        "shape": "2x3",
        "path": "/out",
        "total": 2,
        "label": "FC-2",
    }
    assert list(written) == ["name", "ok", "wall_s", "shape", "path", "total", "label"]


def test_a_plain_record_writes_its_fields_in_order_nested_records_by_their_own_rule() -> None:
    @dataclass
    class Outer(JsonRecord):
        runs: list[Run]
        by_name: dict[str, tuple[int, ...]]

    outer = Outer([Run("a", 20.0, (), Path("p"))], {"x": (1,)})
    assert outer.to_json() == {"runs": [outer.runs[0].to_json()], "by_name": {"x": [1]}}
    assert outer.runs[0].to_json()["ok"] is False


@pytest.mark.parametrize(
    ("declaration", "named_wrongly"),
    [
        ({"json_renamed": named(secs="s")}, "secs"),
        ({"json_first": ("ok",)}, "ok"),  # a computed entry must be declared to be written
        ({"json_omitted": ("absent",)}, "absent"),
        ({"json_computed": ("absent",)}, "absent"),
        ({"json_values": named(name="_absent")}, "_absent"),
        ({"json_omitted": ("name",), "json_values": named(name=str)}, "name"),  # an omitted field is not written
    ],
)
def test_a_declaration_naming_what_the_record_does_not_write_is_refused(
    declaration: dict[str, object], named_wrongly: str
) -> None:
    record_type = dataclass(type("Wrong", (JsonRecord,), {"__annotations__": {"name": "str"}, **declaration}))
    with pytest.raises(TypeError, match=f"Wrong: JSON declarations name '{named_wrongly}'"):
        record_type("x").to_json()


def test_two_entries_under_one_key_are_refused() -> None:
    @dataclass
    class Clash(JsonRecord):
        json_renamed = named(first="name")

        name: str
        first: str

    with pytest.raises(TypeError, match="two JSON entries are written under one key"):
        Clash("a", "b").to_json()


@dataclass(frozen=True)
class Versioned(JsonRecord):
    """A record whose later entries its earlier versions do not have."""

    json_values = named(added="_since_version_2")

    version: int
    name: str
    added: str | None = None

    def _since_version_2(self, added: str | None) -> object:
        return added if self.version >= 2 else NOT_WRITTEN


def test_an_entry_whose_rule_gives_not_written_is_left_out() -> None:
    assert Versioned(1, "a").to_json() == {"version": 1, "name": "a"}
    assert Versioned(2, "a").to_json() == {"version": 2, "name": "a", "added": None}
