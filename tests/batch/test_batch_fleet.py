"""``batch`` at fleet scale: the matrix workflow of docs/ci.md run as written (its job file, its commands) against
the stand-in Hub, on fresh runners with empty caches; the Hub as the record of what is done; merged summaries.

The workflow's YAML is read from the doc and its steps run in order: ``run:`` lines through bash (``eaglequant``
is this checkout), ``actions/upload-artifact`` / ``download-artifact`` as copies, ``checkout`` as a fresh runner
directory holding the job file; ``pip install`` is skipped (the tests' interpreter has eaglequant).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from eaglequant.batch.record import OFFLINE_NOTE
from tests.conftest import FIXTURES, ROOT, run_cli, run_cli_subprocess
from tests.hub_server import FakeHub

DOC = ROOT / "docs" / "ci.md"
TOKEN = "hf_fleetTESTtoken0123456789"
# The doc's Hub sources, stood in for by the bundled fixtures.
SOURCES = {"acme/llama3-8b-eagle3": "specforge-llama", "acme/kimi-k2.5-eagle3-mla": "torchspec-mla"}


def _doc_block(language: str, first_line: str) -> str:
    blocks = re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)
    matching = [b for b in blocks if b.splitlines()[0].strip() == first_line]
    assert len(matching) == 1, f"docs/ci.md: one ```{language} block starting {first_line!r}"
    return matching[0]


def _hub_env(tmp: Path, hub: FakeHub) -> dict[str, str]:
    """A fresh runner: its own Hugging Face cache and digest cache."""
    return {
        "HF_ENDPOINT": hub.endpoint,
        "HF_TOKEN": TOKEN,
        "HF_HOME": str(tmp / "hf-home"),
        "EAGLEQUANT_CACHE_DIR": str(tmp / "eaglequant-cache"),
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }


class Workflow:
    """The doc's GitHub Actions workflow, each job (and each matrix leg) on a fresh runner directory."""

    def __init__(self, work: Path, hub: FakeHub, repo: Path) -> None:
        self.spec = yaml.safe_load(_doc_block("yaml", "# .github/workflows/quantize-drafts.yml"))
        self.work, self.hub, self.repo = work, hub, repo  # repo: what actions/checkout gives
        self.bin = work / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        shim = self.bin / "eaglequant"
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        shim.write_text(f'#!/bin/sh\nPYTHONPATH="{pythonpath}" exec "{sys.executable}" -m eaglequant "$@"\n')
        shim.chmod(0o755)
        self.runs = 0

    def run(self) -> dict[str, Any]:
        """One run of the workflow: list, one runner per job, merge."""
        self.runs += 1
        base = self.work / f"run{self.runs}"
        artifacts = base / "artifacts"
        jobs = self.spec["jobs"]
        assert list(jobs) == ["list", "quantize", "merge"]
        listed = self._job("list", base / "list", {}, artifacts)
        names = json.loads(listed["outputs"]["list"]["jobs"])
        assert jobs["quantize"]["strategy"]["matrix"]["job"] == "${{ fromJSON(needs.list.outputs.jobs) }}"
        legs = {
            name: self._job("quantize", base / f"quantize-{name}", {"matrix.job": name}, artifacts) for name in names
        }
        merged = self._job("merge", base / "merge", {}, artifacts)
        return {"names": names, "legs": legs, "merge": merged, "runners": base}

    def _job(self, job_id: str, runner: Path, context: dict[str, str], artifacts: Path) -> dict[str, Any]:
        shutil.copytree(self.repo, runner)
        env = {**os.environ, **_hub_env(runner, self.hub), "PATH": f"{self.bin}:{os.environ['PATH']}"}
        env.update({k: self._expand(v, context) for k, v in (self.spec.get("env") or {}).items()})
        outputs: dict[str, dict[str, str]] = {}
        failed, results = False, []
        for number, step in enumerate(self.spec["jobs"][job_id]["steps"]):
            if failed and "always()" not in str(step.get("if", "")):
                continue
            if "uses" in step:
                self._action(step, runner, context, artifacts)
                continue
            command = self._expand(step["run"], context)
            if "pip install" in command:
                continue
            output_file = runner / f".github_output_{number}"
            output_file.touch()
            proc = subprocess.run(
                ["bash", "-ec", command],
                cwd=runner,
                env={**env, "GITHUB_OUTPUT": str(output_file)},
                capture_output=True,
                text=True,
                timeout=600,
            )
            results.append(proc)
            failed = failed or proc.returncode != 0
            if "id" in step:
                lines = output_file.read_text().splitlines()
                outputs[step["id"]] = dict(line.split("=", 1) for line in lines)
        return {"runner": runner, "results": results, "outputs": outputs, "returncode": results[-1].returncode}

    def _action(self, step: dict[str, Any], runner: Path, context: dict[str, str], artifacts: Path) -> None:
        action, options = step["uses"].split("@")[0], step.get("with") or {}
        if action == "actions/upload-artifact":
            target = artifacts / self._expand(options["name"], context)
            target.mkdir(parents=True)
            shutil.copy(runner / self._expand(options["path"], context), target)
        elif action == "actions/download-artifact":
            assert options["merge-multiple"] is True
            destination = runner / options["path"]
            destination.mkdir()
            for folder in artifacts.iterdir():
                if fnmatch.fnmatch(folder.name, options["pattern"]):
                    for file in folder.iterdir():
                        shutil.copy(file, destination)
        else:
            assert action in ("actions/checkout", "actions/setup-python"), action

    @staticmethod
    def _expand(text: str, context: dict[str, str]) -> str:
        values = {**context, "secrets.HF_TOKEN": TOKEN}
        return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", lambda m: values[m[1]], text)


def _seed_sources(hub: FakeHub) -> None:
    for repo_id, fixture in SOURCES.items():
        hub.seed(repo_id, {p.name: p.read_bytes() for p in (FIXTURES / fixture).iterdir() if p.is_file()})


def _hub_report(hub: FakeHub, repo_id: str) -> dict[str, Any]:
    return json.loads(hub.files(repo_id)["eaglequant_report.json"])


def _weights_fetched(requests: list[Any]) -> list[str]:
    return [r.path for r in requests if "/resolve/" in r.path and r.path.endswith((".safetensors", ".bin"))]


def _sent(requests: list[Any]) -> list[str]:
    """Requests that write to the Hub: a commit, an upload, a repo or branch created."""
    writes = ("/commit/", "/preupload/", "/_lfs/", "/info/lfs/", "/api/repos/create", "/branch/")
    return [
        f"{r.method} {r.path}" for r in requests if r.method in ("POST", "PUT") and any(w in r.path for w in writes)
    ]


def _statuses(run: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    merged = json.loads((run["merge"]["runner"] / "batch-summary.json").read_text())
    return {job["name"]: (job["status"], (job["upload"] or {}).get("status")) for job in merged["jobs"]}


@pytest.mark.slow
def test_the_ci_doc_workflow_skips_what_the_hub_holds_and_redoes_exactly_what_changed(tmp_path: Path) -> None:
    hub = FakeHub().start()
    try:
        _seed_sources(hub)
        repo = tmp_path / "checkout"
        repo.mkdir()
        drafts = repo / "drafts.toml"
        drafts.write_text(_doc_block("toml", "# drafts.toml"))
        assert {job.source for job in _load(drafts)} == set(SOURCES)
        workflow = Workflow(tmp_path / "ci", hub, repo)

        # 1. Nothing on the Hub yet: every job converts and uploads, one runner each.
        first = workflow.run()
        names = first["names"]
        assert names == ["llama3-8b-fp8", "llama3-8b-nvfp4", "kimi-k2.5-mla-nvfp4"]
        assert all(leg["returncode"] == 0 for leg in first["legs"].values()), _errors(first)
        assert first["merge"]["returncode"] == 0 and "3 converted" in first["merge"]["results"][-1].stdout
        assert set(_statuses(first).values()) == {("converted", "uploaded")}
        for job in _load(drafts):
            summary = json.loads((first["legs"][job.name]["runner"] / f"summary-{job.name}.json").read_text())
            # the key computed from the Hub's listing (no weights) is the one the conversion recorded
            assert summary["jobs"][0]["manifest_key"] == _hub_report(hub, job.upload.repo_id)["manifest"]["key"]

        # 2. Rerun on fresh runners, nothing changed: every job skipped from the Hub's record alone.
        before = len(hub.requests)
        second = workflow.run()
        requests = hub.requests[before:]
        assert set(_statuses(second).values()) == {("skipped", "skipped")}
        assert _weights_fetched(requests) == [] and _sent(requests) == []  # no weight downloaded, nothing sent
        assert not any((leg["runner"] / "out").exists() for leg in second["legs"].values())  # nothing converted
        assert second["merge"]["returncode"] == 0
        commits = {job.upload.repo_id: len(hub.repos[job.upload.repo_id].branches["main"]) for job in _load(drafts)}
        assert set(commits.values()) == {1}

        # 3. One job's option changes: that job, and only it, converts and uploads again.
        drafts.write_text(
            drafts.read_text().replace(
                'engines = ["vllm", "trtllm-main"]\n[job.upload]\nrepo_id = "acme/llama3-8b-eagle3-nvfp4"',
                'engines = ["vllm"]\n[job.upload]\nrepo_id = "acme/llama3-8b-eagle3-nvfp4"',
            )
        )
        third = workflow.run()
        assert _statuses(third) == {
            "llama3-8b-fp8": ("skipped", "skipped"),
            "llama3-8b-nvfp4": ("converted", "uploaded"),
            "kimi-k2.5-mla-nvfp4": ("skipped", "skipped"),
        }
        assert len(hub.repos["acme/llama3-8b-eagle3-nvfp4"].branches["main"]) == 2

        # 4. One source changes (new weights on the Hub): the job made from it, and only it, redoes its work.
        weights = bytearray(hub.files("acme/kimi-k2.5-eagle3-mla")["model.safetensors"])
        weights[-2] ^= 0x01  # the lowest mantissa bit of the last bf16 value
        hub.seed("acme/kimi-k2.5-eagle3-mla", {"model.safetensors": bytes(weights)}, title="retrained")
        before = len(hub.requests)
        fourth = workflow.run()
        assert _statuses(fourth) == {
            "llama3-8b-fp8": ("skipped", "skipped"),
            "llama3-8b-nvfp4": ("skipped", "skipped"),
            "kimi-k2.5-mla-nvfp4": ("converted", "uploaded"),
        }
        assert {Path(p).name for p in _weights_fetched(hub.requests[before:])} == {"model.safetensors"}
        assert all("/acme/kimi-k2.5-eagle3-mla/" in p for p in _weights_fetched(hub.requests[before:]))
        reason = json.loads((fourth["merge"]["runner"] / "batch-summary.json").read_text())["jobs"][2]["reason"]
        assert "made from another source or with other options" in reason
        assert TOKEN not in "".join(p.stdout + p.stderr for run in (first, second) for p in _all_results(run))
    finally:
        hub.stop()


def _load(path: Path) -> list[Any]:
    from eaglequant.batch.jobs import load_jobs

    return load_jobs(path)


def _all_results(run: dict[str, Any]) -> list[subprocess.CompletedProcess[str]]:
    return [p for leg in (*run["legs"].values(), run["merge"]) for p in leg["results"]]


def _errors(run: dict[str, Any]) -> str:
    return "\n".join(p.stderr for p in _all_results(run))


def _shard_summaries(tmp_path: Path, comment: str = "") -> tuple[Path, list[Path]]:
    """Three jobs, the second broken, run as two shards: the summaries two runners would upload."""
    jobs = tmp_path / "jobs.toml"
    job = '[[job]]\nname = "{name}"\nsource = "{src}"\ndestination = "out/{name}"\n'
    llama = FIXTURES / "specforge-llama"
    jobs.write_text(
        comment + "".join(job.format(name=n, src=s) for n, s in [("a", llama), ("broken", "nowhere"), ("c", llama)])
    )
    summaries = [tmp_path / f"summary-{k}.json" for k in (1, 2)]
    for k, summary in enumerate(summaries, 1):
        run_cli("batch", jobs, "--shard", f"{k}/2", "--summary", summary)
    return jobs, summaries


def test_merged_summaries_fail_when_one_shard_failed(tmp_path: Path) -> None:
    _jobs, (one, two) = _shard_summaries(tmp_path)
    assert [job["name"] for job in json.loads(one.read_text())["jobs"]] == ["a", "c"]
    assert json.loads(one.read_text())["ok"] is True  # shard 1 alone passed

    merged = run_cli("batch-merge", one, two, "--json", "--summary", tmp_path / "merged.json")
    assert merged.exit_code == 4
    data = json.loads(merged.stdout)
    assert json.loads((tmp_path / "merged.json").read_text()) == data
    assert [(job["name"], job["status"]) for job in data["jobs"]] == [
        ("a", "converted"),
        ("broken", "failed"),
        ("c", "converted"),
    ]  # the file's order, whatever the order of the summaries
    assert data["counts"] == {"converted": 2, "skipped": 0, "failed": 1, "uploaded": 0, "missing": 0}
    swapped = json.loads(run_cli("batch-merge", two, one, "--json").stdout)
    assert swapped["jobs"] == data["jobs"] and swapped["summaries"] == [str(two), str(one)]

    table = run_cli("batch-merge", one, two)
    assert table.exit_code == 4
    cells = [line.split() for line in table.stdout.splitlines()]
    rows = {cell[0]: cell[1] for cell in cells if cell and cell[0] in ("a", "broken", "c")}
    assert rows == {"a": "converted", "broken": "failed", "c": "converted"}
    assert "1 failed" in table.stdout


@pytest.mark.slow
def test_a_job_no_summary_reports_is_missing_and_fails_the_merge(tmp_path: Path) -> None:
    _, (one, _) = _shard_summaries(tmp_path)
    merged = run_cli("batch-merge", one, "--json")
    assert merged.exit_code == 4
    data = json.loads(merged.stdout)
    assert [job["status"] for job in data["jobs"]] == ["converted", "missing", "converted"]
    assert data["counts"]["missing"] == 1 and data["ok"] is False


@pytest.mark.slow
def test_all_passing_summaries_merge_to_exit_0(tmp_path: Path) -> None:
    jobs, (_one, _) = _shard_summaries(tmp_path)
    jobs.write_text(jobs.read_text().replace('source = "nowhere"', f'source = "{FIXTURES / "specforge-llama"}"'))
    for k in (1, 2):
        run_cli("batch", jobs, "--shard", f"{k}/2", "--summary", tmp_path / f"again-{k}.json")
    merged = run_cli("batch-merge", tmp_path / "again-1.json", tmp_path / "again-2.json", "--json")
    assert merged.exit_code == 0, merged.stderr
    assert [job["status"] for job in json.loads(merged.stdout)["jobs"]] == ["skipped", "converted", "skipped"]


@pytest.mark.slow
def test_summaries_that_do_not_belong_together_are_refused(tmp_path: Path) -> None:
    _jobs, (one, _two) = _shard_summaries(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    _, (foreign, _) = _shard_summaries(other, comment="# another version of the file\n")
    (tmp_path / "junk.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "old.json").write_text('{"jobs_file": "x", "ok": true, "counts": {}, "jobs": []}')
    for args, message in [
        ((one, foreign), "a summary of another job file"),
        ((one, one), "job 'a' is in two summaries"),
        ((one, tmp_path / "junk.json"), "not a batch summary"),
        ((one, tmp_path / "broken.json"), "not a readable JSON summary"),
        ((tmp_path / "old.json",), "not a batch summary of this eaglequant (no 'jobs_sha256')"),
        ((tmp_path / "absent.json",), "summary not found"),
    ]:
        result = run_cli("batch-merge", *args, "--json")
        assert result.exit_code == 2 and message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1
        assert json.loads(result.stdout)["exit_code"] == 2  # under --json the error is a JSON object on stdout


@pytest.mark.slow
def test_a_hub_upload_whose_verification_failed_is_redone_and_offline_the_destination_decides(
    tmp_path: Path,
) -> None:
    hub = FakeHub().start()
    try:
        jobs = tmp_path / "jobs.toml"
        jobs.write_text(
            f'[[job]]\nname = "llama"\nsource = "{FIXTURES / "specforge-llama"}"\ndestination = "out/llama"\n'
            '[job.upload]\nrepo_id = "org/llama-fp8"\n'
        )
        env = _hub_env(tmp_path, hub)
        first = run_cli_subprocess("batch", jobs, "--json", "--summary", tmp_path / "s.json", env=env)
        assert first.returncode == 0, first.stderr
        assert json.loads(first.stdout)["jobs"][0]["upload"]["status"] == "uploaded"

        # The Hub now holds an output whose recorded verification failed (as `upload --force` would push),
        # with a report that lists it faithfully: same key, every file with its SHA-256.
        files = hub.files("org/llama-fp8")
        verification = json.loads(files["eaglequant_verify.json"])
        failed = (json.dumps({**verification, "ok": False}, indent=2) + "\n").encode()
        report = json.loads(files["eaglequant_report.json"])
        report["files"]["eaglequant_verify.json"] = hashlib.sha256(failed).hexdigest()
        changed = {"eaglequant_verify.json": failed, "eaglequant_report.json": json.dumps(report).encode()}
        hub.seed("org/llama-fp8", changed, title="forced")

        fresh = tmp_path / "fresh"
        fresh.mkdir()
        shutil.copy(jobs, fresh / "jobs.toml")
        again = run_cli_subprocess(
            "batch", fresh / "jobs.toml", "--json", "--summary", fresh / "s.json", env=_hub_env(fresh, hub)
        )
        job = json.loads(again.stdout)["jobs"][0]
        assert job["status"] == "converted" and "its recorded verification failed" in job["reason"]
        assert job["upload"]["status"] == "uploaded"
        assert json.loads(hub.files("org/llama-fp8")["eaglequant_verify.json"])["ok"] is True

        # Offline: the local destination decides (complete, so skipped), and one note line says so.
        offline = run_cli_subprocess(
            "batch", jobs, "--json", "--summary", tmp_path / "s.json", env={**env, "HF_HUB_OFFLINE": "1"}
        )
        assert offline.returncode == 0, offline.stderr
        job = json.loads(offline.stdout)["jobs"][0]
        assert job["status"] == "skipped" and job["reason"] == "complete, from the same source and options"
        notes = [line for line in offline.stderr.splitlines() if line.startswith("note:")]
        assert notes == [f"note: {OFFLINE_NOTE}"]
        assert json.loads(offline.stdout)["notes"] == [OFFLINE_NOTE.to_json()]
        assert OFFLINE_NOTE.message == notes[0].removeprefix("note: ")
    finally:
        hub.stop()
