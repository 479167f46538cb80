#!/usr/bin/env bash
# Creates .venv and installs eaglequant with its test and vendor-reference extras.
# torch is pinned through constraints.txt: an unpinned torch pulls several GB of CUDA wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt "torch==2.13.0"
extras=${EAGLEQUANT_EXTRAS:-test,vendors}
.venv/bin/python -m pip install -q -c constraints.txt -e ".[${extras}]"
