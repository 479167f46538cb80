"""Long fuzz run of index and config parsing, by hand (CI runs the same properties with 100 examples each).

From the repository root::

    .venv/bin/python scripts/fuzz.py --examples 20000

Options: ``--target index|config|all`` (default all), ``--seed N`` to replay a run, ``--examples N`` per
target. It uses the strategies and properties of ``tests/fuzzing.py`` (shared with
``tests/project/test_fuzz_inputs.py``): opening and inspecting a checkpoint whose ``model.safetensors.index.json``
or ``config.json`` is damaged must succeed or raise an ``EagleQuantError`` with a one-line message. On any
other exception hypothesis shrinks it and prints the smallest failing input; the exit status is then 1.
Failing examples are kept in ``.hypothesis/`` and tried first next time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tests.fuzzing import Workspace, check_config, check_index, configs, indexes, plan_options  # noqa: E402


def index_target(workspace: Workspace) -> Callable[..., None]:
    @given(index=indexes, ascii_only=st.booleans())
    def run(index: Any, ascii_only: bool) -> None:
        check_index(workspace, index, ascii_only)

    return run


def config_target(workspace: Workspace) -> Callable[..., None]:
    @given(case=configs(), ascii_only=st.booleans(), options=plan_options)
    def run(case: tuple[str, Any], ascii_only: bool, options: dict[str, Any]) -> None:
        check_config(workspace, case[0], case[1], ascii_only, options)

    return run


TARGETS = {"index": index_target, "config": config_target}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20000, help="examples per target (default 20000)")
    parser.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    parser.add_argument("--seed", type=int, default=None, help="replay a run with this seed")
    args = parser.parse_args(argv)

    failed = False
    names = list(TARGETS) if args.target == "all" else [args.target]
    with tempfile.TemporaryDirectory(prefix="eaglequant-fuzz-") as tmp:
        workspace = Workspace(Path(tmp))
        for name in names:
            test = settings(
                max_examples=args.examples,
                deadline=None,
                phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                suppress_health_check=list(HealthCheck),
            )(TARGETS[name](workspace))
            if args.seed is not None:
                test = seed(args.seed)(test)
            started = time.perf_counter()
            print(f"fuzzing {name}: {args.examples} examples ...", flush=True)
            try:
                test()
            except Exception as exc:  # hypothesis has printed the shrunk failing example
                failed = True
                print(f"FAILED {name}: {type(exc).__name__}: {exc}", flush=True)
            else:
                print(f"ok {name} in {time.perf_counter() - started:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
