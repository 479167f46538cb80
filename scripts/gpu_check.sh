#!/usr/bin/env bash
# Everything that needs a GPU, in one go (GPU machines are lent for short sessions):
#   the GPU tests (kernels on the device, --device cuda byte-identity), bench kernels, and bench convert
#   with the quantization math on the GPU and on the CPU. Runs from the repo root with the python that holds a
#   CUDA build of torch, triton, typer, rich, safetensors, huggingface_hub, numpy, pytest and hypothesis.
#   OUT (default ./gpu-check) receives the logs and the JSON of both benches.
#   BENCH_HEADS: heads for bench convert --device cuda (default: both), CPU_HEADS for the CPU comparison
#   (default kimi-llama); BENCH_CONVERT=0 skips bench convert.
set -uo pipefail
OUT=${OUT:-gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
step() { echo "== $(date +%T) $*"; }

step environment
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader; nproc; free -g | head -2
  $PY -c 'import torch, triton, sys; print(sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'; } | tee "$OUT/environment.txt"

step GPU tests
timeout 300 $PY -m pytest -q -p no:cacheprovider -rfE --tb=short tests/kernels/test_device.py tests/kernels/test_kernels.py > "$OUT/tests.txt" 2>&1
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.txt" | tail -15

step bench kernels
timeout 240 $PY -m eaglequant bench kernels --json > "$OUT/bench-kernels.json" 2> "$OUT/bench-kernels.err"
tail -3 "$OUT/bench-kernels.err"

if [ "${BENCH_CONVERT:-1}" != 0 ]; then
    for device in cuda cpu; do
        step "bench convert --device $device"
        names=${BENCH_HEADS:-kimi-llama kimi-mla}
        [ "$device" = cpu ] && names=${CPU_HEADS:-kimi-llama}
        heads=(); for h in $names; do heads+=(--head "$h"); done
        timeout 420 $PY -m eaglequant bench convert "${heads[@]}" --no-anchors --device "$device" \
            --cache-dir /tmp/eaglequant-bench --json > "$OUT/bench-convert-$device.json" 2> "$OUT/bench-convert-$device.err"
        tail -2 "$OUT/bench-convert-$device.err"
    done
fi
step done
