#!/bin/bash
# rosenna gpu-gate on the H200 (one device call): backend cuda (nvcc -arch=sm_90, the machine's gcc as
# host compiler of the native-kernel archive) with the per-point OpenMP and OpenACC harnesses built
# by GCC 12 nvptx (C and Fortran) and the OpenMP one by clang-16 (C). The reports of 2026-12-02 in
# gate-reports/ predate the OpenACC harnesses. Needs .gpu (../shared/gpu/README.md) carried along.
# The machine's python3 lacks archspec/jsonschema (toolchain profiles), so the command is run
# through its module rather than `python3 -m rosenna`. Reports: $OUT/<machine>-<backend>-<compiler>-<model>/.
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
for m in ${MODELS:-gemm_big mlp128 gemm_small}; do
  r=h200-cuda-gcc12nvptx-$m
  gate --model $m --cc $ROSENNA_GCC --fc $ROSENNA_GFORTRAN --flags="-fopenmp $GCC_OFFLOAD_FLAGS" \
       --acc-flags="-fopenacc $GCC_OFFLOAD_FLAGS" \
       --backend cuda --devflags="-O3 -arch=sm_90" --out /tmp/gates/$r --label "GCC 12 nvptx + nvcc 13"
  keep $r
done
r=h200-cuda-clang16-gemm_big
LD_LIBRARY_PATH=$CLANG_OMP_LIB gate --model gemm_big --cc $ROSENNA_CLANG --fc none \
     --flags="-fopenmp $CLANG_OFFLOAD_FLAGS" --backend cuda --devflags="-O3 -arch=sm_90" --out /tmp/gates/$r \
     --label "clang-16 OpenMP offload + nvcc 13"
keep $r
