#!/usr/bin/env bash
# Create (or update) a venv that can run SGLang's own draft-loading code on CPU:
#   bash scripts/engines/sglang.sh VENV_DIR
# torch is held at the local CPU build; sglang's own pins (torch==2.14.1, flashinfer, sgl-kernel, nvidia-*) are
# never resolved: sglang goes in with --no-deps, its load-path imports from sglang-requirements.txt.
set -euo pipefail
venv=${1:?usage: sglang.sh VENV_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==2.13.0" >"$constraints"

[ -x "$venv/bin/python" ] || "${PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip -q --disable-pip-version-check)
"${pip[@]}" install -c "$constraints" "torch==2.13.0"
"${pip[@]}" install -c "$constraints" -r "$here/sglang-requirements.txt"
"${pip[@]}" install --no-deps "sglang==0.5.23"
