"""``eaglequant batch``: runs every job, goes on past a failed one, skips what is already done."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglequant.batch import load_jobs, run_batch
from eaglequant.errors import InputError
from tests.conftest import FIXTURES, ROOT, run_cli, run_cli_subprocess
from tests.hub_server import FakeHub

JOBS = """
[defaults]
engines = ["vllm"]

[[job]]
name = "llama-fp8"
source = "src-llama"
destination = "out/llama-fp8"

[[job]]
name = "broken"
source = "no-such-checkpoint"
destination = "out/broken"

[[job]]
name = "mla-nvfp4"
source = "{mla}"
destination = "out/mla-nvfp4"
scheme = "nvfp4"
format = "modelopt"
engines = ["vllm", "trtllm-main"]
target_layers = 61
"""


@pytest.fixture
def jobs(tmp_path: Path) -> Path:
    shutil.copytree(FIXTURES / "specforge-llama", tmp_path / "src-llama")
    path = tmp_path / "jobs.toml"
    path.write_text(JOBS.format(mla=FIXTURES / "torchspec-mla"))
    return path


def _mtimes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}


def test_a_broken_job_fails_alone_and_reruns_skip_finished_jobs(jobs: Path, tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    result = run_cli("batch", jobs, "--summary", summary, "--json")
    assert result.exit_code == 4
    data = json.loads(result.stdout)
    assert json.loads(summary.read_text()) == data
    status = {job["name"]: job for job in data["jobs"]}
    assert [job["name"] for job in data["jobs"]] == ["llama-fp8", "broken", "mla-nvfp4"]  # it carried on
    assert status["broken"]["status"] == "failed" and status["broken"]["exit_code"] == 2
    assert "no-such-checkpoint" in status["broken"]["reason"]
    for name in ("llama-fp8", "mla-nvfp4"):
        assert status[name]["status"] == "converted" and status[name]["verified"] is True  # verify defaults on
    assert data["counts"] == {"converted": 2, "skipped": 0, "failed": 1, "uploaded": 0}
    assert not data["ok"] and not (tmp_path / "out" / "broken").exists()
    assert "broken: failed" in result.stderr

    before = _mtimes(tmp_path / "out" / "llama-fp8")
    again = run_cli("batch", jobs, "--summary", summary, "--json")
    assert again.exit_code == 4
    rerun = {job["name"]: job for job in json.loads(again.stdout)["jobs"]}
    assert rerun["llama-fp8"]["status"] == rerun["mla-nvfp4"]["status"] == "skipped"
    assert rerun["llama-fp8"]["manifest_key"] == status["llama-fp8"]["manifest_key"]
    assert rerun["broken"]["status"] == "failed"
    assert _mtimes(tmp_path / "out" / "llama-fp8") == before  # untouched


def test_changed_source_or_options_or_damage_reconvert(jobs: Path, tmp_path: Path) -> None:
    def llama_status() -> str:
        outcome = run_batch(jobs, only=["llama-fp8"]).outcomes[0]
        return f"{outcome.status}: {outcome.reason}"

    assert llama_status() == "converted: absent"
    assert llama_status().startswith("skipped")
    # a source file changes (not even a weight): its hash is in the manifest
    (tmp_path / "src-llama" / "generation_config.json").write_text('{"max_length": 7}\n')
    assert llama_status() == "converted: made from another source or with other options"
    # an option changes
    jobs.write_text(
        jobs.read_text().replace('destination = "out/llama-fp8"', 'destination = "out/llama-fp8"\nscheme = "mxfp4"')
    )
    assert llama_status() == "converted: made from another source or with other options"
    # the output is damaged after the fact
    card = tmp_path / "out" / "llama-fp8" / "README.md"
    card.write_text(card.read_text() + "edited\n")
    assert (
        llama_status()
        == "converted: README.md: SHA-256 differs from eaglequant_report.json (the file changed after it was written)"
    )
    assert llama_status().startswith("skipped")


def test_a_foreign_destination_is_not_overwritten(jobs: Path, tmp_path: Path) -> None:
    (tmp_path / "out" / "llama-fp8").mkdir(parents=True)
    (tmp_path / "out" / "llama-fp8" / "precious.txt").write_text("mine")
    outcome = run_batch(jobs, only=["llama-fp8"]).outcomes[0]
    assert outcome.status == "failed" and "already exists" in outcome.reason
    assert (tmp_path / "out" / "llama-fp8" / "precious.txt").read_text() == "mine"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[job]]\nsource = "a"\ndestination = "b"\nshceme = "nvfp4"\n', "unknown key 'shceme'"),
        ('[[job]]\nsource = "a"\n', "destination is missing"),
        ('[[job]]\nsource = "a"\ndestination = "b"\nengines = "vllm"\n', "engines must be a list"),
        ('[[job]]\nsource = "a"\ndestination = "b"\ntarget_layers = true\n', "target_layers must be an integer"),
        ('[[job]]\nsource = "a"\ndestination = "b"\n[[job]]\nsource = "c"\ndestination = "b"\n', "share the"),
        ('[[job]]\nsource = "a"\ndestination = "b"\n[job.upload]\nrepo_id = "x y"\n', "not a Hub repo id"),
        ("[defaults]\n", "no [[job]] entries"),
        ("[[job]\n", "not a readable TOML job file"),
    ],
)
def test_job_file_mistakes_are_refused_before_anything_runs(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message.replace("[", r"\[")):
        load_jobs(path)
    result = run_cli("batch", path, "--summary", tmp_path / "s.json")
    assert result.exit_code == 2 and message in result.stderr and not (tmp_path / "s.json").exists()


def test_the_bundled_example_job_file_is_valid() -> None:
    jobs = load_jobs(ROOT / "fixtures" / "batch-example.toml")
    assert [job.name for job in jobs] == ["llama-fp8", "kimi-mla-nvfp4-trtllm-main", "speculators-mxfp4"]
    for job in jobs:
        assert Path(job.source).is_dir() and job.convert["verify_output"] is True
        assert job.destination.resolve().is_relative_to(ROOT / "out")


def test_batch_uploads_once(tmp_path: Path) -> None:
    hub = FakeHub().start()
    try:
        jobs = tmp_path / "jobs.toml"
        jobs.write_text(
            f'[[job]]\nsource = "{FIXTURES / "specforge-llama"}"\ndestination = "out/llama"\n'
            '[job.upload]\nrepo_id = "org/llama-fp8"\nprivate = true\n'
        )
        env = {
            "HF_ENDPOINT": hub.endpoint,
            "HF_TOKEN": "hf_batchtoken",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HOME": str(tmp_path / "hf"),
        }
        first = run_cli_subprocess("batch", jobs, "--summary", tmp_path / "s.json", "--json", env=env)
        assert first.returncode == 0, first.stderr
        upload = json.loads(first.stdout)["jobs"][0]["upload"]
        assert upload["status"] == "uploaded" and upload["commit_url"].startswith(hub.endpoint)
        received = hub.files("org/llama-fp8")
        assert '"model": "org/llama-fp8"' in received["README.md"].decode()  # --repo-id passed to convert
        assert ".eaglequant/uploads.json" not in received

        second = run_cli_subprocess("batch", jobs, "--summary", tmp_path / "s.json", "--json", env=env)
        job = json.loads(second.stdout)["jobs"][0]
        assert second.returncode == 0 and job["status"] == "skipped" and job["upload"]["status"] == "skipped"
        assert len(hub.repos["org/llama-fp8"].branches["main"]) == 1  # no second commit
        assert "hf_batchtoken" not in first.stdout + first.stderr + second.stdout + second.stderr
    finally:
        hub.stop()
