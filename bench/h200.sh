#!/bin/bash
# Every kind of H200 run, one subcommand each. Build here first, carry what the subcommand names,
# run it there from the repository root; its results land in results/h200/<date>/ (RESULTS=DIR
# overrides), which results/README.md indexes. The lead runs these; nothing else touches the GPU.
#
#   bash bench/h200.sh prepare [study]  # HERE: build what the runs below carry (needs nvcc, and rosenna:
#                                       #   ROSENNA="python -m rosenna" PYTHON=python for a venv): build/gen
#                                       #   and build/probe; with `study`, the design study's build/bench
#   bash bench/h200.sh confirm          # THERE: one gate + bench run: the generated kernels against
#                                       #   the per-point routine and PyTorch eager, then the gate on
#                                       #   gemm_big, mlp128, gemm_small (GCC 12 nvptx and clang-16) and
#                                       #   on a whole-field conv net and an LSTM cell (under 10 minutes).
#                                       #   Carry .gpu, build/gen, build/probe.
#   bash bench/h200.sh kernels          # THERE: only the generated kernels + PyTorch (carry build/gen)
#   bash bench/h200.sh gate [MODEL...]  # THERE: only the gate (carry .gpu, build/probe for .onnx models);
#                                       #   MODELS/CLANG_MODELS/POINTS as below
#   bash bench/h200.sh table-prepare    # HERE: build/table: a slim copy of the frontier build (binaries,
#                                       #   weights, manifest with the kernel kinds; ~27 MB) and the probe models
#   bash bench/h200.sh table            # THERE: the frontier, the gate on gemm_small/gemm_big/mlp128
#                                       #   (GCC 12 + clang-16), the conv net and the LSTM cell, then one
#                                       #   table of every kernel kind and harness (bench/h200_table.py) in
#                                       #   $RESULTS/table.md (carry .gpu build/whl build/table build/probe;
#                                       #   ~8 minutes; PYTHONPATH=$PWD/build/whl)
#   bash bench/h200.sh whole-field      # THERE: only the gate on the conv net and the LSTM cell (carry .gpu, build/probe)
#   bash bench/h200.sh fortran-field    # THERE: the Fortran module's whole-field batch, OpenACC and OpenMP (GCC 12
#                                       #   nvptx): the omp-backend gate (rows batch-fortran-acc, batch-fortran-omp)
#                                       #   on the conv net and the poisson_guess U-Net at 256 samples, then the same
#                                       #   embedded harnesses re-timed at 1 and 16 (carry .gpu, build/probe; ~4 min)
#   bash bench/h200.sh omp-point        # THERE: clang-16 `omp target` per-point loops, body vs loops, LTO, launch
#                                       #   clauses (bench/omp_point.sh; build here first, carry build/omp_point)
#   bash bench/h200.sh checks           # THERE: the OpenACC declare probe, then the gate (carry .gpu, build/probe)
#   bash bench/h200.sh study [LABELS]   # THERE: the design study (bench/study): FMA/copy ceilings, every
#                                       #   hand-written variant (LABELS: a comma list filters them, as
#                                       #   run 5 did), the __constant__ sweep, SASS counts (carry build/bench: prepare study)
#
# Gate variables: MODELS (GCC 12 nvptx gate; built-in names or .onnx paths, default gemm_big mlp128
# gemm_small), CLANG_MODELS (clang-16 gate, default gemm_big), POINTS (per pass, default 1000000).
# The machine's python3 lacks archspec/jsonschema (toolchain profiles), so the gate is run through its
# module with PYTHONPATH=. rather than `python3 -m rosenna`, and every flag a profile would give is
# named (--cflags, --fflags, --devcc, --devflags: the gcc profile's optimize flags minus {archspec}).
set -u
cmd=${1:-help}; shift || true
RESULTS=${RESULTS:-results/h200/$(date -u +%F)}

machine() {
    { date -u; nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader; nvcc --version | tail -1; } \
        > "$RESULTS/machine.txt" 2>&1
    cat "$RESULTS/machine.txt"
}

gate() {  # gate [args of rosenna gpu-gate]
    PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 -c 'import argparse, sys
from rosenna.commands import gpu_gate
p = argparse.ArgumentParser(); s = p.add_subparsers(dest="command"); gpu_gate.register(s)
a = p.parse_args(["gpu-gate"] + sys.argv[1:]); sys.exit(a.func(a))' "$@"
}

run_gate() {  # the GCC 12 nvptx and clang-16 gates over MODELS / CLANG_MODELS; reports in $RESULTS/gate/
    source .gpu/setup.sh >/dev/null
    local status=0 m r
    for m in ${MODELS-gemm_big mlp128 gemm_small}; do
        r=cuda-gcc12nvptx-$(basename "$m" .onnx)
        gate --model "$m" --points "${POINTS:-1000000}" --cc $ROSENNA_GCC --fc $ROSENNA_GFORTRAN \
             --flags="-fopenmp $GCC_OFFLOAD_FLAGS" --acc-flags="-fopenacc $GCC_OFFLOAD_FLAGS" \
             --backend cuda --devcc nvcc --devflags="-O3 -arch=sm_90" --cflags=-O3 --fflags=-O3 \
             --out "$RESULTS/gate/$r" --label "GCC 12 nvptx + nvcc 13" || status=1
    done
    for m in ${CLANG_MODELS-gemm_big}; do
        r=cuda-clang16-$(basename "$m" .onnx)
        LD_LIBRARY_PATH=$CLANG_OMP_LIB gate --model "$m" --points "${POINTS:-1000000}" --cc $ROSENNA_CLANG --fc none \
             --flags="-fopenmp $CLANG_OFFLOAD_FLAGS" --backend cuda --devcc nvcc --devflags="-O3 -arch=sm_90" \
             --cflags=-O3 --fflags=-O3 \
             --out "$RESULTS/gate/$r" --label "clang-16 OpenMP offload + nvcc 13" || status=1
    done
    return $status
}

kernels() {
    bash bench/gen_bench.sh run 2>&1 | tee "$RESULTS/generated-kernels.txt"
    python3 bench/torch_baseline.py --csv "$RESULTS/pytorch-eager.csv" 2>&1 | tee "$RESULTS/pytorch-eager.txt"
}

whole_field_gates() {  # the conv net (infer_one) and the LSTM cell that `prepare` wrote
    MODELS=build/probe/convnet.onnx CLANG_MODELS=build/probe/convnet.onnx POINTS=64 run_gate
    MODELS=build/probe/lstm_cell.onnx CLANG_MODELS=build/probe/lstm_cell.onnx POINTS=100000 run_gate
}

fortran_field() {  # the Fortran whole-field batch rows at 256 samples, then 1 and 16 (us per sample)
    source .gpu/setup.sh >/dev/null
    local status=0 m r exe n
    for m in build/probe/convnet.onnx examples/surrogates/poisson_guess/pguess.onnx; do
        r=$RESULTS/gate/fortran-field-$(basename "$m" .onnx)
        gate --model "$m" --points 256 --cc $ROSENNA_GCC --fc $ROSENNA_GFORTRAN --backend omp \
             --flags="-fopenmp $GCC_OFFLOAD_FLAGS" --acc-flags="-fopenacc $GCC_OFFLOAD_FLAGS" --cflags=-O3 --fflags=-O3 \
             --out "$r" --label "GCC 12 nvptx, Fortran whole-field batch" || status=1
        for exe in "$r"/embedded/h3c_batch_fortran_omp "$r"/embedded/h3d_batch_fortran_acc; do
            [ -x "$exe" ] || continue
            for n in 1 16 256; do
                ACC_DEVICE_TYPE=nvidia "$exe" $n 31 0 "$r/x.bin" "$exe.y$n" | awk -v m="$(basename "$m" .onnx)" \
                    -v h="$(basename "$exe")" -v n=$n '/^NS_PER_POINT/ {printf "%s %s n=%d: %.1f us per sample\n", m, h, n, $2 / 1000}'
            done
        done
    done
    return $status
}

case "$cmd" in
prepare)
    if [ "${1:-}" = study ]; then make -C bench/study; echo "carry: build/bench"; exit; fi
    bash bench/gen_bench.sh build
    mkdir -p build/probe
    ${PYTHON:-python3} -c "import sys; sys.path.insert(0, 'tests'); import op_models
op_models.convnet('build/probe/convnet.onnx'); op_models.lstm_cell('build/probe/lstm_cell.onnx')"
    echo "carry: .gpu build/gen build/probe"
    ;;
confirm)
    export RESULTS; mkdir -p "$RESULTS"
    status=0
    echo "== generated kernels and PyTorch eager"; timeout 160 bash "$0" kernels || status=1
    echo "== gate"; timeout 280 bash "$0" gate > "$RESULTS/gate.txt" 2>&1 || status=1
    timeout 200 bash "$0" whole-field >> "$RESULTS/gate.txt" 2>&1 || status=1  # the conv net's Fortran rows: +4 builds
    grep -h -E "^(c-|fortran-|batch|cuda-user|cuda-warp)|PASS:|FAIL:" "$RESULTS/gate.txt"
    exit $status
    ;;
whole-field)
    mkdir -p "$RESULTS"; whole_field_gates
    ;;
fortran-field)
    mkdir -p "$RESULTS"; machine; fortran_field 2>&1 | tee "$RESULTS/fortran-field.txt"
    ;;
table-prepare)
    [ -f build/frontier/manifest.json ] || ${PYTHON:-python3} bench/frontier.py build
    rm -rf build/table; mkdir -p build/table/frontier build/probe
    cp build/frontier/manifest.json build/table/frontier/
    for d in build/frontier/*/; do
        n=$(basename "$d"); mkdir -p build/table/frontier/$n
        cp "$d/frontier" "$d/weights.bin" build/table/frontier/$n/
    done
    ${PYTHON:-python3} -c "import sys; sys.path.insert(0, 'tests'); import op_models
op_models.convnet('build/probe/convnet.onnx'); op_models.lstm_cell('build/probe/lstm_cell.onnx')"
    du -sh build/table; echo "carry: .gpu build/whl build/table build/probe"
    ;;
table)
    export RESULTS; mkdir -p "$RESULTS"; machine
    FRONTIER_OUT=build/table/frontier timeout 240 python3 bench/frontier.py run --budget 150 --field-reps 41 \
        > "$RESULTS/frontier.txt" 2>&1
    tail -n 20 "$RESULTS/frontier.txt"
    { MODELS="${MODELS-gemm_small gemm_big mlp128}" CLANG_MODELS="${CLANG_MODELS-gemm_big mlp128}" run_gate
      whole_field_gates; } > "$RESULTS/gate.txt" 2>&1
    grep -h -E "PASS:|FAIL:" "$RESULTS/gate.txt"
    python3 bench/h200_table.py "$RESULTS" --build build/table/frontier | tee "$RESULTS/table.md"
    ;;
omp-point)
    mkdir -p "$RESULTS"; bash bench/omp_point.sh run 2>&1 | tee "$RESULTS/omp-point.txt"
    ;;
kernels)
    mkdir -p "$RESULTS"; machine; kernels
    ;;
gate)
    mkdir -p "$RESULTS"; machine
    [ $# -gt 0 ] && MODELS="$*"
    run_gate
    ;;
checks)
    mkdir -p "$RESULTS"; machine
    bash bench/study/probe/acc_declare.sh 2>&1 | tee "$RESULTS/openacc-declare-probe.txt"
    { MODELS=gemm_big CLANG_MODELS="gemm_big gemm_small" run_gate; whole_field_gates; } > "$RESULTS/gate.txt" 2>&1
    grep -h -E "^(c-|fortran-|batch|cuda-user|cuda-warp)|PASS:|FAIL:" "$RESULTS/gate.txt"
    ;;
study)
    mkdir -p "$RESULTS"; machine
    B=build/bench
    $B/mlp_bench --probe >/dev/null 2>&1 || { echo "prebuilt mlp_bench does not run here: rebuilding"; make -C bench/study >/dev/null; }
    CSV="$RESULTS/kernel-study.csv"
    echo "model,variant,weights,weight_bytes,n,ns_per_point,min,max,tflops,err,status" > "$CSV"
    $B/mlp_bench --peak ${1:+--only "$1"} --csv "$CSV" 2>&1 | tee "$RESULTS/kernel-study.txt"
    [ -n "${1:-}" ] || for h in 16 24 28 32; do [ -x $B/sweep_$h ] && $B/sweep_$h --csv "$CSV"; done 2>&1 | tee "$RESULTS/constant-sweep.txt"
    grep -hE "Compiling entry|Used|spill" $B/*.ptxas > "$RESULTS/kernel-study-ptxas.txt" 2>/dev/null
    command -v cuobjdump >/dev/null && bash bench/study/sass_counts.sh $B/mlp_bench > "$RESULTS/kernel-study-sass-counts.txt" 2>&1
    ;;
*)
    sed -n '2,/^set -u/p' "$0" | sed '$d'
    [ "$cmd" = help ]
    ;;
esac
