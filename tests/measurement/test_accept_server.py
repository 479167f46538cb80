"""``accept --server`` without an engine: the /metrics parser, what one request may move the counters by, the engine
arguments, and every refusal, against a small stand-in server on 127.0.0.1 that answers /metrics, /v1/models and
/v1/completions as vLLM does. The stand-in only exercises the plumbing and the refusals; that a real server's
figures agree with the offline run's is shown with vLLM itself (``test_accept_server_engine.py``)."""

from __future__ import annotations

import json
import operator
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from eaglequant.common.errors import InputError
from eaglequant.common.findings import find
from eaglequant.common.local_server import free_port
from eaglequant.measurement.engine_args import engine_arguments, parse_engine_arg, server_flags, serving_arguments
from eaglequant.measurement.measure import Settings, modes_for
from eaglequant.measurement.server import Server, ServerError, measure_on_server
from eaglequant.measurement.spec_counters import (
    MetricsFormatError,
    SpecCounters,
    one_request_problem,
    parse_spec_counters,
)
from tests.conftest import run_cli

PAIR = Path(__file__).resolve().parents[2] / "fixtures" / "trained-pair"

# What vLLM 0.32.0's /metrics shows of a draft (prometheus_client's text: `_total` and `_created` per counter),
# data parallel over two engines
METRICS = """\
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 2.0
vllm:spec_decode_num_drafts_created{engine="0",model_name="m"} 1.7e+09
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 30.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 6.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 14.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 8.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 4.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 1.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 0.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 0.0
vllm:num_requests_running{engine="0",model_name="m"} 0.0
"""


def test_the_counters_are_read_summed_over_engines() -> None:
    assert parse_spec_counters(METRICS) == SpecCounters(12, 36, 15, (9, 4, 2))


def test_a_page_without_spec_decode_counters_is_no_draft() -> None:
    assert parse_spec_counters('vllm:num_requests_running{engine="0"} 0.0\n# HELP x\n') is None


@pytest.mark.parametrize(
    "line",
    [
        "vllm:spec_decode_num_drafts_total{engine=0} 1.0",  # an unquoted label
        "vllm:spec_decode_num_drafts_total 1.5",  # not a count
        "vllm:spec_decode_num_drafts_total -1",
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0"} 1.0',  # no position
    ],
)
def test_a_malformed_counter_line_is_refused(line: str) -> None:
    with pytest.raises(MetricsFormatError):
        parse_spec_counters(line + "\n")


def test_a_label_value_may_hold_commas_braces_and_escaped_quotes() -> None:
    page = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="a,\\"b}",position="1"} 3\n'
    assert parse_spec_counters(page) == SpecCounters(0, 0, 0, (0, 3))


def walk(generated: int, k: int, rule: Callable[[int], int]) -> SpecCounters:
    """The counters of one request that generated ``generated`` tokens, draft i accepting ``rule(i)`` tokens."""
    drafts, emitted, per_position = 0, 1, [0] * k
    while emitted < generated:
        accepted = rule(drafts) % (k + 1)
        for j in range(accepted):
            per_position[j] += 1
        drafts, emitted = drafts + 1, emitted + accepted + 1
    return SpecCounters(drafts, drafts * k, sum(per_position), tuple(per_position))


@pytest.mark.parametrize("rule", [lambda i: 0, lambda i: 3, lambda i: i, lambda i: 7 * i + 1])
def test_one_requests_counters_are_consistent(rule: Callable[[int], int]) -> None:
    for generated in (2, 5, 16, 33):
        assert one_request_problem(walk(generated, 3, rule), 3, generated) is None


def test_two_requests_counters_are_not_one() -> None:
    one = walk(16, 3, lambda i: i)
    two = SpecCounters(
        2 * one.drafts, 2 * one.draft_tokens, 2 * one.accepted, tuple(2 * a for a in one.accepted_per_position)
    )
    assert "emit" in (one_request_problem(two, 3, 16) or "")


@pytest.mark.parametrize(
    ("delta", "found"),
    [
        (SpecCounters(3, 9, -1, (0, 0, -1)), "went down"),
        (SpecCounters(3, 8, 2, (2, 0, 0)), "not 3 each"),
        (SpecCounters(3, 9, 3, (2, 0, 0)), "does not add up"),
        (SpecCounters(3, 9, 3, (1, 2, 0)), "rises"),
        (SpecCounters(3, 9, 5, (4, 1, 0)), "passes 3 drafts"),
    ],
)
def test_counters_no_request_could_move_are_named(delta: SpecCounters, found: str) -> None:
    assert found in (one_request_problem(delta, 3, 16) or "")


def test_engine_arguments_parse_json_values_else_strings() -> None:
    assert parse_engine_arg("max-model-len=4096") == ("max_model_len", 4096)
    assert parse_engine_arg("--enforce-eager=false") == ("enforce_eager", False)
    assert parse_engine_arg('compilation_config={"level": 0}') == ("compilation_config", {"level": 0})
    assert parse_engine_arg("quantization=fp8") == ("quantization", "fp8")
    assert parse_engine_arg("tokenizer=a=b") == ("tokenizer", "a=b")
    chosen = engine_arguments(["gpu_memory_utilization=0.9"], tensor_parallel_size=8)
    assert chosen == {"gpu_memory_utilization": 0.9, "tensor_parallel_size": 8}
    assert engine_arguments({"max-num-seqs": 4}) == {"max_num_seqs": 4}


@pytest.mark.parametrize(
    ("pairs", "said"),
    [
        (["max_model_len"], "not KEY=VALUE"),
        (["=4"], "not KEY=VALUE"),
        (["max model len=4"], "not KEY=VALUE"),
        (["model=x"], "use target=TARGET"),
        (["dtype=float16"], "use dtype=DTYPE"),
        (["tensor-parallel-size=8"], "use tensor_parallel_size=N"),
        (["seed=3"], "use seed=SEED"),
        (["speculative_config={}"], "source=SRC"),
        (["disable_log_stats=false"], "leave it out"),
        (["port=8000"], "use port=N"),
    ],
)
def test_a_malformed_or_conflicting_engine_argument_is_refused(pairs: list[str], said: str) -> None:
    with pytest.raises(InputError, match=said):
        engine_arguments(pairs)


def test_user_engine_arguments_override_the_defaults_not_eaglequants_own() -> None:
    served = serving_arguments(
        {"enforce_eager": False, "max_model_len": 8192}, dtype="bfloat16", seed=1, max_model_len=300
    )
    assert served["enforce_eager"] is False and served["max_model_len"] == 8192
    assert served["dtype"] == "bfloat16" and served["seed"] == 1 and served["max_num_seqs"] == 1


def test_engine_arguments_become_server_flags() -> None:
    flags = server_flags({"enforce_eager": True, "enable_prefix_caching": False, "max_model_len": 4096, "x": {"a": 1}})
    assert flags == ["--enforce-eager", "--no-enable-prefix-caching", "--max-model-len", "4096", "--x", '{"a": 1}']


# ---- a stand-in server -------------------------------------------------------------------------------------------


@dataclass
class StandIn:
    """What the stand-in serves: counters that one completion moves as one drafting request would (``draft``), or
    none; ``traffic``: every /metrics read moves them too (someone else's requests); ``requests_per_completion``:
    how many requests' worth of counters one completion adds; ``histograms``: /metrics has vLLM's decode histograms,
    each completion observed as taking ``decode_seconds(prompt, tokens)`` to decode."""

    draft: bool = True
    k: int = 3
    traffic: bool = False
    requests_per_completion: int = 1
    counters: SpecCounters = field(default_factory=lambda: SpecCounters(0, 0, 0, (0, 0, 0)))
    model: str = "stand-in-target"
    completions: int = 0
    skew: int = 0  # added to each draft's accepted tokens (mod k + 1) on prompts of odd length: another draft
    histograms: bool = True  # timed by its own clock, alike in every arm (the client's wall time is the machine's)
    decoded: tuple[float, int, int] = (0.0, 0, 0)  # the histograms' sums: decode seconds, tokens, requests
    slow: tuple[int, ...] = ()  # the completions (counted from 0) that decode 20 times slower: a busy machine
    delay_s: float = 0.0  # each completion takes this long in wall time (20 times as long where slow)
    in_flight: int = 0
    started: list[int] = field(default_factory=list)  # the requests in flight as each completion began
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @staticmethod
    def decode_seconds(prompt: str, tokens: int) -> float:
        return 0.01 * (tokens - 1) * (1 + len(prompt) % 3)

    def histogram_lines(self) -> list[str]:
        if not self.histograms:
            return []
        seconds, tokens, requests = self.decoded
        labels = 'engine="0",model_name="m"'
        return [
            f'vllm:request_decode_time_seconds_bucket{{{labels},le="+Inf"}} {float(requests)}',
            f"vllm:request_decode_time_seconds_count{{{labels}}} {float(requests)}",
            f"vllm:request_decode_time_seconds_sum{{{labels}}} {seconds}",
            f"vllm:request_generation_tokens_count{{{labels}}} {float(requests)}",
            f"vllm:request_generation_tokens_sum{{{labels}}} {float(tokens)}",
        ]

    def metrics(self) -> str:
        if self.traffic:
            self.add(walk(5, self.k, lambda i: 1))
        if not self.draft:
            return (
                "\n".join(['vllm:num_requests_running{engine="0",model_name="m"} 0.0', *self.histogram_lines()]) + "\n"
            )
        c = self.counters
        lines = [
            f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {float(c.drafts)}',
            f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {float(c.draft_tokens)}',
            f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {float(c.accepted)}',
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{j}"}} {float(v)}'
            for j, v in enumerate(c.accepted_per_position)
        ]
        return "\n".join([*lines, *self.histogram_lines()]) + "\n"

    def add(self, delta: SpecCounters) -> None:
        c = self.counters
        self.counters = SpecCounters(
            c.drafts + delta.drafts,
            c.draft_tokens + delta.draft_tokens,
            c.accepted + delta.accepted,
            tuple(a + b for a, b in zip(c.accepted_per_position, delta.accepted_per_position, strict=True)),
        )

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.in_flight += 1
            self.started.append(self.in_flight)
            slower = 20.0 if self.completions in self.slow else 1.0
            self.completions += 1
        time.sleep(self.delay_s * slower)
        with self.lock:
            self.in_flight -= 1
            return self.answer(body, slower)

    def answer(self, body: dict[str, Any], slower: float) -> dict[str, Any]:
        n, prompt = int(body["max_tokens"]), str(body["prompt"])
        for _ in range(self.requests_per_completion):
            if self.draft:
                self.add(walk(n, self.k, lambda i: i + len(prompt) + self.skew * (len(prompt) % 2)))
            seconds, tokens, requests = self.decoded
            self.decoded = (seconds + slower * self.decode_seconds(prompt, n), tokens + n, requests + 1)
        tokens = [(len(prompt) * 7 + t) % 4096 for t in range(n)]
        top = [{f"token_id:{t}": -0.5, f"token_id:{t + 1}": -1.5} for t in tokens]
        return {"choices": [{"token_ids": tokens, "logprobs": {"top_logprobs": top}}]}


@pytest.fixture
def serve() -> Iterator[Callable[[StandIn], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(state: StandIn) -> str:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, payload: str | dict[str, Any], status: int = 200) -> None:
                data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                answers: dict[str, Callable[[], str | dict[str, Any]]] = {
                    "/metrics": state.metrics,
                    "/v1/models": lambda: {"data": [{"id": state.model}]},
                }
                self._send(answers.get(self.path, lambda: {"version": "0.32.0"})())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                self._send(state.complete(body))

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def settings(prompts: int = 3, max_tokens: int = 12, k: int = 3) -> Settings:
    chosen = tuple(f"prompt number {i}" + "!" * i for i in range(prompts))
    return Settings(Path("stand-in-target"), chosen, "test", k, max_tokens, modes_for(()))


def test_each_prompts_figures_are_its_counters_change(serve: Callable[[StandIn], str]) -> None:
    state = StandIn()
    run = measure_on_server(Server(serve(state), "stand-in"), settings(), drafting=True)
    prompts = run.modes["greedy"]
    assert state.completions == 3 and len(prompts) == 3
    for prompt, text in zip(prompts, settings().prompts, strict=True):
        expected = walk(12, 3, partial(operator.add, len(text)))
        assert (prompt.drafts, prompt.accepted, prompt.accepted_per_position) == (
            expected.drafts,
            expected.accepted,
            expected.accepted_per_position,
        )
        assert len(prompt.token_ids) == 12 and prompt.top2_gaps == (1.0,) * 12
    assert run.acceptance("greedy").length().value > 1


def test_the_target_alone_gives_tokens_without_counters(serve: Callable[[StandIn], str]) -> None:
    run = measure_on_server(Server(serve(StandIn(draft=False)), "reference"), settings(), drafting=False)
    assert [p.drafts for p in run.modes["greedy"]] == [0, 0, 0]
    assert all(len(p.token_ids) == 12 for p in run.modes["greedy"])


@pytest.mark.parametrize(
    ("state", "drafting", "said"),
    [
        (StandIn(traffic=True), True, "moved in 0.25 s with no request"),
        (StandIn(requests_per_completion=2), True, "more than one request can"),
        (StandIn(draft=False), True, "serves no draft"),
        (StandIn(), False, "serves a draft"),
        (StandIn(k=2, counters=SpecCounters(0, 0, 0, (0, 0))), True, "drafts 2 tokens a round, not the 3 asked"),
        (StandIn(requests_per_completion=0), True, "ran no draft on prompt 0"),
    ],
)
def test_a_server_that_cannot_be_measured_is_refused(
    serve: Callable[[StandIn], str], state: StandIn, drafting: bool, said: str
) -> None:
    with pytest.raises(ServerError, match=said):
        measure_on_server(Server(serve(state), "stand-in"), settings(), drafting=drafting)


def test_an_unreachable_server_is_refused() -> None:
    with pytest.raises(ServerError, match="unreachable"):
        measure_on_server(Server(f"http://127.0.0.1:{free_port()}", "gone"), settings(), drafting=True)


def test_accept_pairs_the_drafts_on_running_servers(serve: Callable[[StandIn], str]) -> None:
    from eaglequant.api.acceptance import accept

    reference, source, dst = serve(StandIn(draft=False)), serve(StandIn()), serve(StandIn())
    report = accept(
        [PAIR / "draft"], source=PAIR / "draft", server=[source, dst], reference_server=reference,
        max_prompts=3, max_tokens=10, record=False,
    )  # fmt: skip
    (quantized,) = report.quantized
    assert quantized.served_as == "server" and report.settings.target == Path("stand-in-target")
    assert report.source.lossless.ok and quantized.lossless.equal == 3
    assert quantized.difference["greedy"].value == pytest.approx(0.0)  # the stand-ins draft alike
    running = find(report.notes, "running-servers")
    assert running is not None and running.subject == reference
    bundled = find(report.notes, "bundled-prompts")  # no prompts given, and a target that is not the bundled pair's
    assert bundled is not None and bundled.subject == "stand-in-target" and "--prompts FILE" in str(bundled)


def test_the_command_line_refuses_in_one_line(serve: Callable[[StandIn], str]) -> None:
    reference, source, busy = serve(StandIn(draft=False)), serve(StandIn()), serve(StandIn(traffic=True))
    draft = PAIR / "draft"
    common: list[str | Path] = [draft, "--source", draft, "--max-prompts", "2", "--max-tokens", "8", "--no-record"]
    cases: dict[str, list[str | Path]] = {
        "would not be eaglequant's": ["--server", source, "--server", busy, "--reference-server", reference],
        "serve different models": [
            "--server",
            source,
            "--server",
            serve(StandIn(model="other")),
            "--reference-server",
            reference,
        ],
        "unreachable": [
            "--server",
            source,
            "--server",
            f"http://127.0.0.1:{free_port()}",
            "--reference-server",
            reference,
        ],
        "eaglequant sets dtype itself": ["--target", PAIR / "target", "--engine-arg", "dtype=float32"],
        "not KEY=VALUE": ["--target", PAIR / "target", "--engine-arg", "gpu_memory_utilization"],
    }
    for said, args in cases.items():
        done = run_cli("accept", *map(str, common), *map(str, args))
        assert done.exit_code == 2, (said, done.stderr)
        last = done.stderr.strip().splitlines()[-1]  # after the progress lines, the error in one line
        assert last.startswith("error: ") and said in last, done.stderr
        assert "Traceback" not in done.stderr and done.stderr.count("error") == 1, done.stderr


def test_a_launched_server_serves_the_target_with_the_draft_and_the_users_arguments() -> None:
    from eaglequant.measurement.launch import server_command

    chosen = Settings(PAIR / "target", ("a", "b"), "test", 2, 16, engine_args={"tensor_parallel_size": 8})
    command = server_command(Path("/engine/python"), chosen, PAIR / "draft", 8123)
    assert command[:3] == ["/engine/python", "-m", "vllm.entrypoints.openai.api_server"]
    flags = {flag: command[command.index(flag) + 1] for flag in command if flag.startswith("--")}
    assert (
        "--enforce-eager" in command
        and flags["--model"] == str((PAIR / "target").resolve())
        and flags["--host"] == "127.0.0.1"
    )
    assert flags["--port"] == "8123" and flags["--tensor-parallel-size"] == "8" and flags["--dtype"] == "bfloat16"
    speculative = json.loads(command[command.index("--speculative-config") + 1])
    assert speculative == {"method": "eagle3", "model": str((PAIR / "draft").resolve()), "num_speculative_tokens": 2}
    assert "--speculative-config" not in server_command(Path("/engine/python"), chosen, None, 8123)


def test_the_command_line_shows_the_drafts_measured_on_servers(serve: Callable[[StandIn], str]) -> None:
    reference, source, dst = serve(StandIn(draft=False)), serve(StandIn()), serve(StandIn())
    draft = str(PAIR / "draft")
    done = run_cli(
        "accept", draft, "--source", draft, "--server", source, "--server", dst, "--reference-server", reference,
        "--max-prompts", "3", "--max-tokens", "8", "--no-record",
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    assert "(server)" in done.stdout and "3/3" in done.stdout, done.stdout  # the table, however it wraps
    assert reference in " ".join(done.stderr.split() + done.stdout.split())


def test_a_change_straddling_its_budget_is_inconclusive_exit_7(serve: Callable[[StandIn], str], tmp_path: Path) -> None:
    """Issue 63, item 4 and 64, item 4 for accept: a DST's measured change of -0.065 [-0.240, +0.110] over 6 prompts
    straddles the 0.1 budget its search recorded: inconclusive (not a problem), exit 7, saying how many prompts more
    would settle it and the k it judged at."""
    import shutil

    from tests.measurement.test_one_gate import _searched_dst

    reference, source, dst_server = serve(StandIn(draft=False)), serve(StandIn()), serve(StandIn(skew=1))
    draft = PAIR / "draft"
    dst = _searched_dst(tmp_path, draft, 0.1)
    shutil.copy(draft / "config.json", dst / "config.json")
    done = run_cli(
        "accept", str(dst), "--source", str(draft), "--server", source, "--server", dst_server,
        "--reference-server", reference, "--max-prompts", "6", "--max-tokens", "10", "--no-record",
    )  # fmt: skip
    assert done.exit_code == 7, done.stderr
    said = " ".join(done.stdout.split())
    assert "inconclusive: " in said and "-0.065 [-0.240, +0.110]: inconclusive, the interval straddles the 0.1" in said
    assert "more prompts would settle it" in said and "judged at k = 3, the k the card serves" in said
    assert "problem:" not in said and "ok:" not in said
