#!/bin/bash
# rosenna gpu-gate on the H200 (one device call): backend cuda (nvcc -arch=sm_90, the machine's gcc as
# host compiler of the native-kernel archive) with the per-point OpenMP and OpenACC harnesses built
# by GCC 12 nvptx (C and Fortran) and the OpenMP one by clang-16 (C). Needs .gpu
# (../shared/gpu/README.md) carried along. The machine's python3 lacks archspec/jsonschema
# (toolchain profiles), so the command is run through its module rather than `python3 -m rosenna`.
#   MODELS        built-in names or .onnx paths for the GCC gate (default: gemm_big mlp128 gemm_small)
#   CLANG_MODELS  the same for the clang-16 gate (default: gemm_big)
#   POINTS        points (samples, for a whole-field model) per pass (default 1000000)
# Reports: $OUT/<machine>-<backend>-<compiler>-<model>/gate-report.{md,json}.
set -u
OUT=${OUT:-gate-out}
source .gpu/setup.sh >/dev/null
export PYTHONPATH=$PWD
gate() {
  python3 -c 'import argparse, sys
from rosenna.commands import gpu_gate
p = argparse.ArgumentParser(); s = p.add_subparsers(dest="command"); gpu_gate.register(s)
a = p.parse_args(["gpu-gate"] + sys.argv[1:]); sys.exit(a.func(a))' "$@"
}
keep() { mkdir -p "$OUT/$1"; cp /tmp/gates/$1/gate-report.md /tmp/gates/$1/gate-report.json "$OUT/$1/" 2>/dev/null; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
for m in ${MODELS-gemm_big mlp128 gemm_small}; do
  r=h200-cuda-gcc12nvptx-$(basename "$m" .onnx)
  gate --model "$m" --points "${POINTS:-1000000}" --cc $ROSENNA_GCC --fc $ROSENNA_GFORTRAN \
       --flags="-fopenmp $GCC_OFFLOAD_FLAGS" --acc-flags="-fopenacc $GCC_OFFLOAD_FLAGS" \
       --backend cuda --devflags="-O3 -arch=sm_90" --out /tmp/gates/$r --label "GCC 12 nvptx + nvcc 13" || status=1
  keep $r
done
for m in ${CLANG_MODELS-gemm_big}; do
  r=h200-cuda-clang16-$(basename "$m" .onnx)
  LD_LIBRARY_PATH=$CLANG_OMP_LIB gate --model "$m" --points "${POINTS:-1000000}" --cc $ROSENNA_CLANG --fc none \
       --flags="-fopenmp $CLANG_OFFLOAD_FLAGS" --backend cuda --devflags="-O3 -arch=sm_90" --out /tmp/gates/$r \
       --label "clang-16 OpenMP offload + nvcc 13" || status=1
  keep $r
done
exit $status
