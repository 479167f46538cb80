"""``accept --server URL`` with no DST (one running server measured on its own, over the prompts or over a window of
its live traffic), ``accept --launch --port``, and accept's per-prompt progress on stderr, against the stand-in vLLM
server of ``test_accept_server.py`` (its ``serve`` fixture, shared through this folder's ``conftest.py``)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from eaglequant.common.errors import InputError
from eaglequant.common.findings import find
from eaglequant.common.local_server import free_port
from eaglequant.common.progress import Tally
from eaglequant.measurement.runners import Launched, OneServer, where_of
from eaglequant.measurement.server import ServerError
from tests.conftest import run_cli
from tests.measurement.test_accept_server import StandIn, walk

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"


class Recorded:
    """Steps as a display is told of them."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, int, int]] = []
        self.stopped = False

    def step(self, text: str, done: int, total: int) -> None:
        self.steps.append((text, done, total))

    def stop(self) -> None:
        self.stopped = True


def where(**given: object) -> object:
    chosen: dict[str, object] = {
        "engine": "vllm",
        "engine_python": None,
        "served_as": "dequantized",
        "arguments": {},
        "server": [],
        "reference_server": None,
        "launch": False,
        "dsts": 0,
    }
    return where_of(**(chosen | given))  # type: ignore[arg-type]


def test_one_server_and_no_dst_is_measured_on_its_own_over_the_prompts(serve: Callable[[StandIn], str]) -> None:
    from eaglequant.api.acceptance import accept_server

    state = StandIn()
    url = serve(state)
    shown = Recorded()
    report = accept_server(url, max_prompts=3, max_tokens=10, steps=shown)
    assert state.completions == 3 and report.window is None and report.model == "stand-in-target"
    greedy = report.modes["greedy"].acceptance
    length = greedy.acceptance_length
    assert length.value > 1 and length.low < length.value < length.high  # an interval over the prompts
    assert len(greedy.per_position) == 3
    one = find(report.notes, "one-server")
    assert one is not None and one.subject == url and "not checked" in str(one)
    record = report.to_json()
    assert record["ok"] is True and record["modes"]["greedy"]["acceptance_length"]["value"] == pytest.approx(
        length.value, abs=1e-5
    )
    assert [s[1:] for s in shown.steps] == [(1, 3), (2, 3), (3, 3)] and shown.stopped
    assert shown.steps[0][0] == f"prompt 1/3 ({url})"


def test_a_window_reads_the_live_traffic_and_sends_nothing(serve: Callable[[StandIn], str]) -> None:
    from eaglequant.api.acceptance import accept_server

    state = StandIn(traffic=True)  # every /metrics read: someone else's request of 5 tokens, one accepted a draft
    report = accept_server(serve(state), window_s=0.1)
    assert state.completions == 0 and report.settings is None and not report.modes
    window = report.window
    one_request = walk(5, 3, lambda i: 1)
    assert window is not None and (window.drafts, window.accepted) == (one_request.drafts, one_request.accepted)
    assert window.acceptance_length == pytest.approx(1 + one_request.accepted / one_request.drafts)
    assert window.per_position == [1.0, 0.0, 0.0]
    live = find(report.notes, "live-traffic")
    assert live is not None and "no interval" in str(live) and "sent nothing" in str(live)
    assert report.to_json()["window"]["drafts"] == one_request.drafts


@pytest.mark.parametrize(
    ("state", "said"),
    [(StandIn(), "no draft ran in the 0.1 s window"), (StandIn(draft=False), "serves no draft")],
)
def test_a_window_in_which_no_draft_ran_is_refused(serve: Callable[[StandIn], str], state: StandIn, said: str) -> None:
    from eaglequant.api.acceptance import accept_server

    with pytest.raises(ServerError, match=said):
        accept_server(serve(state), window_s=0.1)


def test_where_picks_one_server_only_when_it_can_be_measured_alone() -> None:
    url = "http://127.0.0.1:8000"
    assert where(server=[url]) == OneServer(url, None)
    assert where(server=[url], window_s=30.0) == OneServer(url, 30.0)
    refused = {
        "reads one running server's live traffic": {"server": [url, url], "dsts": 1, "window_s": 5.0},
        "server and no DST: one server is measured": {"server": [url, url]},
        "leave it out to measure one server": {"server": [url], "reference_server": url},
        "above 0": {"server": [url], "window_s": 0.0},
        "is where a launched server listens": {"port": 8000},
    }
    for said, given in refused.items():
        with pytest.raises(InputError, match=said):
            where(**given)


def test_launch_takes_a_free_port_and_refuses_a_taken_one() -> None:
    port = free_port()
    chosen = where(launch=True, dsts=1, port=port)
    assert isinstance(chosen, Launched) and chosen.port == port
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        draft = PAIR / "draft"
        done = run_cli("accept", draft, "--target", PAIR / "target", "--launch", "--port", str(busy), "--no-record")
    assert done.exit_code == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and f"--port {busy}: taken" in last, done.stderr


def test_the_command_line_measures_one_server_with_progress_unless_quiet(serve: Callable[[StandIn], str]) -> None:
    url = serve(StandIn())
    args = ["accept", "--server", url, "--max-prompts", "3", "--max-tokens", "8"]
    done = run_cli(*args)
    assert done.exit_code == 0, done.stderr
    assert "acceptance length" in done.stdout and "greedy" in done.stdout, done.stdout
    assert "prompt 1/3" in done.stderr and "prompt 3/3" in done.stderr and "ETA" in done.stderr, done.stderr
    quiet = run_cli(*args, "-q")
    assert quiet.exit_code == 0 and "prompt" not in quiet.stderr and "ETA" not in quiet.stderr, quiet.stderr
    record = json.loads(run_cli(*args, "--json", "-q").stdout)
    assert record["server"] == url and record["modes"]["greedy"]["prompts"] == 3 and record["window"] is None


def test_the_command_line_reads_a_window(serve: Callable[[StandIn], str]) -> None:
    url = serve(StandIn(traffic=True))
    done = run_cli("accept", "--server", url, "--window", "0.1")
    assert done.exit_code == 0, done.stderr
    assert "live traffic" in done.stdout and "drafts" in done.stdout, done.stdout
    record = json.loads(run_cli("accept", "--server", url, "--window", "0.1", "--json").stdout)
    assert record["window"]["drafts"] > 0 and record["settings"] is None


def test_the_comparative_form_shows_each_prompt_of_each_run(serve: Callable[[StandIn], str]) -> None:
    reference, source, dst = serve(StandIn(draft=False)), serve(StandIn()), serve(StandIn())
    draft = str(PAIR / "draft")
    args = ["accept", draft, "--source", draft, "--server", source, "--server", dst, "--reference-server", reference]
    done = run_cli(*args, "--max-prompts", "2", "--max-tokens", "8", "--no-record")
    assert done.exit_code == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("prompt ")]
    assert len(lines) == 8 and all("ETA" in line for line in lines), done.stderr  # 2 prompts × 4 runs
    assert "the reference server" in lines[0] and "the server of DST 1" in lines[5], lines
    assert "the reference server" in lines[-1], lines  # the target alone again, after the drafts
    quiet = run_cli(*args, "--max-prompts", "2", "--max-tokens", "8", "--no-record", "-q")
    assert quiet.exit_code == 0 and "prompt " not in quiet.stderr, quiet.stderr


def test_the_tally_counts_over_the_command() -> None:
    shown = Recorded()
    tally = Tally(shown, 2)
    tally.finished("run 1/2 (no draft)")
    tally.finished("run 2/2 (draft)")
    tally.finished("one more than foreseen")
    assert [s[1:] for s in shown.steps] == [(1, 2), (2, 2), (3, 3)]
    skipping = Tally(shown, 6)  # a DST serving the source's bytes is measured once: its run's steps go
    skipping.finished("prompt 1/2")
    skipping.skipped(2)
    skipping.skipped(9)
    assert (skipping.done, skipping.total) == (1, 1)


def test_no_dst_and_no_server_says_what_to_give() -> None:
    done = run_cli("accept", "--target", str(PAIR / "target"))
    assert done.exit_code == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "no quantized draft to measure" in last and "--server URL" in last, done.stderr


def test_offline_accept_counts_one_step_a_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline, the prompts run inside the engine's process: progress is one line a run, with the runs' ETA."""
    from eaglequant.measurement import runners
    from eaglequant.measurement.measure import Settings
    from eaglequant.measurement.runners import Offline

    monkeypatch.setattr(runners, "offline_runner", lambda _python, _settings: lambda *_run: "ran")
    monkeypatch.setattr("eaglequant.engine_load.engine_python", lambda _engine, _python: Path("/engine/python"))
    shown = Recorded()
    chosen = Settings(PAIR / "target", ("a", "b"), "test")
    run = Offline().runner(chosen, lambda _: None, Tally(shown, Offline().steps(chosen, 1)))
    run(0, None, "no draft")
    run(1, PAIR / "draft", "draft d")
    assert shown.steps == [("run 1/4 (no draft)", 1, 4), ("run 2/4 (draft d)", 2, 4)]  # the target alone twice
