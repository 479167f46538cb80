"""The README's two commands and CI's test command stay in step; fixtures stay small and fresh."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import FIXTURES, ROOT


def _readme_commands() -> list[str]:
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert block
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_ci_runs_the_readme_test_command() -> None:
    setup_and_test = _readme_commands()[1]
    test_command = setup_and_test.split("&&", 1)[1].strip()
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()
    assert "scripts/setup.sh --test" in ci


def test_readme_main_job_names_a_bundled_fixture() -> None:
    main_job = _readme_commands()[0]
    fixture = re.search(r"convert (fixtures/[\w-]+)", main_job)
    assert fixture and (ROOT / fixture.group(1) / "config.json").exists()


TRAINED_PAIRS = (FIXTURES / "trained-pair", FIXTURES / "trained-pair-mla")


def test_fixtures_are_small_and_match_the_generator() -> None:
    for path in FIXTURES.rglob("*"):
        if path.is_file() and not set(TRAINED_PAIRS) & set(path.parents):
            assert path.stat().st_size < 900_000, path
    subprocess.run([sys.executable, str(FIXTURES / "generate.py"), "--check"], check=True, timeout=300)


def test_the_trained_pairs_are_what_their_script_recorded() -> None:
    """The two trained targets and their drafts: at most 16 MB together, every file the SHA-256 its training run
    recorded."""
    import hashlib
    import json

    total = 0
    for pair in TRAINED_PAIRS:
        manifest = json.loads((pair / "MANIFEST.json").read_text())
        files = [p for p in pair.rglob("*") if p.is_file() and p.name != "MANIFEST.json"]
        total += sum(p.stat().st_size for p in files)
        assert {str(p.relative_to(pair)) for p in files} == set(manifest["files"])
        for name, digest in manifest["files"].items():
            assert hashlib.sha256((pair / name).read_bytes()).hexdigest() == digest, name
    assert total <= 16_000_000


def test_no_two_fixture_names_differ_only_by_dash_or_underscore() -> None:
    stems: dict[str, list[str]] = {}
    for path in FIXTURES.iterdir():
        stems.setdefault(path.stem.replace("_", "-"), []).append(path.name)
    assert [names for names in stems.values() if len(names) > 1] == []
