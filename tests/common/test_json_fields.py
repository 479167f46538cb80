"""Typed reading of JSON objects: each wrong value named by its file and key, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from eaglequant.common.errors import InputError
from eaglequant.common.json_fields import JsonObject, read_json_file

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


def test_a_record_is_its_fields_in_order_as_json() -> None:
    from dataclasses import dataclass

    from eaglequant.common.json_fields import record_json

    @dataclass(frozen=True)
    class Inner:
        value: int

        def to_json(self) -> dict[str, int]:
            return record_json(self)

    @dataclass(frozen=True)
    class Outer:
        path: Path
        shape: tuple[int, ...]
        inner: Inner
        by_name: dict[str, Inner]
        prompts: tuple[str, ...]

    record = Outer(Path("/a/b"), (2, 3), Inner(1), {"x": Inner(2)}, ("p", "q"))
    assert list(record_json(record)) == ["path", "shape", "inner", "by_name", "prompts"]
    assert record_json(record, prompts=2) == {
        "path": "/a/b", "shape": [2, 3], "inner": {"value": 1}, "by_name": {"x": {"value": 2}}, "prompts": 2
    }  # fmt: skip
    renamed = record_json(record, {"shape": "dims", "prompts": "prompt_count"}, prompts=2)
    assert list(renamed) == ["path", "dims", "inner", "by_name", "prompt_count"]  # each key where its field stands
    assert renamed["dims"] == [2, 3] and renamed["prompt_count"] == 2
