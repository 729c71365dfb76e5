#!/bin/bash
# Build integration on the GPU machine: a CUDA program built by CMake against a generated model's
# <name>Config.cmake (its own kernel calling the __device__ mdl_infer, then mdl_infer_batch), and a
# clang OpenMP-offload program calling mdl_infer in a target loop. Both run there and are compared
# with onnxruntime's outputs computed here.
#
#   bash bench/build_integration.sh prepare   # HERE: generate build/integration/gen (gemm_big, sm_90,
#                                             #   the gcc profile) and expected.txt; carry build
#   bash bench/build_integration.sh run       # THERE: needs cmake (CMAKE=path/to/cmake if not on PATH),
#                                             #   nvcc; $ROSENNA_GPU_ENV gives clang offload. Logs in
#                                             #   $RESULTS/build-integration/
#   bash bench/build_integration.sh host      # HERE: the same builds, the CUDA one compiled and linked
#                                             #   only, the OpenMP one with gcc on the host (the suite runs it)
set -eu
cmd=${1:-help}
DIR=${DIR:-build/integration}
RESULTS=${RESULTS:-results/h200/$(date -u +%F)}
OUT=$RESULTS/build-integration
SRC=bench/build_integration
CMAKE=${CMAKE:-cmake}

compare() {  # compare FILE COLUMN: each value against expected.txt, |got-want| <= 1e-5 + 1e-4*|want|
    awk -v col="$2" 'NR == FNR { want[FNR] = $1; n = FNR; next }
        { got = $col; w = want[FNR]; d = got - w; if (d < 0) d = -d; a = w < 0 ? -w : w
          if (d > 1e-5 + 1e-4 * a) bad++; if (d > worst) worst = d; m++ }
        END { printf "%d values, max abs err %.3g: %s\n", m, worst, (m == n && !bad) ? "PASS" : "FAIL"
              exit !(m == n && !bad) }' "$DIR/expected.txt" "$1"
}

case "$cmd" in
prepare)
    mkdir -p "$DIR"
    python3 -m rosenna zoo gemm_big -o "$DIR/gemm_big.onnx" >/dev/null
    python3 -m rosenna generate "$DIR/gemm_big.onnx" --name mdl --out "$DIR/gen" --gpu-arch 90 >/dev/null
    python3 - "$DIR" <<'PY'
import sys
import numpy as np
import onnxruntime as ort
d = sys.argv[1]
s = ort.InferenceSession(f"{d}/gemm_big.onnx", providers=["CPUExecutionProvider"])
nx = int(np.prod(s.get_inputs()[0].shape[1:]))
x = (((np.arange(64 * nx) % 17) - 8) / 8.0).astype(np.float32).reshape(64, nx)
y = s.run(None, {s.get_inputs()[0].name: x})[0].reshape(-1)
np.savetxt(f"{d}/expected.txt", y, fmt="%.9g")
PY
    echo "carry: build (build/integration) and the file ROSENNA_GPU_ENV names"
    ;;
run|host)
    mkdir -p "$OUT"
    status=0
    if [ "$cmd" = run ]; then
        [ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
        command -v "$CMAKE" >/dev/null || { echo "no cmake on this machine: carry one, run with CMAKE=..."; exit 2; }
    fi
    "$CMAKE" -S "$SRC" -B "$DIR/cmake" -DGEN="$(cd "$DIR" && pwd)/gen" -DCMAKE_C_COMPILER=gcc > "$OUT/cmake-configure.log" 2>&1 \
        && "$CMAKE" --build "$DIR/cmake" --verbose > "$OUT/cmake-build.log" 2>&1 \
        || { echo "cmake build FAILED (logs in $OUT)"; exit 1; }
    grep -E "nvcc|gcc" "$OUT/cmake-build.log" | grep -E " -c |-dlink" > "$OUT/cmake-compile-lines.txt" || true
    if [ "$cmd" = run ]; then
        "$DIR/cmake/cmake_cuda" > "$OUT/cmake_cuda.txt" || status=1
        echo -n "cmake CUDA, user kernel: " && compare "$OUT/cmake_cuda.txt" 1 || status=1
        echo -n "cmake CUDA, mdl_infer_batch: " && compare "$OUT/cmake_cuda.txt" 2 || status=1
        cc=$ROSENNA_CLANG; flags="-fopenmp $CLANG_OFFLOAD_FLAGS"
    else
        echo "cmake CUDA: compiled and linked (not run here)"
        cc=gcc; flags="-fopenmp"
    fi
    # shellcheck disable=SC2086
    $cc -O2 $flags -I "$DIR/gen" "$SRC/offload.c" "$DIR/gen/mdl.c" -lm -o "$DIR/offload" 2> "$OUT/offload-build.log" \
        || { echo "offload build FAILED"; cat "$OUT/offload-build.log"; exit 1; }
    echo "$cc -O2 $flags -I $DIR/gen $SRC/offload.c $DIR/gen/mdl.c -lm" > "$OUT/offload-compile-line.txt"
    LD_LIBRARY_PATH=${CLANG_OMP_LIB:-}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$DIR/offload" > "$OUT/offload.out" || status=1
    head -1 "$OUT/offload.out"
    tail -n +2 "$OUT/offload.out" > "$OUT/offload.txt"
    echo -n "OpenMP target loop ($cc): " && compare "$OUT/offload.txt" 1 || status=1
    if [ "$cmd" = run ] && ! grep -q "ON_DEVICE 1" "$OUT/offload.out"; then echo "offload: not on the device"; status=1; fi
    exit $status
    ;;
*)
    sed -n '2,15p' "$0" | grep '^#'
    ;;
esac
