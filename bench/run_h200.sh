#!/bin/bash
# One device call: ceilings, every kernel variant, the __constant__ sweep, PyTorch, SASS counts.
# Binaries are built beforehand (make -C bench; carry build/bench), rebuilt here if they fail to start.
#   bash bench/run_h200.sh            (writes under $OUT, default ./bench-out)
set -u
OUT=${OUT:-bench-out}; B=build/bench; mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv; nvcc --version | tail -1; } | tee "$OUT/machine.txt"
if ! $B/mlp_bench --probe >/dev/null 2>&1; then
  echo "prebuilt binaries do not run here: rebuilding"; make -C bench -j16 BUILD=../$B >/dev/null
fi
CSV="$OUT/results.csv"; echo "model,variant,weights,weight_bytes,n,ns_per_point,min,max,tflops,err,status" > "$CSV"
$B/mlp_bench --peak --csv "$CSV" 2>&1 | tee "$OUT/mlp_bench.txt"
: echo "== FAST_ACT (__expf, __frcp_rn sigmoid)" | tee -a "$OUT/mlp_bench.txt"
: $B/mlp_bench_fastact --csv "$OUT/fastact.csv" 2>&1 | grep gemm_big | tee -a "$OUT/mlp_bench.txt"
for h in ${SWEEP:-16 24 28 32}; do [ -x $B/sweep_$h ] && $B/sweep_$h --csv "$CSV"; done 2>&1 | tee "$OUT/sweep.txt"
python3 bench/torch_baseline.py --csv "$CSV" 2>&1 | tee "$OUT/torch.txt"
for f in $B/mlp_bench $B/sweep_16 $B/sweep_64; do
  cuobjdump -sass $f | awk -v F=$(basename $f) '/Function :/{fn=$3} /FFMA/{ffma[fn]++} /LDG/{ldg[fn]++} /LDC/{ldc[fn]++} /LDS/{lds[fn]++} /c\[0x3\]/{cb[fn]++} /^ +\/\*[0-9a-f]+\*\//{ins[fn]++}
    END{for(k in ins) printf "%s %-60s instr %6d FFMA %6d LDG %5d LDS %5d LDC %5d c[0x3]-operands %5d\n", F, k, ins[k], ffma[k], ldg[k], lds[k], ldc[k], cb[k]}'
done | sort | tee "$OUT/sass_counts.txt"
cuobjdump -sass -fun '_Z13k_mlp128_tileILi8ELb1EEviPKfPfS1_' $B/mlp_bench | grep -E "LDS|LDG|FFMA" | head -40 > "$OUT/sass_tile_excerpt.txt"
# The generated kernels: bench/gen_bench.sh (build here, run there; carry build/gen).
[ -d build/gen ] && bash bench/gen_bench.sh run 2>&1 | tee "$OUT/generated.txt"
