"""The SHA-256 of every file ``convert`` writes, for every fixture head, built-in scheme and format that stores it,
and for heads with modules in schemes of their own: a refactoring that must not change outputs is checked by
diffing this list before and after it.

    .venv/bin/python scripts/output_hashes.py > /tmp/hashes-before.txt
    .venv/bin/python scripts/output_hashes.py --only modelopt > /tmp/modelopt.txt   # cases whose name contains it
    .venv/bin/python scripts/output_hashes.py --held > tests/project/output_hashes.tsv  # what the test holds

``--held`` leaves out the card and the report, which name the destination; tests/project/test_output_hashes.py holds
every other file of every case to the committed list, so a change to any checkpoint's bytes is a failing test.

Every case is converted from a copy of the fixtures to one destination, both under ``--work`` (keep it the same
across runs), so the paths the report and card name (the only run-to-run differences) are the same; a case the
conversion refuses is listed with its error line instead of files.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
from pathlib import Path
from typing import Any

import eaglequant
from eaglequant.common.errors import EagleQuantError
from eaglequant.formats import stored_cells

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SKIPPED_FIXTURES = {"trained-pair", "trained-pair-mla"}  # their own scripts; their layouts are covered elsewhere
# Modules in schemes of their own, and the options each needs (a per-module config names layers after the target's).
MIXED_CASES: dict[str, dict[str, Any]] = {
    "lm_head=nvfp4,modelopt,61": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["lm_head=nvfp4"],
        "format": "modelopt",
        "target_layers": 61,
    },
    "fc=nvfp4,modelopt,61": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["fc=nvfp4"],
        "format": "modelopt",
        "target_layers": 61,
    },
    "lm_head=fp8,fc=fp8,nvfp4,modelopt,4": {
        "scheme": "nvfp4",
        "scheme_for": ["lm_head=fp8-per-channel", "fc=fp8-per-channel"],
        "format": "modelopt",
        "target_layers": 4,
    },
    "mlp.*=nvfp4,modelopt,61": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["mlp.*=nvfp4"],
        "format": "modelopt",
        "target_layers": 61,
    },
    "lm_head=fp8-per-channel,quark": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["lm_head=fp8-per-channel"],
        "format": "quark",
    },
    "quantize-lm_head,nvfp4,modelopt": {"scheme": "nvfp4", "quantize": ["lm_head"], "format": "modelopt"},
    "mlp.*=mxfp4,quark,61": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["mlp.*=mxfp4"],
        "format": "quark",
        "target_layers": 61,
    },
    "mlp.*=nvfp4,compressed-tensors,vllm,sglang,61": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["mlp.*=nvfp4"],
        "format": "compressed-tensors",
        "engines": ["vllm", "sglang"],
        "target_layers": 61,
    },
    "mlp.*=int4-w4a16,compressed-tensors,61": {
        "scheme": "fp8-per-channel",
        "scheme_for": ["mlp.*=int4-w4a16"],
        "format": "compressed-tensors",
        "target_layers": 61,
    },
}
# Files that name the destination (the card, the report): left out of the held list.
PATH_DEPENDENT = ("README.md", "eaglequant_report.json")


# Each built-in scheme in each format is converted for each of these (no layer count: rules for any count).
TARGETS: dict[str, dict[str, Any]] = {
    "": {},
    ",61": {"target_layers": 61},
    ",all,61": {"engines": ["all"], "target_layers": 61},
}


def cases() -> dict[str, dict[str, Any]]:
    found = {
        f"{scheme},{fmt}{suffix}": {"scheme": scheme, "format": fmt, **target}
        for scheme, fmt in stored_cells()
        for suffix, target in TARGETS.items()
    }
    return {**found, **MIXED_CASES}


def copied_heads(work: Path) -> list[Path]:
    """The fixture heads, copied under ``work``."""
    heads = []
    # a head is a directory with its config.json (fixtures/targets holds target configs, no head)
    found = (p for p in FIXTURES.iterdir() if (p / "config.json").is_file() and p.name not in SKIPPED_FIXTURES)
    for head in sorted(found):
        heads.append(work / "fixtures" / head.name)
        shutil.copytree(head, heads[-1])
    return heads


def hashed_case(src: Path, dst: Path, settings: dict[str, Any]) -> list[tuple[str, str]]:
    """(file, sha256) of every file converting ``src`` with ``settings`` writes, or one ("ERROR", its line)."""
    try:
        eaglequant.convert(src, dst, overwrite=True, **settings)
    except EagleQuantError as exc:
        return [("ERROR", str(exc).splitlines()[0])]
    return [(p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in sorted(dst.iterdir()) if p.is_file()]


def hash_lines(work: Path, only: str = "", held: bool = False) -> list[str]:
    """``case<TAB>file<TAB>sha256`` for every case of every fixture head (its name containing ``only``), converted
    under ``work`` (emptied first, removed after); ``held``: without the files that name the destination."""
    shutil.rmtree(work, ignore_errors=True)
    dst = work / "out"
    lines = []
    for head in copied_heads(work):
        for case, settings in cases().items():
            name = f"{head.name}/{case}"
            if only in name:
                for file, digest in hashed_case(head, dst, settings):
                    if not (held and file in PATH_DEPENDENT):
                        lines.append(f"{name}\t{file}\t{digest}")
    shutil.rmtree(work)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--work", default="/tmp/eaglequant-output-hashes", help="the fixed destination's parent")
    parser.add_argument("--held", action="store_true", help="leave out the files that name the destination")
    args = parser.parse_args()
    for line in hash_lines(Path(args.work), args.only, args.held):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
