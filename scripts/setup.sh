#!/usr/bin/env bash
# Create .venv and install eaglequant into it.
#   scripts/setup.sh          the tool itself
#   scripts/setup.sh --test   plus the test tools, the vendor references (amd-quark, ...) and, each in its own
#                             virtual environment, the engines the engine-load tests run: .venv-vllm (vLLM
#                             0.32.0, CPU build) and .venv-sglang (SGLang 0.5.23); their pins conflict with
#                             llm-compressor's and with each other's.
# torch is pinned through constraints.txt: an unpinned torch would pull several GB of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=""
[ "${1:-}" = "--test" ] && extras="[test,vendors]"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
.venv/bin/python -m pip install -q -c constraints.txt -e ".${extras}"
if [ -n "$extras" ]; then
    bash scripts/engines/vllm.sh .venv-vllm
    bash scripts/engines/sglang.sh .venv-sglang
fi
