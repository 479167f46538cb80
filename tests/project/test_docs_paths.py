"""The docs cite what is there: every repository file, every link between pages, every layer docs/design.md
describes and every name it cites, and every command-line option they show.

A cited path is checked when it starts at the repository's top (``eaglequant/``, ``scripts/``, ``tests/``,
``fixtures/``, ``schemes/``, ``docs/``) or at a layer of the package (``engines/view.py``, read under
``eaglequant/``). Paths inside other projects (vLLM's ``config/speculative.py``) start elsewhere and are left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from test_package_order import LAYERS

from tests.conftest import ROOT

PACKAGE = ROOT / "eaglequant"
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
# Pages the docs link to that are not docs themselves: the log of past benchmark runs.
LINKED_PAGES = (ROOT / "benchmarks" / "results-log.md",)
DESIGN = ROOT / "docs" / "design.md"
DESIGN_MAX_LINES = 300
PAGE_MAX_LINES = 500
TOP_FOLDERS = frozenset({"eaglequant", "scripts", "tests", "fixtures", "schemes", "docs", "benchmarks"})
FILE_SUFFIX = re.compile(r"\.(py|toml|sh|md|json|jsonl|txt|yml|yaml)$")
# Flags of other programs that the docs name beside eaglequant's own.
OTHER_PROGRAMS_FLAGS = frozenset(
    {
        "--speculative-config",  # vLLM's server
        "--key",  # how --engine-arg KEY=VALUE becomes a server flag
        "--no-key",
        "--vllm",  # TorchSpec's trainer
        "--test",  # scripts/setup.sh
        "--check",  # fixtures/generate.py, ruff format
        "--fault",  # scripts/acceptance_table.py
        "--deepseek",  # fixtures/train_pair.py
        "--compare",  # scripts/bench_search.py
        "--verdicts",  # scripts/verify_sweep.py
    }
)


def cited(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def expanded(path: str) -> list[str]:
    """``numerics/{fp8,fp4}.py`` as the paths it names; ``<engine>_setup.py`` as a glob."""
    brace = re.search(r"\{([^}]*)\}", path)
    if not brace:
        return [re.sub(r"<[^>]+>", "*", path)]
    return [p for alt in brace.group(1).split(",") for p in expanded(path[: brace.start()] + alt + path[brace.end() :])]


def exists(root: Path, pattern: str) -> bool:
    return any(root.glob(pattern)) if "*" in pattern else (root / pattern).exists()


def missing_repository_paths(text: str) -> list[str]:
    """Each cited repository file or folder that is not there, as it is cited."""
    missing = []
    for token in cited(text):
        path = token.split("::")[0]
        if re.search(r"[\s$]", path) or "/" not in path or path.split("/")[0] not in TOP_FOLDERS | set(LAYERS):
            continue
        for each in expanded(path):
            looks_like_file = FILE_SUFFIX.search(each) or each.endswith("/")
            if looks_like_file and not (exists(ROOT, each) or exists(PACKAGE, each)):
                missing.append(token)
    return missing


def test_every_repository_path_the_docs_cite_exists() -> None:
    missing = {doc.name: found for doc in DOCS if (found := missing_repository_paths(doc.read_text()))}
    assert missing == {}


def unknown_dotted_names(text: str) -> list[str]:
    """Each ``eaglequant.engines.support_tables`` (a module) or ``eaglequant.batch.run_batch`` (a module's name) the
    text cites that is not there."""
    unknown = []
    for dotted in sorted(set(re.findall(r"\beaglequant(?:\.\w+)+", text))):
        parts = dotted.split(".")
        depth = max(i for i in range(1, len(parts) + 1) if module_file(parts[:i]) is not None)
        module = module_file(parts[:depth])
        assert module is not None
        if not all(re.search(rf"\b{name}\b", module.read_text()) for name in parts[depth:]):
            unknown.append(dotted)
    return unknown


def module_file(parts: list[str]) -> Path | None:
    path = ROOT.joinpath(*parts)
    found = [f for f in (path.with_suffix(".py"), path / "__init__.py") if f.exists()]
    return found[0] if found else None


def test_every_module_the_docs_name_by_its_dotted_path_exists() -> None:
    unknown = {doc.name: found for doc in DOCS if (found := unknown_dotted_names(doc.read_text()))}
    assert unknown == {}


# -- links between pages ---------------------------------------------------------------------------------------


def anchors(text: str) -> set[str]:
    """The ``#anchor`` of each heading as GitHub makes it: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces as ``-``, a repeated heading numbered ``-1``, ``-2``, ..."""
    seen: dict[str, int] = {}
    found = set()
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for heading in re.findall(r"^#{1,6} +(.+?) *$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def has_heading(page: Path, anchor: str) -> bool:
    return page.suffix != ".md" or anchor in anchors(page.read_text())


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` (``[x](cli.md#upload)``, ``[x](#streams)``) whose file or heading is not
    there. Links to the web are left alone."""
    text = page.read_text()
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", text, flags=re.S)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists() or (anchor and not has_heading(linked, anchor)):
            broken.append(target)
    return broken


def test_every_link_between_pages_resolves() -> None:
    broken = {page.name: found for page in (*DOCS, *LINKED_PAGES) if (found := broken_links(page))}
    assert broken == {}


def test_the_link_check_sees_a_missing_page_and_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n\n## Quantizing on a GPU (`convert --device cuda`)\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## Same\n\n## Same\n\n[a](other.md) [b](other.md#quantizing-on-a-gpu-convert---device-cuda) "
        "[c](gone.md#x) [d](other.md#gone) [e](#same-1) [f](#same-2) [g](https://example.com/x.md)\n"
    )
    assert broken_links(page) == ["gone.md#x", "other.md#gone", "#same-2"]


# -- docs/design.md's map -------------------------------------------------------------------------------------


def design_rows(text: str) -> dict[str, str]:
    """The layer table's rows: folder (``engines/``) -> the cell that describes its modules."""
    return dict(re.findall(r"^\| `([^`]+/)` \| (.*) \|$", text, re.M))


def package_words() -> set[str]:
    return {word for path in PACKAGE.rglob("*.py") for word in re.findall(r"\w+", path.read_text())}


def row_citation_exists(token: str, folder: Path, words: set[str]) -> bool:
    """Whether a row's citation is there: a module (``view.py``, ``<engine>_setup.py``) under its folder, a
    module's name (``base.Dialect``) in that module, a name (``EngineView``, ``plan_engines()``) in the package.
    Plain words (``loads``) and other files (``eaglequant_report.json``, ``docs/engines.md``) are not checked here."""
    if token.endswith(".py"):
        return any(folder.rglob(expanded(token)[0]))
    if FILE_SUFFIX.search(token):
        return True  # a file a conversion writes, or a repository file (the path test checks those)
    if dotted := re.fullmatch(r"((?:\w+/)*)(\w+)\.(\w+)", token):
        owner, name = dotted.group(2), dotted.group(3)
        modules = list((PACKAGE / dotted.group(1) if dotted.group(1) else folder).rglob(f"{owner}.py"))
        if modules:
            return re.search(rf"\b{name}\b", modules[0].read_text()) is not None
        return owner[0].isupper() and {owner, name} <= words  # Format.storage: a class and its member
    name_or_call = re.fullmatch(r"(\w+)(?:\(\))?", token)
    if name_or_call and re.search(r"_|[A-Z]", name_or_call.group(1)):
        return name_or_call.group(1) in words
    return True


def unknown_in_row(folder: Path, cell: str, words: set[str]) -> list[str]:
    return [token for token in cited(cell) if not row_citation_exists(token, folder, words)]


def test_each_design_row_cites_modules_and_names_that_exist() -> None:
    rows = design_rows(DESIGN.read_text())
    assert "engines/" in rows and "common/" in rows
    words = package_words()
    unknown = {
        folder: found for folder, cell in rows.items() if (found := unknown_in_row(PACKAGE / folder, cell, words))
    }
    assert unknown == {}


def test_the_design_lists_the_layers_in_their_order() -> None:
    """docs/design.md's layer table is the order ``test_package_order`` enforces, folder by folder."""
    folders = [f"{layer}/" for layer in LAYERS if (PACKAGE / layer).is_dir()]
    assert list(design_rows(DESIGN.read_text())) == folders


def test_no_page_is_over_500_lines() -> None:
    """A page longer than that is two pages, or a log (past benchmark runs live in ``benchmarks/``)."""
    long = {page.name: n for page in DOCS if (n := len(page.read_text().splitlines())) > PAGE_MAX_LINES}
    assert long == {}


def test_the_design_is_a_page_not_an_index() -> None:
    """The design in at most 300 lines; what each module does is in its docstring."""
    assert len(DESIGN.read_text().splitlines()) <= DESIGN_MAX_LINES


def unknown_names(text: str, words: set[str]) -> list[str]:
    """Each name the page cites (``Engine.decide``, ``plan_engines()``, ``common/json_fields.JsonRecord``,
    ``pipeline.py``) that the package does not have. Paths (``engines/view.py``) and dotted module names
    (``eaglequant.engines.support_tables``) are left to the checks above."""
    unknown = []
    for token in cited(text):
        if (token.endswith(".py") and "/" in token) or token.startswith("eaglequant."):
            continue
        if not row_citation_exists(token, PACKAGE, words):
            unknown.append(token)
    return unknown


def test_every_name_the_design_cites_exists() -> None:
    assert unknown_names(DESIGN.read_text(), package_words()) == []


def test_every_module_file_design_names_exists() -> None:
    """Outside the table too (the worked examples): a bare ``pipeline.py`` is a file of this repository."""
    searched = [PACKAGE, ROOT / "tests", ROOT / "scripts", ROOT / "fixtures"]
    bare = [t for t in cited(DESIGN.read_text()) if re.fullmatch(r"[\w<>]+\.py", t)]
    assert bare
    assert [t for t in bare if not any(any(root.rglob(expanded(t)[0])) for root in searched)] == []


def test_the_checks_see_what_is_missing() -> None:
    text = "`eaglequant/conversion/gone.py`, `engines/view.py`, vLLM's `config/speculative.py`, `tests/nowhere/`"
    assert missing_repository_paths(text) == ["eaglequant/conversion/gone.py", "tests/nowhere/"]
    row = "`view.py`: `EngineView`; `gone.py`; `base.Dialect`; `base.NoSuchName`; `no_such_function()`; `loads`"
    words = package_words()
    assert unknown_in_row(PACKAGE / "engines", row, words) == ["gone.py", "base.NoSuchName", "no_such_function()"]
    dotted = "`eaglequant.batch.run_batch`, `eaglequant.engines.gone`, `eaglequant.api.no_such_name`"
    assert unknown_dotted_names(dotted) == ["eaglequant.api.no_such_name", "eaglequant.engines.gone"]
    page = "`Engine.decide`, `Engine.no_such_method`, `QuantConfig.of`, `plan_engines()`, `gone_function()`, `gone.py`"
    assert unknown_names(page, words) == ["Engine.no_such_method", "gone_function()", "gone.py"]


# -- command-line options -------------------------------------------------------------------------------------


def command_options() -> dict[tuple[str, ...], set[str]]:
    """Each command path (``()``, ``("convert",)``, ``("bench", "kernels")``) -> the options it takes."""
    import typer

    from eaglequant.cli import app

    def walk(command: object, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], object]]:
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, (*path, name))

    options = {}
    for path, command in walk(typer.main.get_command(app), ()):
        params = getattr(command, "params", [])
        options[path] = {"-h", "--help"} | {o for p in params for o in (*p.opts, *p.secondary_opts)}
    return options


def command_lines(text: str) -> Iterator[str]:
    """Every shell command the text shows, in a code block or in backticks, comments cut."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    for line in [*"\n".join(blocks).replace("\\\n", " ").splitlines(), *cited(text)]:
        yield from re.split(r"&&|\|\||[|;]", re.sub(r"\s#.*", "", line))


def unknown_options(text: str, options: dict[tuple[str, ...], set[str]]) -> list[str]:
    """Flags after ``eaglequant CMD`` that CMD does not take, and cited flags no command takes."""
    every = set().union(*options.values()) | OTHER_PROGRAMS_FLAGS
    unknown = [f"`{token}`" for token in cited(text) if re.fullmatch(r"--[a-z][\w-]*", token) and token not in every]
    for line in command_lines(text):
        words = line.split()
        starts = [i for i, word in enumerate(words) if word == "eaglequant" or word.endswith("/eaglequant")]
        if not starts:
            continue
        path: tuple[str, ...] = ()
        for word in words[starts[0] + 1 :]:
            if (*path, word) not in options:
                break
            path = (*path, word)
        flags = re.findall(r"(?<![\w-])--[a-z][\w-]*", " ".join(words[starts[0] + 1 :]))
        unknown += [f"eaglequant {' '.join(path)} {flag}" for flag in flags if flag not in options[path] | options[()]]
    return unknown


def test_every_option_the_docs_show_exists() -> None:
    options = command_options()
    assert ("bench", "kernels") in options and "--max-shard-size" in options[("convert",)]
    unknown = {doc.name: found for doc in DOCS if (found := unknown_options(doc.read_text(), options))}
    assert unknown == {}


def test_the_option_check_sees_a_flag_a_command_does_not_take() -> None:
    options = command_options()
    text = "Run `eaglequant verify DST --calib DIR`, then `--no-such-flag`.\n"
    text += "```bash\neaglequant convert A B --workers 2\n```"
    assert unknown_options(text, options) == ["`--no-such-flag`", "eaglequant verify --calib"]
