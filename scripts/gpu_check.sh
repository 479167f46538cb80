#!/usr/bin/env bash
# The one GPU check (issue 65), most valuable first, each step under its own timeout; a failing step never stops
# the next:
#   1. every registered kernel compiled on the GPU against float64 and torch, M = 1 to 256 (tests/kernels)
#   2. convert --device cuda writes the CPU's bytes: every fixture and the 1/8-scale Kimi-K2.5 heads
#   3. the launch sweep (scripts/gpu_kernel_sweep.py; compiled first by 8 processes): the fastest correct tiles,
#      split-K, warps and stages per kernel, shape and M = 1, 4, 16; then each kernel's choice at each M timed as
#      bench kernels times
#   4. bench kernels at M = 1, 4, 16 (one process each, the default launch): % of copy bandwidth, x bf16,
#      x torch._scaled_mm
#   5. one draft round (k = 3, batch 1-16) of the full-size Kimi-K2.5 Llama head, beside the bytes model
# vLLM's CUDA paths are not run (no vLLM on the machine); the summary says so.
#
#   OUT=/path/to/out bash scripts/gpu_check.sh          (python3 with CUDA torch + triton; 7 minutes at most)
#   GPU_CHECK_DRY=1 PYTHON=.venv/bin/python OUT=/tmp/x bash scripts/gpu_check.sh   (CPU, tiny shapes: the plumbing)
#
# OUT receives summary.md (the tables for docs/gpu.md), summary.json, sweep.md and sweep.json (the launch
# sweep), choice.md and choice.json (its choices timed as bench kernels times) and logs.tar.gz (every raw output),
# rewritten after each step, so a run cut short still leaves what it finished. Timeouts (seconds) can be changed:
# TIMEOUT_TESTS, TIMEOUT_CONVERT, TIMEOUT_COMPILE, TIMEOUT_SWEEP, TIMEOUT_CHOICE,
# TIMEOUT_BENCH (each M), TIMEOUT_DRAFT. GPU_CHECK_SWEEP=0 leaves out the launch sweep (compile, sweep, choice).
set -uo pipefail
OUT=${OUT:-gpu-check}
PY=${PYTHON:-python3}
DRY=${GPU_CHECK_DRY:-0}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export EAGLEQUANT_KERNEL_ERRORS=$WORK/kernel-errors.jsonl
PYTEST=("$PY" -m pytest -v -rfE --tb=line -p no:cacheprovider)

finish() {
    tar -czf "$OUT/logs.tar.gz" -C "$WORK" . 2>/dev/null || echo "   (could not tar the logs)"
    "$PY" scripts/gpu_summary.py "$WORK" "$OUT" || echo "   (the summary failed; the logs are in logs.tar.gz)"
}

# run_step NAME TIMEOUT LOG COMMAND...: the command's output to WORK/LOG, its status and time to steps.tsv
run_step() {
    local name=$1 limit=$2 log=$3 began=$SECONDS rc
    shift 3
    echo "== $(date -u +%T) $name (timeout ${limit} s)"
    timeout -k 10 "$limit" "$@" > "$WORK/$log" 2>&1
    rc=$?
    printf '%s\t%d\t%d\t%d\n' "$name" "$rc" $((SECONDS - began)) "$limit" >> "$WORK/steps.tsv"
    tail -n 3 "$WORK/$log" | cut -c1-200
    echo "== $name: exit $rc after $((SECONDS - began)) s"
    finish
}

echo "== $(date -u +%T) environment (dry run: $DRY; raw outputs in $WORK)"
{
    timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.memory --format=csv,noheader \
        || echo "no nvidia-smi"
    echo "cores: $(nproc)"
    timeout 60 "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
try:
    import triton; print("triton", triton.__version__)
except ImportError:
    print("triton: not installed")'
    echo "git: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
} > "$WORK/environment.txt" 2>&1
cat "$WORK/environment.txt"

if [ "$DRY" = 1 ]; then
    DEVICE=(--device cpu --tiny)
    DRAFT=(--device cpu --scale 64 --repeats 3)
else
    DEVICE=()
    DRAFT=(--device cuda)
fi

run_step "kernels vs float64 and torch" "${TIMEOUT_TESTS:-60}" kernel-tests.log \
    "${PYTEST[@]}" tests/kernels/test_gpu_kernels.py tests/kernels/test_kernels.py
run_step "convert --device cuda byte identity" "${TIMEOUT_CONVERT:-55}" convert-tests.log \
    "${PYTEST[@]}" tests/kernels/test_device.py
if [ "${GPU_CHECK_SWEEP:-1}" = 1 ]; then  # GPU_CHECK_SWEEP=0: the defaults alone, timed (a re-run after a sweep)
    if [ "$DRY" != 1 ]; then  # 8 processes fill Triton's cache, so that the timing process compiles nothing
        run_step "compile the sweep's configurations" "${TIMEOUT_COMPILE:-45}" sweep-compile.log \
            bash -c 'for part in 0 1 2 3 4 5 6 7; do "$0" scripts/gpu_kernel_sweep.py --compile-only $part/8 & done; wait' \
            "$PY"
    fi
    if [ "$DRY" = 1 ]; then
        SWEEP=(env TRITON_INTERPRET=1 "$PY" scripts/gpu_kernel_sweep.py --device cpu --tiny --kernel int4-asym-w4a16)
    else
        SWEEP=("$PY" scripts/gpu_kernel_sweep.py --device cuda)
    fi
    run_step "launch sweep" "${TIMEOUT_SWEEP:-110}" sweep.log \
        "${SWEEP[@]}" --json "$WORK/sweep.json" --md "$WORK/sweep.md"
    cp "$WORK/sweep.md" "$WORK/sweep.json" "$OUT/" 2>/dev/null
    run_step "the sweep's choices timed as bench kernels times" "${TIMEOUT_CHOICE:-45}" choice.log \
        "${SWEEP[@]}" --choose "$WORK/sweep.json" --json "$WORK/choice.json" --md "$WORK/choice.md"
    cp "$WORK/choice.md" "$WORK/choice.json" "$OUT/" 2>/dev/null
fi
for m in 1 4 16; do
    run_step "bench kernels --m $m" "${TIMEOUT_BENCH:-20}" "bench-kernels-m$m.log" \
        bash -c '"$0" -m eaglequant bench kernels --m "$1" "${@:3}" --json > "$2"' \
        "$PY" "$m" "$WORK/bench-kernels-m$m.json" ${DEVICE[@]+"${DEVICE[@]}"}
done
run_step "draft round" "${TIMEOUT_DRAFT:-35}" draft-round.log \
    "$PY" scripts/gpu_draft_round.py "${DRAFT[@]}" --json "$WORK/draft-round.json"
echo "== $(date -u +%T) done: $OUT/summary.md, $OUT/summary.json, $OUT/logs.tar.gz"
cat "$OUT/summary.md"
