"""``eaglequant batch``: runs every job, goes on past a failed one, skips what is already done."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from eaglequant.batch.jobs import load_jobs, run_batch
from eaglequant.common.errors import InputError
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


@pytest.mark.slow
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
        ('[[job]]\nsource = "a"\ndestination = "b"\n[[job]]\nsource = "c"\ndestination = "b"\n', "both write to"),
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


VALID_JOB = '[[job]]\nname = "fine"\nsource = "{src}"\ndestination = "out/fine"\n'


@pytest.mark.parametrize(
    ("job", "message"),
    [
        ('scheme = "nvfp"', "scheme = 'nvfp': unknown scheme 'nvfp'; choose one of:"),
        ('scheme = "mine.toml"', "scheme = "),  # a scheme file, looked for beside the job file
        ('format = "modelop"', "format = 'modelop': unknown format 'modelop'"),
        ('engines = ["vllm", "tensorrt"]', "engines = 'tensorrt': unknown engine 'tensorrt'"),
        ('scheme = "fp8-per-channel"\nformat = "quark"\nengines = ["trtllm"]', 'use format = "modelopt"'),
        ('scheme = "mxfp4"\nformat = "modelopt"', "format 'modelopt' cannot store scheme 'mxfp4'"),
        ('max_shard_size = "5 gigs"', "max_shard_size = '5 gigs'"),
        ("target_layers = -1", "target_layers must be >= 1"),
        ("target_layers = 0", "target_layers must be >= 1"),
        ('calib = "nope.safetensors"', "calib = "),
        ('name = "my job"', "name 'my job' is not a usable job name"),
    ],
)
def test_every_job_is_checked_before_the_first_one_runs(tmp_path: Path, job: str, message: str) -> None:
    """A mistake in the last job is exit 2 before the first (valid) job converts anything."""
    path = tmp_path / "jobs.toml"
    bad = f'[[job]]\nsource = "{FIXTURES / "specforge-llama"}"\ndestination = "out/bad"\n{job}\n'
    path.write_text(VALID_JOB.format(src=FIXTURES / "specforge-llama") + bad)
    for args in ((), ("--list",), ("--list", "--json")):
        result = run_cli("batch", path, "--summary", tmp_path / "s.json", *args)
        assert result.exit_code == 2, result.stderr
        assert message in result.stderr and not re.search(r"--[a-z]", result.stderr)
        # under --json the error is also one JSON object on stdout; otherwise stdout stays empty
        assert json.loads(result.stdout)["exit_code"] == 2 if "--json" in args else result.stdout == ""
        assert not (tmp_path / "out").exists() and not (tmp_path / "s.json").exists()


def test_clashing_jobs_are_named_with_what_they_share(tmp_path: Path) -> None:
    path = tmp_path / "jobs.toml"
    job = '[[job]]\nsource = "a"\ndestination = "{dst}"\n{extra}\n'
    path.write_text(
        job.format(dst="out/x", extra="")
        + job.format(dst="out/y", extra="")
        + job.format(dst="out/x", extra='name = "z"')
    )
    with pytest.raises(InputError) as raised:
        load_jobs(path)
    assert raised.value.message == f"{path}: job 1 ('x') and job 3 ('z') both write to {tmp_path / 'out/x'}"
    path.write_text(job.format(dst="out/x", extra="") + job.format(dst="elsewhere/x", extra=""))
    with pytest.raises(InputError, match=r"job 1 and job 2 are both named 'x'; set a different name = "):
        load_jobs(path)


def test_a_revision_in_repo_id_is_told_in_the_job_file_s_words(tmp_path: Path) -> None:
    path = tmp_path / "jobs.toml"
    path.write_text('[[job]]\nsource = "a"\ndestination = "b"\n[job.upload]\nrepo_id = "org/name@fp8"\n')
    result = run_cli("batch", path)
    assert result.exit_code == 2
    assert 'write repo_id = "org/name" and revision = "fp8" in [job.upload]' in result.stderr
    assert "--revision" not in result.stderr


def _numbered_jobs(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "jobs.toml"
    job = '[[job]]\nsource = "{src}"\ndestination = "out/head-{n}"\n'
    path.write_text("".join(job.format(src=FIXTURES / "specforge-llama", n=n) for n in range(count)))
    return path


def test_list_prints_the_job_names_for_a_ci_matrix(tmp_path: Path) -> None:
    path = _numbered_jobs(tmp_path, 3)
    listed = run_cli("batch", path, "--list", "--json")
    assert listed.exit_code == 0 and listed.stdout.count("\n") == 1  # one line: fits $GITHUB_OUTPUT
    assert json.loads(listed.stdout) == ["head-0", "head-1", "head-2"]
    human = run_cli("batch", path, "--list", "--summary", tmp_path / "s.json")
    assert human.stdout.splitlines() == ["head-0", "head-1", "head-2"]
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.json").exists()  # nothing ran


@pytest.mark.parametrize("count", [1, 5, 7])
@pytest.mark.parametrize("shards", [1, 2, 3, 8])
def test_shards_cover_every_job_once_evenly_and_stably(tmp_path: Path, count: int, shards: int) -> None:
    path = _numbered_jobs(tmp_path, count)
    slices = [
        json.loads(run_cli("batch", path, "--list", "--json", "--shard", f"{k}/{shards}").stdout)
        for k in range(1, shards + 1)
    ]
    every = [name for names in slices for name in names]
    assert sorted(every) == [f"head-{n}" for n in range(count)] and len(set(every)) == count
    assert max(map(len, slices)) - min(map(len, slices)) <= 1  # even
    assert slices[0] == [f"head-{n}" for n in range(0, count, shards)]  # by position: the same on every rerun
    # a job added at the end leaves every other job where it was
    path.write_text(path.read_text() + f'[[job]]\nsource = "{FIXTURES / "specforge-llama"}"\ndestination = "out/new"\n')
    again = [
        json.loads(run_cli("batch", path, "--list", "--json", "--shard", f"{k}/{shards}").stdout)
        for k in range(1, shards + 1)
    ]
    assert [[name for name in names if name != "new"] for names in again] == slices


@pytest.mark.parametrize("shard", ["0/3", "4/3", "1/0", "2", "a/b", "-1/3"])
def test_a_bad_shard_is_refused(tmp_path: Path, shard: str) -> None:
    result = run_cli("batch", _numbered_jobs(tmp_path, 2), "--shard", shard)
    assert result.exit_code == 2 and f"--shard {shard}: not a slice K/N" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_only_and_shard_do_not_mix(tmp_path: Path) -> None:
    result = run_cli("batch", _numbered_jobs(tmp_path, 2), "--shard", "1/2", "--only", "head-0")
    assert result.exit_code == 2 and "--only and --shard both select jobs" in result.stderr


def test_the_bundled_example_job_file_is_valid() -> None:
    jobs = load_jobs(ROOT / "fixtures" / "batch-example.toml")
    assert [job.name for job in jobs] == ["llama-fp8", "kimi-mla-nvfp4-trtllm-main", "speculators-mxfp4"]
    for job in jobs:
        assert Path(job.source).is_dir() and job.options.verify_output is True
        assert job.destination.resolve().is_relative_to(ROOT / "out")


@pytest.mark.slow
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


def test_a_job_gives_lm_head_a_scheme_of_its_own_and_the_manifest_keeps_it(tmp_path: Path) -> None:
    """``scheme_for`` is a job key like convert's flag; the manifest records the module's scheme, so changing it
    reconverts."""
    job = tmp_path / "jobs.toml"
    settings = f'source = "{FIXTURES / "specforge-llama"}"\ndestination = "out/mixed"\nformat = "modelopt"\n'
    settings += "target_layers = 61\n"
    job.write_text(f'[[job]]\nname = "mixed"\n{settings}scheme_for = ["lm_head=nvfp4"]\n')
    first = run_batch(job).outcomes[0]
    assert first.status == "converted", first.reason
    config = json.loads((tmp_path / "out" / "mixed" / "config.json").read_text())["quantization_config"]
    assert config["quantized_layers"]["lm_head"]["quant_algo"] == "W4A16_NVFP4"
    assert run_batch(job).outcomes[0].status == "skipped"  # same options: nothing to do
    job.write_text(f'[[job]]\nname = "mixed"\n{settings}scheme_for = ["lm_head=fp8-per-channel"]\n')
    again = run_batch(job).outcomes[0]
    assert again.status == "converted", again.reason


def test_a_disk_failure_fails_its_job_alone_and_a_bug_stops_the_batch(
    jobs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 54, item 5: a job's OSError (a full disk, a refused connection) is its own failure, named in one line,
    and the batch goes on; anything else is a bug, which the command's guard reports instead of a job summary."""
    from eaglequant.jobs import conversion

    convert = conversion.write_conversion

    def full_disk(source: object, destination: Path, *args: object, **kwargs: object) -> object:
        if "llama" in str(destination):
            raise OSError(28, "No space left on device", str(destination))
        return convert(source, destination, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(conversion, "write_conversion", full_disk)
    data = json.loads(run_cli("batch", jobs, "--json").stdout)
    status = {job["name"]: job for job in data["jobs"]}
    assert status["llama-fp8"]["status"] == "failed" and status["mla-nvfp4"]["status"] == "converted"
    assert "OSError" in status["llama-fp8"]["reason"] and "No space left on device" in status["llama-fp8"]["reason"]
    assert "internal error" not in status["llama-fp8"]["reason"]

    def bug(*args: object, **kwargs: object) -> object:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(conversion, "write_conversion", bug)
    shown = run_cli("batch", jobs)
    assert shown.exit_code == 1 and "ZeroDivisionError: a bug" in shown.stderr and "--debug" in shown.stderr
