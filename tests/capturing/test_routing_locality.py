"""Issue 62, item 1: the routing locality rho measured from the target's own router where ``capture`` runs it.

The estimator against the model's routing process itself (exact by enumeration, and simulated in float64 with
seeded draws: rho recovered within its interval, the interval covering at about its 95%); then tiny MoE targets
built with transformers' own classes: a random router's rho equals the one recomputed in float64 from the router's
inputs and weights on the captured tokens, a router whose bias dominates gives 1; the capture file keeps counts, not
ids; ``explain --routing-locality CAPTURE`` prints it as measured and refuses a capture of another routing.
"""

from __future__ import annotations

import itertools
import json
import shutil
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from eaglequant.capturing.routing import measured_locality, router_tap, routing_locality
from eaglequant.common.errors import InputError
from eaglequant.draft.capture_routing import METADATA_KEY, RoutingCounts, has_routing, read_counts
from tests.conftest import FIXTURES, run_cli

PAIR = FIXTURES / "trained-pair"
SMALL = {"max_prompts": 6, "max_tokens": 20}  # 20 + 3 - 1 generated tokens a prompt: 21 pairs
PAIRS_A_PROMPT = 20 + 3 - 1 - 1


def test_the_process_implies_its_pairwise_overlap_and_distinct_experts_bounds_it() -> None:
    """Exactly, by enumerating every top-k set of E = 6: a kept set shares all k, a fresh one k * k / E on average,
    so E|S_t ∩ S_t+1| / k = rho + (1 - rho) k / E. distinct_experts prices two tokens as 2 - rho independent ones:
    exact at rho = 0 and 1, at or above the process's 2k - E|∩| between (its expected fresh draws taken whole)."""
    from eaglequant.speedup.target_step import TargetWeights

    experts, k = 6, 2
    sets = [frozenset(s) for s in itertools.combinations(range(experts), k)]
    weights = TargetWeights("t", "config.json", 1, 0, 0, 1, experts, k, 1.0, 0.0, False)
    for rho in (Fraction(0), Fraction(3, 10), Fraction(1, 2), Fraction(1)):
        overlap = sum(
            (rho * (after == before) + (1 - rho) / len(sets)) * len(before & after) / len(sets)
            for before in sets
            for after in sets
        )
        assert overlap / k == rho + (1 - rho) * Fraction(k, experts)
        exact = 2 * k - overlap
        model = weights.distinct_experts(2, 1, float(rho))
        assert model == pytest.approx(float(exact), abs=1e-12) if rho in (0, 1) else model >= float(exact)


def _simulated(rho: float, experts: int, k: int, prompts: int, tokens: int, layers: int, seed: int) -> RoutingCounts:
    """The model's routing process drawn in float64 (numpy, seeded): a uniform top-k set, then each token keeps its
    predecessor's with chance rho, else draws afresh; reduced by :meth:`RoutingCounts.add` as capture reduces."""
    generator = np.random.default_rng(seed)
    counts = RoutingCounts(experts, k, tuple(range(layers)))
    for _ in range(prompts):
        ids = {}
        for layer in range(layers):
            chosen = [generator.permutation(experts)[:k]]
            for _ in range(tokens - 1):
                kept = generator.random() < rho
                chosen.append(chosen[-1] if kept else generator.permutation(experts)[:k])
            ids[layer] = torch.tensor(np.stack(chosen))
        shared = sum(len(set(a) & set(b)) for i in ids.values() for a, b in itertools.pairwise(i[2:].tolist()))
        counts.add(ids, 2)  # paired from position 2, as capture pairs from the first generated token
        assert counts.prompt_shared[-1] == shared and counts.prompt_pairs[-1] == tokens - 3
    return counts


@pytest.mark.parametrize(("experts", "k"), [(8, 2), (64, 6)])
@pytest.mark.parametrize("rho", [0.0, 0.35, 0.8])
def test_the_estimator_recovers_the_simulated_rho_within_its_interval(experts: int, k: int, rho: float) -> None:
    measured = routing_locality(_simulated(rho, experts, k, prompts=12, tokens=40, layers=3, seed=int(rho * 100) + k))
    # within twice its 95% half-width (about 4 standard errors) in every case; at its 95% over many draws below
    assert abs(measured.estimate - rho) <= measured.high - measured.low < 0.3
    assert (measured.token_pairs, measured.prompts, len(measured.layers)) == (12 * 37, 12, 3)


def test_the_interval_covers_the_simulated_rho_at_about_its_95_percent() -> None:
    measured = [routing_locality(_simulated(0.4, 8, 2, prompts=6, tokens=20, layers=2, seed=s)) for s in range(150)]
    covered = [m.low <= 0.4 <= m.high for m in measured]
    assert 0.88 <= sum(covered) / len(covered) <= 0.995


def test_one_prompt_has_no_interval_and_no_pair_is_refused() -> None:
    one = routing_locality(_simulated(0.5, 8, 2, prompts=1, tokens=30, layers=2, seed=1))
    assert (one.low, one.high, one.prompts) == (0.0, 1.0, 1)
    with pytest.raises(InputError, match="no two consecutive generated tokens"):
        routing_locality(RoutingCounts(8, 2, (0,), [0], [0], [0]))


def _moe_target(root: Path, family: str, sticky: bool = False) -> Path:
    """A tiny random MoE target of ``family`` (transformers' own class, 4 layers, hidden 256 as the pair's draft
    reads, 8 experts, top 2) with the pair's tokenizer; ``sticky``: every router's bias on experts 0 and 1 so large
    that each token routes there."""
    import transformers

    shape = {"vocab_size": 4096, "hidden_size": 256, "intermediate_size": 128, "num_hidden_layers": 4,
             "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32, "num_experts_per_tok": 2}  # fmt: skip
    torch.manual_seed(0)
    if family == "qwen3_moe":
        model: Any = transformers.Qwen3MoeForCausalLM(
            transformers.Qwen3MoeConfig(**shape, moe_intermediate_size=32, num_experts=8)
        )
    else:
        model = transformers.GptOssForCausalLM(transformers.GptOssConfig(**shape, num_local_experts=8))
    if sticky:
        for layer in model.model.layers:
            layer.mlp.router.bias.data[:2] = 100.0
    directory = root / family
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(PAIR / "target" / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from eaglequant.capturing.transformers_capture import capture

    root = tmp_path_factory.mktemp("routing")
    random_target = _moe_target(root, "qwen3_moe")
    sticky_target = _moe_target(root, "gpt_oss", sticky=True)
    return {
        "random_target": random_target,
        "random": capture(random_target, PAIR / "draft", root / "random.safetensors", **SMALL),  # type: ignore[arg-type]
        "sticky": capture(sticky_target, PAIR / "draft", root / "sticky.safetensors", max_prompts=3, max_tokens=8),
        "dense": capture(PAIR / "target", PAIR / "draft", root / "dense.safetensors", max_prompts=1, max_tokens=4),
    }


def _float64_locality(target: Path, capture_file: Path) -> float:
    """Rho recomputed from the captured tokens: each router's input hooked, its top 2 of softmax(x W^T) in float64,
    the experts consecutive generated tokens share counted as sets."""
    import transformers

    from eaglequant.measurement.prompts import read_prompts

    model = transformers.AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32)
    inputs: dict[int, torch.Tensor] = {}
    for number, layer in enumerate(model.model.layers):
        layer.mlp.gate.register_forward_pre_hook(lambda _m, args, n=number: inputs.__setitem__(n, args[0]))
    written = load_file(str(capture_file))
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(target))
    shared = pairs = 0
    for index, prompt in enumerate(read_prompts(None, SMALL["max_prompts"])[0]):
        length, start = int(written["lengths"][index]), int(written["continuation_start"][index])
        first = tokenizer(prompt, return_tensors="pt").input_ids[0, :1]
        with torch.no_grad():
            model(torch.cat((first, written["input_ids"][index, :length]))[None])
        for number, layer in enumerate(model.model.layers):
            logits = inputs[number].to(torch.float64) @ layer.mlp.gate.weight.to(torch.float64).T
            chosen = [set(row) for row in torch.softmax(logits, -1).topk(2, -1).indices[start + 1 :].tolist()]
            shared += sum(len(a & b) for a, b in itertools.pairwise(chosen))
            pairs += len(chosen) - 1
    return (shared / (2 * pairs) - 2 / 8) / (1 - 2 / 8)


def test_a_random_router_measures_the_rho_its_own_choices_give(captured: dict[str, Any]) -> None:
    measured = captured["random"].routing_locality
    truth = _float64_locality(captured["random_target"], captured["random"].path)
    assert measured.estimate == pytest.approx(truth, abs=1e-9)
    assert measured.low <= truth <= measured.high
    # not near 0: a random model's greedy text loops (A B A B, A A A) and its residual stream is mostly the token's
    # embedding, so a repeated token routes as it did; the estimator's rho = 0 is held by the simulation above
    assert (measured.token_pairs, measured.prompts, measured.experts, measured.experts_per_token) == (
        SMALL["max_prompts"] * PAIRS_A_PROMPT, SMALL["max_prompts"], 8, 2,
    )  # fmt: skip


def test_a_router_whose_bias_dominates_measures_one(captured: dict[str, Any]) -> None:
    measured = captured["sticky"].routing_locality
    assert (measured.estimate, measured.low, measured.high) == (1.0, 1.0, 1.0)
    assert measured.layers == (1.0, 1.0, 1.0, 1.0)
    said = "routing locality 1.00 [1.00, 1.00], measured by capture (sticky.safetensors) on 27 token pairs"
    assert measured.text().startswith(said)


def test_the_capture_file_keeps_counts_not_ids_and_a_dense_target_none(captured: dict[str, Any]) -> None:
    path = captured["random"].path
    with safe_open(str(path), "pt") as handle:
        entry = json.loads(handle.metadata()[METADATA_KEY])
        assert "routing" not in " ".join(handle.keys())
    assert len(entry["prompt_shared"]) == SMALL["max_prompts"] and len(entry["layer_shared"]) == 4
    assert measured_locality(path) == captured["random"].routing_locality
    dense = captured["dense"]
    assert (dense.routing_locality, dense.routing_note, has_routing(dense.path)) == (None, None, False)
    with pytest.raises(InputError, match="records no routing"):
        read_counts(dense.path)


def test_capture_prints_the_measured_routing_locality(captured: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "captured.safetensors"
    result = run_cli("capture", out, "--target", captured["random_target"], "--draft", PAIR / "draft",
                     "--max-prompts", "2", "--max-tokens", "4")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert (
        "measured by capture (captured.safetensors) on 10 token pairs (2 prompts, 4 MoE layers of 8 experts, top 2)"
        in (" ".join(result.stdout.split()))
    )


def test_a_moe_family_whose_router_is_not_read_is_said_in_one_line() -> None:
    model = SimpleNamespace(config=SimpleNamespace(model_type="olmoe", num_experts=64), named_modules=lambda: [])
    tap, note = router_tap(model)
    assert tap is None and note is not None and "\n" not in note
    assert note.startswith("routing locality not measured: capture reads the routers of qwen2_moe, qwen3_moe")


def test_explain_prices_with_the_measured_rho_and_refuses_another_routing(captured: dict[str, Any]) -> None:
    from eaglequant.speedup.locality import captured_locality, check_measured_on
    from eaglequant.speedup.target_step import from_config
    from tests.speedup.test_target_families import QWEN3_235B

    path, target = captured["random"].path, captured["random_target"]
    measured = captured["random"].routing_locality
    result = run_cli("explain", PAIR / "draft", "--target-config", target, "--routing-locality", path,
                     "--acceptance", "2.5@3", "--json")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    timing = json.loads(result.stdout)["speedup"][0]["timing"]
    assert timing["routing_locality"] == pytest.approx(measured.estimate)
    assert timing["routing_measured"]["token_pairs"] == measured.token_pairs
    shown = run_cli("explain", PAIR / "draft", "--target-config", target, "--routing-locality", path,
                    "--acceptance", "2.5@3")  # fmt: skip
    said = f"routing locality {measured.estimate:.2f} [{measured.low:.2f}, {measured.high:.2f}], measured by capture"
    assert said in " ".join(shown.stderr.split())
    dense = run_cli("explain", PAIR / "draft", "--target-config", target, "--routing-locality",
                    captured["dense"].path, "--acceptance", "2.5@3")  # fmt: skip
    assert dense.exit_code == 2 and "records no routing" in dense.stderr
    qwen = from_config("qwen3-235b", QWEN3_235B)
    with pytest.raises(InputError, match="routing to 2 of 8 experts; qwen3-235b routes to 8 of 128"):
        check_measured_on(measured, qwen)
    assert captured_locality(path, qwen) is None  # search's --inputs of another routing: the stated rho stands


def test_the_speedup_search_prices_with_the_rho_its_inputs_measured(captured: dict[str, Any]) -> None:
    """search --objective speedup reads the routing locality from its --inputs capture, where that capture measured
    it on the target priced; without one, the stated rho stands."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.layouts.detect import describe_head
    from eaglequant.search.objectives import speed_model
    from eaglequant.search.schedule import parse_loads
    from eaglequant.speedup.model import ROUTING_LOCALITY

    with Checkpoint.open(PAIR / "draft") as checkpoint:
        head = describe_head(checkpoint)
    target, measured = captured["random_target"], captured["random"].routing_locality
    model = speed_model(head, ("vllm",), target, (1, None), parse_loads(None), captured["random"].path)
    assert model is not None and model.timing.routing_measured == measured
    assert model.timing.routing_locality == measured.estimate
    assert any(line.startswith(measured.text()) for line in model.table("x", model.source_cost, {3: 2.5}).assumptions)
    stated = speed_model(head, ("vllm",), target, (1, None), parse_loads(None), captured["dense"].path)
    assert stated is not None and (stated.timing.routing_locality, stated.timing.routing_measured) == (
        ROUTING_LOCALITY, None,
    )  # fmt: skip


_TINY = {"vocab_size": 512, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 32, "num_experts_per_tok": 2}  # fmt: skip
_GROUPED = {
    "moe_intermediate_size": 32,
    "n_routed_experts": 8,
    "n_group": 2,
    "topk_group": 1,
    "first_k_dense_replace": 0,
}
_MLA = {"q_lora_rank": 16, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16}
FAMILIES = {
    "qwen2_moe": ("Qwen2MoeConfig", {"moe_intermediate_size": 32, "num_experts": 8,
                                     "shared_expert_intermediate_size": 32}),
    "qwen3_moe": ("Qwen3MoeConfig", {"moe_intermediate_size": 32, "num_experts": 8}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 8}),
    "deepseek_v3": ("DeepseekV3Config", {**_GROUPED, **_MLA, "head_dim": 16}),
    "glm4_moe": ("Glm4MoeConfig", {**_GROUPED, "n_group": 1}),
    "gpt_oss": ("GptOssConfig", {"num_local_experts": 8}),
    "llama4_text": ("Llama4TextConfig", {"intermediate_size_mlp": 128, "num_local_experts": 8,
                                         "interleave_moe_layer_step": 1}),
}  # fmt: skip


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_tap_reads_the_experts_its_block_routes_to(family: str) -> None:
    """The ids the tap reads are those each MoE block hands its experts (Llama 4: where its router's scores are not
    zero, the experts it weights), for every family the tap knows, built tiny with transformers' own classes."""
    import transformers

    from eaglequant.capturing.routing import ROUTERS

    assert set(FAMILIES) == set(ROUTERS)
    name, extra = FAMILIES[family]
    torch.manual_seed(0)
    config = getattr(transformers, name)(**{**_TINY, **extra})
    if family == "llama4_text":
        config.num_experts_per_tok = 1  # Llama 4 routes each token to one expert
    model = transformers.AutoModelForCausalLM.from_config(config)
    tap, note = router_tap(model)
    assert tap is not None and note is None and tap.counts.layer_ids == (0, 1)
    routed: dict[int, torch.Tensor] = {}
    for number, router in tap.routers.items():
        if family == "llama4_text":
            router.register_forward_hook(lambda _m, _a, out, n=number: routed.__setitem__(n, out[0] > 0))
        else:
            block = model.model.layers[number].mlp
            block.experts.register_forward_pre_hook(lambda _m, args, n=number: routed.__setitem__(n, args[1]))
    with torch.no_grad(), tap.listening():
        model(torch.randint(0, 512, (1, 9), generator=torch.Generator().manual_seed(1)))
    for number, ids in tap._ids.items():
        chosen = torch.zeros(9, 8, dtype=torch.bool).scatter_(1, ids, True)
        expected = (
            routed[number] if family == "llama4_text" else torch.zeros_like(chosen).scatter_(1, routed[number], True)
        )
        assert torch.equal(chosen, expected), number
    tap.counted(1)
    assert tap.counts.prompt_pairs == [7] and (tap.counts.experts, tap.counts.experts_per_token) == (
        8,
        config.num_experts_per_tok,
    )


def test_the_speedup_interval_carries_the_measured_rho_interval() -> None:
    """A verification priced at rho's low end (more distinct experts) bounds the speed-up below, at its high end
    above: each bound is the stated model's at that rho; the point is the estimate's."""
    from dataclasses import replace

    from eaglequant.draft.capture_routing import RoutingLocality
    from eaglequant.readback.cost import PartCost, RoundCost
    from eaglequant.speedup.model import Timing, predict_speedup
    from eaglequant.speedup.target_step import TargetWeights

    target = TargetWeights("t", "test", 4, 1_000_000, 1000, 2, 8, 2, 50_000.0, 10.0, False)
    parts = (PartCost("fc", 1, 300, 600, True), PartCost("decoder", 3, 1000, 2000, True))
    draft = RoundCost("vllm", "0.32.0", 3, parts, 0, 0)
    stated = Timing(1e9, 2e-4, 5e-5, 3e-5, 100, routing_locality=0.5)
    measured = replace(stated, routing_measured=RoutingLocality(0.5, 0.1, 0.9, 100, 4, 8, 2, (0.5,)))

    def at(timing: Timing) -> Any:
        return predict_speedup("d", target, draft, {3: 2.5}, timing).at(3)

    point, low_end, high_end = (
        at(measured),
        at(replace(stated, routing_locality=0.1)),
        at(replace(stated, routing_locality=0.9)),
    )
    assert point.speedup == at(stated).speedup
    assert (point.low, point.high) == (low_end.low, high_end.high)
    assert point.low < at(stated).low and point.high > at(stated).high
    said = "routing locality 0.50 [0.10, 0.90], measured by capture on 100 token pairs"
    lines = predict_speedup("d", target, draft, {3: 2.5}, measured).assumptions
    assert any(line.startswith(said) and "the speed-up's interval priced at both its ends" in line for line in lines)
