"""The SHA-256 of every file ``convert`` writes, for every fixture head, built-in scheme and format that stores it,
and for heads with modules in schemes of their own: a refactoring that must not change outputs is checked by
diffing this list before and after it.

    .venv/bin/python scripts/output_hashes.py > /tmp/hashes-before.txt
    .venv/bin/python scripts/output_hashes.py --only modelopt > /tmp/modelopt.txt   # cases whose name contains it

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
SKIPPED_FIXTURES = {"trained-pair"}  # its own scripts; its heads are covered by the layouts they share
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
}


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
    for head in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name not in SKIPPED_FIXTURES):
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--work", default="/tmp/eaglequant-output-hashes", help="the fixed destination's parent")
    args = parser.parse_args()
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    dst = work / "out"
    for head in copied_heads(work):
        for case, settings in cases().items():
            name = f"{head.name}/{case}"
            if args.only in name:
                for file, digest in hashed_case(head, dst, settings):
                    print(f"{name}\t{file}\t{digest}", flush=True)
    shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
