#!/usr/bin/env bash
# The oldest Python eaglequant supports, checked in CI: install it under Python 3.10 in .venv-py310, run the README's
# main job (convert a bundled fixture with --verify, then explain it) and the developer's fast test subset.
#   PY310=/path/to/python3.10 scripts/check_py310.sh   (default: python3.10; under pyenv, its 3.10.13)
set -euo pipefail
cd "$(dirname "$0")/.."
export PYENV_VERSION=${PYENV_VERSION:-3.10.13}
PY=${PY310:-python3.10}
if ! "$PY" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then
    echo "error: $PY is not a Python 3.10; name one with PY310=/path/to/python3.10" >&2
    exit 2
fi
venv=.venv-py310
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -c constraints.txt "torch==2.13.0"
"$venv/bin/python" -m pip install -q -c constraints.txt -e ".[test]"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venv/bin/eaglequant" convert fixtures/specforge-llama "$out/specforge-llama-fp8" --scheme fp8-per-channel \
    --format quark --verify --overwrite
"$venv/bin/eaglequant" explain "$out/specforge-llama-fp8" --engine all
OMP_NUM_THREADS=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider -m "not slow and not engine and not vendor"
