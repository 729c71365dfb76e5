#!/bin/bash
# One device call on the H200: the generated kernels (bench/gen_bench.sh run), PyTorch eager in the
# same call, and rosenna gpu-gate for the three benchmark models (GCC 12 nvptx OpenMP/OpenACC and
# clang-16 OpenMP per-point harnesses, the CUDA backend's batch and user-kernel harnesses), a
# whole-field conv net (infer_one) and an LSTM cell. Carry .gpu, build/gen (bash bench/gen_bench.sh
# build) and build/probe (bench/h200_checks.sh says how). Everything lands in $OUT/final.tgz.
set -u
OUT=${OUT:-h200-final}
W=$(mktemp -d)
mkdir -p "$OUT"
pack() { tar czf "$OUT/final.tgz" -C "$W" .; }  # after every stage: a cut-off call still returns the rest
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader | tee "$W/machine.txt"
echo "== generated kernels"
timeout 100 bash bench/gen_bench.sh run 2>&1 | tee "$W/gen_bench.txt"
pack
echo "== PyTorch eager fp32, same call"
timeout 60 python3 bench/torch_baseline.py --csv "$W/torch.csv" 2>&1 | tee "$W/torch.txt"
pack
echo "== gate"
OUT=$W/gates MODELS="gemm_big mlp128 gemm_small" CLANG_MODELS="gemm_big mlp128 gemm_small" timeout 280 \
    bash bench/gate_h200.sh > "$W/gate_point.txt" 2>&1
pack
OUT=$W/gates MODELS=build/probe/convnet.onnx CLANG_MODELS=build/probe/convnet.onnx POINTS=64 timeout 60 \
    bash bench/gate_h200.sh > "$W/gate_convnet.txt" 2>&1
pack
OUT=$W/gates MODELS=build/probe/lstm_cell.onnx CLANG_MODELS=build/probe/lstm_cell.onnx POINTS=100000 timeout 80 \
    bash bench/gate_h200.sh > "$W/gate_lstm.txt" 2>&1
grep -h -E "^(c-|fortran-|batch|cuda-user)|PASS:|FAIL:" "$W"/gate_*.txt
pack
