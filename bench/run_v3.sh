#!/bin/bash
# Run 3, one device call (< 3 minutes): FMA/copy ceilings, the new mlp128 and gemm_big variants
# (cp.async-staged SIMT tile, 3xTF32/1xTF32 mma.sync, column-block loops) and the run-2 best of
# each model as baselines, at 1M and 16M points; ptxas and SASS counts of the same kernels.
# Binaries are built beforehand (make -C bench; carry build/bench), rebuilt here if they fail to start.
#   OUT=... bash bench/run_v3.sh            (writes under $OUT, default ./bench-out)
set -u
OUT=${OUT:-bench-out}; B=build/bench; mkdir -p "$OUT"
ONLY=${ONLY:-"tile1buf 64pt,point P=1 smemW,stream,mma,colblk"}
KERNELS='k_mlp128_stream|k_mlp128_mma|k_big_colblk|k_big_mma|k_mlp128_tileILi8ELb1|k_point_smemI7GemmBigLi1'
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; nvcc --version | tail -1; } | tee "$OUT/machine.txt"
if ! $B/mlp_bench --probe >/dev/null 2>&1; then
  echo "prebuilt mlp_bench does not run here: rebuilding" | tee -a "$OUT/machine.txt"
  make -C bench BUILD=../$B ../$B/mlp_bench >/dev/null
fi
CSV="$OUT/results.csv"; echo "model,variant,weights,weight_bytes,n,ns_per_point,min,max,tflops,err,status" > "$CSV"
timeout 150 $B/mlp_bench --peak --only "$ONLY" --csv "$CSV" 2>&1 | tee "$OUT/mlp_bench.txt"
grep -A3 -E "Compiling entry function '_Z[0-9]+($KERNELS)" $B/mlp_bench.ptxas | grep -E "entry|Used|spill" > "$OUT/ptxas.txt"
if command -v cuobjdump >/dev/null; then bash bench/sass_counts.sh $B/mlp_bench "$KERNELS" > "$OUT/sass_counts.txt" 2>&1; fi
