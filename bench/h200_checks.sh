#!/bin/bash
# One device call on the H200 (carry .gpu and build/probe): the OpenACC weights-update probe, then
# the gate with GCC 12 nvptx (OpenMP + OpenACC, C and Fortran) and clang-16 (OpenMP, C) on the
# point models, and with the CUDA backend's <name>_infer_one on a whole-field conv net and an LSTM
# cell. Everything lands in $OUT/checks.tgz; the summary is on stdout.
#   make a conv net and LSTM here first:  python -c "import sys; sys.path.insert(0, 'tests'); import op_models;
#     op_models.convnet('build/probe/convnet.onnx'); op_models.lstm_cell('build/probe/lstm_cell.onnx')"
set -u
OUT=${OUT:-h200-checks}
W=$(mktemp -d)
mkdir -p "$OUT"
echo "== OpenACC update probe"
bash bench/probe/acc_declare.sh 2>&1 | tee "$W/acc_probe.txt"
echo "== gate: gemm_big (GCC 12 OpenMP + OpenACC, clang-16 OpenMP)"
OUT=$W/gates MODELS=gemm_big CLANG_MODELS="gemm_big gemm_small" timeout 300 bash bench/gate_h200.sh \
    > "$W/gate_point.txt" 2>&1
grep -E "^(c-|fortran-|batch|cuda-user)|PASS:|FAIL:" "$W/gate_point.txt"
echo "== gate: whole-field conv net (infer_one) and LSTM cell"
OUT=$W/gates MODELS=build/probe/convnet.onnx CLANG_MODELS= POINTS=64 timeout 120 bash bench/gate_h200.sh \
    > "$W/gate_convnet.txt" 2>&1
OUT=$W/gates MODELS=build/probe/lstm_cell.onnx CLANG_MODELS= POINTS=100000 timeout 150 bash bench/gate_h200.sh \
    > "$W/gate_lstm.txt" 2>&1
grep -h -E "^(c-|fortran-|batch|cuda-user)|PASS:|FAIL:" "$W/gate_convnet.txt" "$W/gate_lstm.txt"
tar czf "$OUT/checks.tgz" -C "$W" .
