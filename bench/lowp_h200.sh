#!/bin/bash
# --precision bf16 / fp16 on the H200: rosenna's 16-bit tensor-core chain against PyTorch eager and
# torch.compile (bf16, fp16), mlp128 and a 5-64-64-3 SiLU MLP, in one process (bench/lowp_h200.py).
#
#   bash bench/lowp_h200.sh prepare   # HERE: generate every variant into build/lowp (needs rosenna:
#                                     #   PYTHON=python for a venv)
#   bash bench/lowp_h200.sh run       # THERE: carry build/lowp and the file $ROSENNA_GPU_ENV names;
#                                     #   builds with nvcc (ARCH, default -arch=sm_90), times, checks,
#                                     #   prints the Markdown table; the output also lands in
#                                     #   $RESULTS/lowp.md (default results/h200/<date>)
set -eu
cmd=${1:-help}
PYTHON=${PYTHON:-python3}
case $cmd in
prepare)
    $PYTHON bench/lowp_h200.py prepare --out "${OUT:-build/lowp}"
    ;;
run)
    [ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
    RESULTS=${RESULTS:-results/h200/$(date -u +%F)}
    mkdir -p "$RESULTS"
    { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } \
        > "$RESULTS/lowp-machine.txt" 2>&1 || true
    $PYTHON bench/lowp_h200.py run --out "${OUT:-build/lowp}" 2>&1 | tee "$RESULTS/lowp.md"
    exit "${PIPESTATUS[0]}"
    ;;
*)
    sed -n '2,12p' "$0"
    exit 2
    ;;
esac
