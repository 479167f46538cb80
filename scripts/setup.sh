#!/usr/bin/env bash
# Create .venv and install eaglequant into it.
#   scripts/setup.sh          the tool itself
#   scripts/setup.sh --test   plus the test tools, the vendor references (amd-quark, ...) and, each in its own
#                             virtual environment, the engines the engine-load tests run: .venv-vllm (vLLM
#                             0.32.0, CPU build) and .venv-sglang (SGLang 0.5.23); their pins conflict with
#                             llm-compressor's and with each other's. Plus .vllm-0.33: vLLM 0.33.0's Python
#                             sources, whose configuration functions the engine tests run over .venv-vllm.
# PYTHON=python3.12 scripts/setup.sh picks the interpreter (default: python3; it must be 3.10 or newer).
# torch is pinned through constraints.txt. On a machine without a CUDA GPU, install the CPU build first
# (see the README): an unpinned or plainly pinned torch resolves to the CUDA build and many nvidia-* wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--test" ] && extras="[test,vendors]"
PY=${PYTHON:-python3}
MIN_VERSION="3.10"

python_version() {  # "3.12" for an interpreter, or nothing if it cannot run
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}
new_enough() {  # is version $1 at least $MIN_VERSION?
    [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$1" | sort -V | head -n1)" = "$MIN_VERSION" ]
}

if ! command -v "$PY" >/dev/null 2>&1; then
    echo "error: $PY not found; install Python >= $MIN_VERSION or name one with PYTHON=/path/to/python3.X" >&2
    exit 2
fi
wanted=$(python_version "$PY")
if [ -z "$wanted" ]; then
    echo "error: $PY could not run (asked for its version, it failed); name a working Python >= $MIN_VERSION with PYTHON=/path/to/python3.X" >&2
    exit 2
fi
if ! new_enough "$wanted"; then
    echo "error: $PY is Python $wanted; eaglequant needs >= $MIN_VERSION (PYTHON=/path/to/python3.X picks another)" >&2
    exit 2
fi
if [ -d .venv ]; then
    have=$(python_version .venv/bin/python)
    if [ "$have" != "$wanted" ]; then
        echo "setup: .venv was built by Python ${have:-?} (or is broken), not $wanted; rebuilding it" >&2
        rm -rf .venv
    fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
echo "setup: Python $wanted in .venv" >&2
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
.venv/bin/python -m pip install -q -c constraints.txt -e ".${extras}"
if [ -n "$extras" ]; then
    bash scripts/engines/vllm.sh .venv-vllm
    bash scripts/engines/sglang.sh .venv-sglang
    PYTHON=.venv/bin/python bash scripts/engines/vllm-0.33-sources.sh .vllm-0.33
fi
