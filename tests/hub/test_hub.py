"""Hub sources (offline cache, and a download from a local stand-in Hub) and ``eaglequant upload``.

huggingface_hub reads HF_ENDPOINT / HF_HUB_OFFLINE / HF_HOME when it is imported, so every case runs the
CLI in a subprocess with its own environment. HF_HUB_DISABLE_XET=1 makes uploads take the LFS protocol,
which the stand-in speaks (the real Hub speaks both).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import FIXTURES, run_cli_subprocess
from tests.hub_server import FakeHub

TOKEN = "hf_eaglequantTESTtoken0123456789"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
SOURCE_CARD = """---
license: other
license_name: modified-mit
license_link: LICENSE
base_model: meta-llama/Llama-3.1-8B-Instruct
tags: [eagle3]
---
# A BF16 EAGLE-3 head
"""


@pytest.fixture(scope="module")
def hub():
    server = FakeHub().start()
    yield server
    server.stop()


def _env(tmp_path: Path, hub: FakeHub | None = None, offline: bool = False) -> dict[str, str]:
    env = {
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_TOKEN": TOKEN,
        "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "EAGLEQUANT_DISABLE_PROGRESS_BARS": "1",
    }
    env["HF_ENDPOINT"] = hub.endpoint if hub else "http://127.0.0.1:9"  # port 9: nothing listens
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def _source_files(fixture: str = "specforge-llama") -> dict[str, bytes]:
    files = {p.name: p.read_bytes() for p in (FIXTURES / fixture).iterdir() if p.is_file()}
    return {**files, "README.md": SOURCE_CARD.encode(), "LICENSE": b"Modified MIT\n"}


def _cache_snapshot(hf_home: Path, repo_id: str, files: dict[str, bytes], refs: tuple[str, ...]) -> Path:
    """The Hub cache layout huggingface_hub writes: blobs by hash, snapshot symlinks, refs."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        lfs = name.endswith(".safetensors")
        blob = hashlib.sha256(data).hexdigest() if lfs else hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(repo / "blobs" / blob, snapshot))
    (repo / "refs").mkdir()
    for ref in refs:
        (repo / "refs" / ref).write_text(COMMIT)
    return snapshot


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---", 2)[1])


def test_hub_id_source_from_offline_cache(tmp_path: Path) -> None:
    _cache_snapshot(tmp_path / "hf-home", "org/eagle3-head", _source_files(), refs=("main", "v1"))
    dst = tmp_path / "out"
    proc = run_cli_subprocess("convert", "org/eagle3-head@v1", dst, "--json", env=_env(tmp_path, offline=True))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    source = report["manifest"]["source"]
    assert (source["repo_id"], source["revision"], source["commit"]) == ("org/eagle3-head", "v1", COMMIT)
    weights = (FIXTURES / "specforge-llama" / "model.safetensors").read_bytes()
    assert source["files"]["model.safetensors"] == hashlib.sha256(weights).hexdigest()  # read from the blob name

    card = (dst / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["base_model"] == "org/eagle3-head" and meta["base_model_relation"] == "quantized"
    assert (meta["license"], meta["license_name"], meta["license_link"]) == ("other", "modified-mit", "LICENSE")
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct" in card  # the source card's base_model is the target
    assert (dst / "LICENSE").read_bytes() == b"Modified MIT\n"  # carried over; the source card is replaced
    assert "A BF16 EAGLE-3 head" not in card


def test_offline_and_not_cached_is_one_clear_line(tmp_path: Path) -> None:
    proc = run_cli_subprocess("convert", "org/not-cached", tmp_path / "out", env=_env(tmp_path, offline=True))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "org/not-cached" in lines[0] and "HF_HUB_OFFLINE" in lines[0]
    assert not (tmp_path / "out").exists()


def test_unreachable_hub_is_one_clear_line(tmp_path: Path) -> None:
    proc = run_cli_subprocess("inspect", "org/somewhere", env=_env(tmp_path))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot be reached" in proc.stderr or "cannot reach" in proc.stderr
    assert TOKEN not in proc.stderr + proc.stdout


@pytest.mark.slow
def test_download_fetches_only_the_files_a_conversion_needs(tmp_path: Path, hub: FakeHub) -> None:
    files = _source_files()
    junk = {"training_state.pt": b"\0" * 4096, "pytorch_model.bin": b"not needed: safetensors wins", "logo.png": b"x"}
    hub.seed("org/download-me", {**files, **junk})
    before = len(hub.requests)
    proc = run_cli_subprocess("inspect", "org/download-me", "--json", env=_env(tmp_path, hub))
    assert proc.returncode == 0, proc.stderr
    downloads = [r for r in hub.requests[before:] if "/resolve/" in r.path]
    fetched = {r.path.split("/resolve/", 1)[1].split("/", 1)[1] for r in downloads}
    assert fetched == set(files)  # weights, config, side files, card and licence; none of the junk
    assert {r.authorization for r in downloads} == {f"Bearer {TOKEN}"}
    assert TOKEN not in proc.stdout + proc.stderr

    # Now cached: offline, the same id converts without the Hub.
    dst = tmp_path / "out"
    proc = run_cli_subprocess("convert", "org/download-me", dst, env=_env(tmp_path, offline=True))
    assert proc.returncode == 0, proc.stderr
    assert _front_matter((dst / "README.md").read_text())["base_model"] == "org/download-me"


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> Path:
    dst = tmp_path_factory.mktemp("upload") / "llama-fp8"
    proc = run_cli_subprocess("convert", FIXTURES / "specforge-llama", dst, "--verify", "--engine", "vllm")
    assert proc.returncode == 0, proc.stderr
    return dst


def _copy(converted: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(converted, tmp_path / "dst", symlinks=True))


def test_upload_sends_intact_bytes_and_prints_the_commit(converted: Path, tmp_path: Path, hub: FakeHub) -> None:
    dst = _copy(converted, tmp_path)
    before = len(hub.requests)
    proc = run_cli_subprocess("upload", dst, "org/llama-fp8", "--private", env=_env(tmp_path, hub))
    assert proc.returncode == 0, proc.stderr
    commit_url = proc.stdout.strip()
    assert commit_url.startswith(f"{hub.endpoint}/org/llama-fp8/commit/")

    received = hub.files("org/llama-fp8")
    local = {p.relative_to(dst).as_posix(): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    assert received == local  # every file, byte for byte
    assert hub.repos["org/llama-fp8"].private
    # The card now names the draft by its repo id, and still matches the report.
    assert '"model": "org/llama-fp8"' in received["README.md"].decode()
    assert run_cli_subprocess("verify", dst).returncode == 0
    # The token went to the Hub's API as a bearer token; not to the storage URL, not to the output.
    sent = [r for r in hub.requests[before:] if r.path != "/api/agent-harnesses"]
    assert {r.authorization for r in sent if not r.path.startswith("/_lfs/")} == {f"Bearer {TOKEN}"}
    assert {r.authorization for r in sent if r.path.startswith("/_lfs/")} == {None}
    assert TOKEN not in proc.stdout + proc.stderr
    assert all("base_model_relation" not in m or "base_model" in m for m in hub.validated)


@pytest.mark.slow
def test_upload_commit_message_and_branch(converted: Path, tmp_path: Path, hub: FakeHub) -> None:
    dst = _copy(converted, tmp_path)
    proc = run_cli_subprocess(
        "upload", dst, "org/branchy", "--revision", "fp8", "-m", "FP8 draft", "--json", env=_env(tmp_path, hub)
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["revision"] == "fp8" and result["verified"] == "passed"
    head = hub.repos["org/branchy"].branches["fp8"][-1]
    assert head.title == "FP8 draft" and result["commit_oid"] == head.oid
    assert hub.repos["org/branchy"].branches["main"] == []


@pytest.mark.slow
def test_upload_refuses_a_dst_that_fails_verify(converted: Path, tmp_path: Path, hub: FakeHub) -> None:
    dst = _copy(converted, tmp_path)
    weights = dst / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the last bytes belong to a tensor: the SHA-256 check and parity see it
    weights.write_bytes(bytes(data))
    before = len(hub.requests)
    proc = run_cli_subprocess("upload", dst, "org/broken", env=_env(tmp_path, hub))
    assert proc.returncode == 3, proc.stderr
    assert "fails verify" in proc.stderr and "--force" in proc.stderr and "Traceback" not in proc.stderr
    assert hub.requests[before:] == []  # nothing was sent, not even the repo creation
    assert "org/broken" not in hub.repos

    forced = run_cli_subprocess("upload", dst, "org/broken", "--force", "--json", env=_env(tmp_path, hub))
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["forced"] is True
    assert hub.files("org/broken")["model.safetensors"] == bytes(data)


@pytest.mark.slow
def test_upload_dry_run_lists_and_sends_nothing(converted: Path, tmp_path: Path, hub: FakeHub) -> None:
    dst = _copy(converted, tmp_path)
    (dst / ".cache" / "huggingface").mkdir(parents=True)
    (dst / ".cache" / "huggingface" / "state").write_text("resume state")
    before = len(hub.requests)
    proc = run_cli_subprocess("upload", dst, "org/dry", "--dry-run", "--json", env=_env(tmp_path, hub))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["dry_run"] is True and result["commit_url"] is None and result["verified"] == "passed"
    expected = {p.name: p.stat().st_size for p in dst.iterdir() if p.is_file()}
    assert result["files"] == expected and result["total_bytes"] == sum(expected.values())
    assert hub.requests[before:] == []

    human = run_cli_subprocess("upload", dst, "org/dry", "--dry-run", env=_env(tmp_path, hub))
    assert human.returncode == 0
    assert "model.safetensors" in human.stdout and "dry run: nothing sent" in human.stderr
    assert ".cache" not in human.stdout + human.stderr


def test_upload_dry_run_with_force_does_not_say_it_sent(converted: Path, tmp_path: Path, hub: FakeHub) -> None:
    dst = _copy(converted, tmp_path)
    (dst / "eaglequant_report.json").unlink()  # no report, no source: not verified numerically
    proc = run_cli_subprocess("upload", dst, "org/dry", "--dry-run", "--force", env=_env(tmp_path, hub))
    assert proc.returncode == 0, proc.stderr
    assert "would" in proc.stdout + proc.stderr
    assert " sent it anyway" not in proc.stderr and "uploaded anyway" not in proc.stderr


@pytest.mark.slow
def test_a_failed_upload_leaves_dst_as_it_was_and_never_suggests_offline(converted: Path, tmp_path: Path) -> None:
    dst = _copy(converted, tmp_path)
    before = {p.name: p.read_bytes() for p in dst.iterdir() if p.is_file()}
    proc = run_cli_subprocess("upload", dst, "org/unreachable", env=_env(tmp_path))  # nothing listens
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "HF_HUB_OFFLINE" not in proc.stderr  # the cache cannot stand in for an upload
    assert {p.name: p.read_bytes() for p in dst.iterdir() if p.is_file()} == before  # README.md, report unchanged


def test_offline_hint_keeps_the_revision(tmp_path: Path) -> None:
    proc = run_cli_subprocess("inspect", "org/not-cached@v2", env=_env(tmp_path, offline=True))
    assert proc.returncode == 2
    assert "hf download org/not-cached --revision v2" in proc.stderr


def test_upload_rejects_a_bad_repo_id(converted: Path) -> None:
    proc = run_cli_subprocess("upload", converted, "not a repo id", "--dry-run")
    assert proc.returncode == 2 and "not a Hub repo id" in proc.stderr and "Traceback" not in proc.stderr


def test_a_hub_cache_snapshot_given_as_a_path_is_known_as_its_repo(tmp_path: Path) -> None:
    snapshot = _cache_snapshot(tmp_path / "hf-home", "org/by-path", _source_files(), refs=("main",))
    dst = tmp_path / "out"
    proc = run_cli_subprocess("convert", snapshot, dst, "--json", env=_env(tmp_path, offline=True))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["manifest"]["source"]["commit"] == COMMIT
    assert _front_matter((dst / "README.md").read_text())["base_model"] == "org/by-path"


def test_a_missing_repo_is_one_clear_line(tmp_path: Path, hub: FakeHub) -> None:
    proc = run_cli_subprocess("inspect", "org/does-not-exist", env=_env(tmp_path, hub))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "repository not found" in proc.stderr and "HF_TOKEN" in proc.stderr
    assert TOKEN not in proc.stderr
