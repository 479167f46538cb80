#!/usr/bin/env bash
# Create (if absent) DIR holding vLLM 0.33.0's Python sources (no compiled extension), for
# eaglequant/engine_load/probes/vllm_config_probe.py: vLLM 0.33 has no CPU build, but its configuration and
# matching modules import over the 0.32.0 CPU build's dependencies (.venv-vllm) with DIR first on PYTHONPATH.
# The wheel is checked against its SHA-256 on PyPI before it is unpacked. Idempotent; quiet.
#   bash scripts/engines/vllm-0.33-sources.sh DIR        (PYTHON=python3 to choose the interpreter that downloads)
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
python=${PYTHON:-python3}
[ -f "$dir/vllm/__init__.py" ] && [ -f "$dir/COMPLETE" ] && exit 0

wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
# pip checks the download against the hash the index publishes.
"$python" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --platform manylinux_2_28_x86_64 -d "$wheels" "vllm==0.33.0"
rm -rf "$dir"
mkdir -p "$dir"
"$python" - "$wheels" "$dir" <<'PY'
import sys, zipfile
from pathlib import Path

wheel = next(Path(sys.argv[1]).glob("vllm-0.33.0-*.whl"))
with zipfile.ZipFile(wheel) as archive:
    names = [n for n in archive.namelist() if n.startswith("vllm/") and not n.endswith(".so")]
    names = [n for n in names if not n.startswith("vllm/third_party/")]
    archive.extractall(sys.argv[2], names)
PY
touch "$dir/COMPLETE"
