"""vLLM's own configuration functions, release by release, against eaglequant's model of each release.

vLLM 0.33.0 has no CPU build, but its configuration and matching modules import over the 0.32.0 CPU build's
dependencies (``.venv-vllm``) with its Python sources first on the path (``.vllm-0.33``, which
``scripts/setup.sh --test`` unpacks from the 0.33.0 wheel). So each check below runs 0.32.0's own functions and
0.33.0's own functions (``eaglequant/engine_load/probes/vllm_config_probe.py``) and holds each release's answer
to what eaglequant says for that release: which written modules each config excludes, which ModelOpt key each
parses, how long a context each serves a yarn-scaled draft's target with, and whether ``vllm serve DRAFT``
accepts a speculators head whose verifier is local. The whole-loader tests (test_engine_load.py) run 0.32.0.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from eaglequant import convert, explain, inspect
from eaglequant.common.findings import codes
from eaglequant.engine_load import PROBE_PACKAGE, probe_workdir
from eaglequant.engines import ENGINES
from eaglequant.formats import get_format
from tests.conftest import FIXTURES, ROOT, TARGET_LAYERS, vendor_required
from tests.engine_load.test_engine_load import engine_python

RELEASES = {"0.32.0": "vllm", "0.33.0": "vllm==0.33.0"}  # release -> eaglequant's engine for it
TARGET_CONTEXT = 262144
# (fixture, scheme, format): one conversion per exclusion dialect vLLM reads, Llama and MLA drafts
WRITTEN = [
    ("specforge-llama", "fp8-per-channel", "quark"),
    ("specforge-llama", "fp8-per-channel", "compressed-tensors"),
    ("specforge-llama", "nvfp4", "modelopt"),
    ("torchspec-mla", "fp8-per-channel", "modelopt"),
    ("torchspec-mla", "fp8-block", "fp8"),
    ("eagle31-fc-norm", "int8", "quark"),
]


def _sources_033() -> Path:
    path = Path(os.environ.get("EAGLEQUANT_VLLM_033_SOURCES") or ROOT / ".vllm-0.33")
    if not (path / "vllm" / "__init__.py").is_file():
        message = f"vLLM 0.33.0's sources are not at {path} (scripts/setup.sh --test unpacks them)"
        if vendor_required():
            pytest.fail(message)
        pytest.skip(message)
    return path


def run_config_probe(release: str, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every job answered by ``release``'s own functions, in one process."""
    interpreter = engine_python("vllm")
    with probe_workdir() as tmp:
        (tmp / "jobs.json").write_text(json.dumps({"jobs": jobs}), encoding="utf-8")
        path = [str(tmp)] + ([str(_sources_033())] if release == "0.33.0" else [])
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": os.pathsep.join(path)}
        done = subprocess.run(
            [str(interpreter), "-m", f"{PROBE_PACKAGE}.vllm_config_probe", "jobs.json", "answer.json"],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        answer = json.loads((tmp / "answer.json").read_text(encoding="utf-8"))
    assert answer["version"] == release  # the release's own modules ran, not the other's
    return answer["results"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Path]:
    out = tmp_path_factory.mktemp("written")
    done = {}
    for fixture, scheme, fmt in WRITTEN:
        dst = out / f"{fixture}-{scheme}-{fmt}"
        engines = list(RELEASES.values())
        convert(FIXTURES / fixture, dst, scheme=scheme, format=fmt, engines=engines, target_layers=TARGET_LAYERS)
        done[(fixture, scheme, fmt)] = dst
    return done


def _exclusion_job(dst: Path, engine: str) -> tuple[dict[str, Any], dict[str, bool]]:
    """The probe's job for ``dst``'s config, and which runtime modules eaglequant says ``engine`` excludes."""
    from eaglequant.checkpoint.reader import Checkpoint
    from eaglequant.readback.explanation import read_written_config
    from eaglequant.readback.written_head import describe_written_head

    with Checkpoint.open(dst, "DST") as checkpoint:
        head = describe_written_head(checkpoint)
        fmt, config = read_written_config(checkpoint)
    names = [module.names[0] for module in ENGINES[engine].runtime_modules(head, TARGET_LAYERS)]
    expected = {name: ENGINES[engine].matching_rule(fmt, name, config.patterns) is not None for name in names}
    quantization_config = json.loads((dst / "config.json").read_text())["quantization_config"]
    return {"check": "excluded", "quantization_config": quantization_config, "names": names}, expected


@pytest.mark.engine
@pytest.mark.parametrize("release", list(RELEASES))
def test_each_release_excludes_exactly_the_modules_eaglequant_says(written, release: str) -> None:
    cases = [_exclusion_job(dst, RELEASES[release]) for dst in written.values()]
    answers = run_config_probe(release, [job for job, _ in cases])
    for (key, _), (_, expected), answer in zip(written.items(), cases, answers, strict=True):
        assert answer["ok"], (key, answer)
        assert answer["excluded"] == expected, key
        assert any(expected.values()) and not all(expected.values()), key  # both kinds of module were asked


@pytest.mark.engine
def test_modelopts_inline_key_is_read_by_033_only_and_ignore_by_both(written) -> None:
    listed = ["lm_head", "model.fc"]
    inline = {"quant_method": "modelopt", "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN", "exclude_modules": listed}
    ours = json.loads((written[("specforge-llama", "nvfp4", "modelopt")] / "config.json").read_text())
    jobs = [
        {"check": "modelopt_excludes", "quantization_config": inline},
        {"check": "modelopt_excludes", "quantization_config": ours["quantization_config"]},
    ]
    old, new = (run_config_probe(release, jobs) for release in RELEASES)
    assert old[0]["exclude_modules"] == [] and new[0]["exclude_modules"] == listed
    assert old[1]["exclude_modules"] == new[1]["exclude_modules"] == ours["quantization_config"]["ignore"]
    problems = get_format("modelopt").read_config(inline, {}).problems
    assert codes(problems) == ["exclude-modules-without-ignore"]


def _short_yarn_draft(tmp_path: Path) -> tuple[Path, Path]:
    """The MLA fixture (yarn rope) with a max_position_embeddings below its target's, and the target's config."""
    draft = tmp_path / "short-yarn"
    shutil.copytree(FIXTURES / "torchspec-mla", draft)
    config = json.loads((draft / "config.json").read_text())
    config["max_position_embeddings"] = 4096
    (draft / "config.json").write_text(json.dumps(config, indent=2))
    target = tmp_path / "target.json"
    target.write_text(json.dumps({"num_hidden_layers": TARGET_LAYERS, "max_position_embeddings": TARGET_CONTEXT}))
    return draft, target


@pytest.mark.engine
def test_a_short_yarn_draft_lowers_the_served_context_on_033_only(tmp_path: Path) -> None:
    draft, target = _short_yarn_draft(tmp_path)
    plain = tmp_path / "plain"
    convert(draft, plain, scheme="fp8-per-channel", engines=list(RELEASES.values()), target_config=target)
    matched = tmp_path / "matched"
    convert(
        draft,
        matched,
        scheme="fp8-per-channel",
        engines=list(RELEASES.values()),
        target_config=target,
        match_target_context=True,
    )
    jobs = [
        {"check": "draft_length", "directory": str(path), "target_length": TARGET_CONTEXT}
        for path in (plain, matched, FIXTURES / "specforge-llama")
    ]
    answers = {release: run_config_probe(release, jobs) for release in RELEASES}
    assert [a["served_length"] for a in answers["0.32.0"]] == [TARGET_CONTEXT] * 3
    assert [a["served_length"] for a in answers["0.33.0"]] == [4096, TARGET_CONTEXT, TARGET_CONTEXT]
    assert not answers["0.33.0"][0]["raised"] and answers["0.32.0"][0]["raised"]  # the override skips yarn on 0.33
    warned = {
        release: [
            any("max_model_len 4096" in note.message for note in reading.notes)
            for path in (plain, matched)
            for reading in explain(path, engines=[engine], target_config=target).engines
        ]
        for release, engine in RELEASES.items()
    }
    assert warned == {"0.32.0": [False, False], "0.33.0": [True, False]}


@pytest.mark.engine
def test_vllm_serve_refuses_a_local_verifier_on_033_only(tmp_path: Path) -> None:
    local = tmp_path / "local-verifier"
    shutil.copytree(FIXTURES / "speculators-llama", local)
    config = json.loads((local / "config.json").read_text())
    config["speculators_config"]["verifier"]["name_or_path"] = str(tmp_path)
    (local / "config.json").write_text(json.dumps(config))
    jobs = [{"check": "speculators_verifier", "directory": str(p)} for p in (FIXTURES / "speculators-llama", local)]
    old, new = (run_config_probe(release, jobs) for release in RELEASES)
    assert [a["accepted"] for a in old] == [True, True]
    assert [a["accepted"] for a in new] == [True, False]
    assert "must name a remote model repository" in new[1]["error"]
    said = {
        path.name: [bool(ENGINES[e].draft_notes(inspect(path).head, _no_target())) for e in RELEASES.values()]
        for path in (FIXTURES / "speculators-llama", local)
    }
    assert said == {"speculators-llama": [False, False], "local-verifier": [False, True]}


def _no_target() -> Any:
    from eaglequant.engines.target import UNKNOWN

    return UNKNOWN


@pytest.mark.engine
def test_each_release_gives_each_module_the_kind_eaglequant_wrote(tmp_path: Path) -> None:
    """lm_head in a scheme of its own (ModelOpt MIXED_PRECISION): both releases' own lookup gives every runtime
    module the algorithm eaglequant planned, and leaves the excluded ones unquantized."""
    dst = tmp_path / "mixed"
    result = convert(
        FIXTURES / "specforge-llama",
        dst,
        scheme="nvfp4",
        scheme_for=["lm_head=fp8-per-channel"],
        format="modelopt",
        engines=list(RELEASES.values()),
        target_layers=TARGET_LAYERS,
    )
    config = json.loads((dst / "config.json").read_text())["quantization_config"]
    fmt = get_format("modelopt")
    planned = {v.runtime_name: v for v in result.plan.verdicts if v.engine == "vllm"}
    expected = {
        name: fmt.algorithm(result.plan.scheme_of(verdict.members[0])) if verdict.quantized else None
        for name, verdict in planned.items()
    }
    assert expected["lm_head"] == "FP8_PER_CHANNEL_PER_TOKEN" and expected["model.fc"] is None
    for release in RELEASES:
        (answer,) = run_config_probe(
            release, [{"check": "layer_algos", "quantization_config": config, "names": list(planned)}]
        )
        assert answer["ok"], answer
        assert answer["config"] == "ModelOptMixedPrecisionConfig" and answer["algos"] == expected, release
