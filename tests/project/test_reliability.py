"""Crash safety and determinism of ``convert``, on a real process.

- SIGKILL at seeded random moments: DST is then absent or complete (byte-identical to an uninterrupted
  run, and ``verify`` passes), and the next run succeeds and removes what the killed one left.
- SIGINT exits 130 and SIGTERM 143, each after removing the temporary directory.
- A write failure (the file size limit, ``ulimit -f``) is one error line, exit 2, and leaves nothing.
- Two runs, and runs with different worker counts, write byte-identical files; the report lists the
  SHA-256 of every other file in DST.
"""

from __future__ import annotations

import hashlib
import json
import random
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eaglequant.bench.heads import llama_head, write_head
from eaglequant.common.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_TERMINATED
from tests.conftest import FIXTURES
from tests.project.test_bad_input import PHASE_LOG_LINE

KILL_TRIALS = 20


@pytest.fixture(scope="module")
def medium_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A ~70 MB head: big enough that a conversion takes a while to kill, small enough for CI."""
    src = tmp_path_factory.mktemp("medium") / "src"
    src.mkdir()
    write_head(llama_head(hidden=1024, intermediate=2816, heads=8, head_dim=128, vocab=12288, name="medium"), src)
    return src


def convert_command(src: Path, dst: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "eaglequant", "convert", str(src), str(dst), "--overwrite", *extra]


def snapshot(directory: Path) -> dict[str, str]:
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def leftovers(dst: Path) -> list[str]:
    return sorted(p.name for p in dst.parent.iterdir() if p.name != dst.name)


@pytest.mark.slow
def test_sigkill_at_random_moments_leaves_dst_absent_or_complete(medium_head: Path, tmp_path: Path) -> None:
    from eaglequant import api

    dst = tmp_path / "out"
    started = time.perf_counter()
    subprocess.run(convert_command(medium_head, dst), check=True, capture_output=True)
    duration = time.perf_counter() - started
    reference = snapshot(dst)
    assert api.verify(dst, source=medium_head).ok
    shutil.rmtree(dst)

    rng = random.Random(20261121)
    outcomes = {"absent": 0, "complete": 0, "killed while writing": 0}
    for _ in range(KILL_TRIALS):
        proc = subprocess.Popen(convert_command(medium_head, dst), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.0, duration))
        proc.kill()
        proc.wait()
        if dst.exists():
            assert snapshot(dst) == reference  # the rename is the only way DST appears, and only when complete
            outcomes["complete"] += 1
            shutil.rmtree(dst)  # the next trial starts afresh (else it would only meet an existing DST)
        else:
            outcomes["absent"] += 1
        for name in leftovers(dst):
            assert name.startswith(".out.eaglequant-tmp-"), name  # nothing else is ever written beside DST
            if list((dst.parent / name).glob("*.safetensors")):
                outcomes["killed while writing"] += 1
    assert outcomes["killed while writing"] >= 3, outcomes  # the kills did land mid-conversion

    if dst.exists():
        assert api.verify(dst, source=medium_head).ok
    subprocess.run(convert_command(medium_head, dst), check=True, capture_output=True)
    assert snapshot(dst) == reference
    assert leftovers(dst) == []  # the next run removed what the killed ones left


def _wait_for_temporary(dst: Path, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while not list(dst.parent.glob(f".{dst.name}.eaglequant-tmp-*/*.safetensors")):
        assert proc.poll() is None, "convert finished before it could be interrupted"
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)])
def test_signal_while_writing_removes_the_temporary(medium_head: Path, tmp_path: Path, signum: int, code: int) -> None:
    dst = tmp_path / "out"
    proc = subprocess.Popen(
        convert_command(medium_head, dst),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A shell starts a background job with SIGINT ignored, and Python keeps an ignored SIGINT ignored: the
        # command must receive it as a user's Ctrl-C delivers it, however the tests were started.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _wait_for_temporary(dst, proc)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert b"Traceback" not in stderr
    assert b"interrupted" in stderr
    assert not dst.exists()
    assert leftovers(dst) == []


def test_write_failure_leaves_nothing_and_says_what_failed(medium_head: Path, tmp_path: Path) -> None:
    dst = tmp_path / "out"
    limit = 4 * 2**20  # smaller than any shard of the medium head

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        convert_command(medium_head, dst), capture_output=True, text=True, preexec_fn=small_files, timeout=300
    )
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if not PHASE_LOG_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert "model.safetensors" in lines[0] and "File too large" in lines[0] and "ulimit" in lines[0]
    assert not dst.exists()
    assert leftovers(dst) == []


@pytest.mark.parametrize(
    ("fixture", "extra"),
    [
        ("specforge-llama", ("--scheme", "nvfp4", "--format", "modelopt")),
        ("sharded-split", ("--scheme", "mxfp4", "--max-shard-size", "40KB")),
        pytest.param(
            "torchspec-mla",
            ("--scheme", "fp8-per-channel", "--format", "compressed-tensors", "--verify"),
            marks=pytest.mark.slow,
        ),
    ],
)
def test_output_is_byte_identical_across_runs_and_worker_counts(
    tmp_path: Path, fixture: str, extra: tuple[str, ...]
) -> None:
    from eaglequant.cli import main

    dst = tmp_path / "out"
    snapshots = []
    for workers in ("1", "3", "1"):
        with pytest.raises(SystemExit) as exit_info:
            main(["convert", str(FIXTURES / fixture), str(dst), "--overwrite", "--workers", workers, *extra])
        assert exit_info.value.code == 0
        snapshots.append(snapshot(dst))
    assert snapshots[0] == snapshots[1] == snapshots[2]

    report = json.loads((dst / "eaglequant_report.json").read_text())
    listed = {name: digest for name, digest in snapshots[0].items() if name != "eaglequant_report.json"}
    assert report["files"] == listed
    assert len([n for n in listed if n.endswith(".safetensors")]) >= 1
