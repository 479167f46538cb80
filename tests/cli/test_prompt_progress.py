"""Per-prompt progress with an ETA on stderr (issue 55, item 5): ``capture`` (transformers here; the engine's
capture counted from the sequence files its process writes) and ``prune --inputs``; off a terminal one line a
prompt, nothing with -q. ``accept``'s are in ``tests/measurement/test_accept_one_server.py``."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest

from eaglequant.cli.progress_display import eta_text
from tests.conftest import run_cli

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"
LINE = re.compile(r"^prompt (\d+)/(\d+) \(([^)]*)\) … (ETA \d+(m\d\ds|s|h\d\dm))?$")


def prompt_lines(stderr: str) -> list[re.Match[str]]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m]


CAPTURE = ["--target", PAIR / "target", "--draft", PAIR / "draft", "--max-prompts", "2", "--max-tokens", "4"]


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A capture on the trained pair by the CLI, 2 prompts of 4 tokens: the file and what stderr showed."""
    path = tmp_path_factory.mktemp("captured") / "captured.safetensors"
    done = run_cli(*map(str, ["capture", path, *CAPTURE]))
    assert done.exit_code == 0, done.stderr
    return path, done.stderr


def test_capture_shows_each_prompt_and_is_quiet_with_q(captured: tuple[Path, str], tmp_path: Path) -> None:
    lines = prompt_lines(captured[1])
    assert [(m[1], m[2], m[3]) for m in lines] == [("1", "2", "transformers"), ("2", "2", "transformers")]
    assert all(m[4] for m in lines), captured[1]  # each with its ETA
    quiet = run_cli(*map(str, ["capture", tmp_path / "q.safetensors", *CAPTURE, "-q"]))
    assert quiet.exit_code == 0 and not prompt_lines(quiet.stderr) and "ETA" not in quiet.stderr, quiet.stderr


def test_prune_inputs_shows_each_prompt_replayed(captured: tuple[Path, str], tmp_path: Path) -> None:
    inputs = captured[0]
    args = ["prune", PAIR / "draft", tmp_path / "pruned", "--size", "64", "--counts", inputs, "--inputs", inputs]
    done = run_cli(*map(str, args))
    assert done.exit_code == 0, done.stderr
    lines = [(m[1], m[2], m[3]) for m in prompt_lines(done.stderr)]
    expected = [(str(i), "2", f"the {draft} draft") for draft in ("source", "pruned") for i in (1, 2)]
    assert lines == expected, done.stderr
    quiet = run_cli(*map(str, [*args[:2], tmp_path / "quiet", *args[3:], "-q"]))
    assert quiet.exit_code == 0 and not prompt_lines(quiet.stderr), quiet.stderr


def test_the_engines_capture_is_counted_from_the_files_its_process_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eaglequant.capturing import engine_capture
    from tests.measurement.test_accept_one_server import Recorded

    shown = Recorded()
    parts = tmp_path / "parts"
    monkeypatch.setattr(engine_capture, "WATCH_S", 0.05)

    def engine() -> None:  # what the probe does: the connector's folder, then one sequence file a prompt
        parts.mkdir()
        (parts / "connector").mkdir()
        for index in range(3):
            time.sleep(0.1)
            (parts / f"sequence-{index:06d}.safetensors").write_bytes(b"")

    with engine_capture._watched(parts, 3, shown):
        worker = threading.Thread(target=engine)
        worker.start()
        worker.join()
    assert [s[1:] for s in shown.steps] == [(1, 3), (2, 3), (3, 3)] and shown.stopped
    assert shown.steps[-1][0] == "prompt 3/3 (vLLM)"


def test_an_eta_reads_as_minutes_and_seconds() -> None:
    assert [eta_text(s) for s in (0, 45.4, 80, 3600 + 300)] == ["0s", "45s", "1m20s", "1h05m"]
