#!/bin/bash
# Every kind of H200 run, one subcommand each. Build here first, carry what the subcommand names,
# run it there from the repository root; its results land in results/h200/<date>/ (RESULTS=DIR
# overrides), which results/README.md indexes. Only these runs touch the GPU.
#
#   bash bench/h200.sh prepare [study]  # HERE: build what the runs below carry (needs nvcc, and rosenna:
#                                       #   ROSENNA="python -m rosenna" PYTHON=python for a venv): build/gen
#                                       #   and build/probe; with `study`, the design study's build/bench
#   bash bench/h200.sh confirm          # THERE: one gate + bench run: the generated kernels against
#                                       #   the per-point routine and PyTorch eager, then the gate on
#                                       #   gemm_big, mlp128, gemm_small (GCC 12 nvptx and clang-16) and
#                                       #   on a whole-field conv net and an LSTM cell (under 10 minutes).
#                                       #   Carry $ROSENNA_GPU_ENV's file, build/gen, build/probe.
#   bash bench/h200.sh kernels          # THERE: only the generated kernels + PyTorch (carry build/gen)
#   bash bench/h200.sh gate [MODEL...]  # THERE: only the gate (carry $ROSENNA_GPU_ENV's file, build/probe for .onnx models);
#                                       #   MODELS/CLANG_MODELS/POINTS as below
#   bash bench/h200.sh table-prepare    # HERE: build/table: a slim copy of the frontier build (binaries,
#                                       #   weights, manifest with the kernel kinds; ~27 MB) and the probe models
#   bash bench/h200.sh table            # THERE: the frontier, the gate (embedded weights) on gemm_small/
#                                       #   gemm_big/mlp128 (GCC 12 + clang-16), the conv net and the LSTM cell,
#                                       #   and one table of every kernel kind and harness (bench/h200_table.py)
#                                       #   in $RESULTS/table.md, rewritten after each stage; all within
#                                       #   TABLE_BUDGET seconds (default 525: the frontier gets a third, at
#                                       #   most 180 s; each gate run what is left; a run is cut at the budget,
#                                       #   and skipped with under GATE_MIN=30 s left). Carry $ROSENNA_GPU_ENV's file, build/whl
#                                       #   build/table (TABLE_BUILD) build/probe; PYTHONPATH=$PWD/build/whl
#   bash bench/h200.sh whole-field      # THERE: only the gate on the conv net and the LSTM cell (carry $ROSENNA_GPU_ENV's file, build/probe)
#   bash bench/h200.sh fortran-field    # THERE: the Fortran module's whole-field batch, OpenACC and OpenMP (GCC 12
#                                       #   nvptx): the omp-backend gate (rows batch-fortran-acc, batch-fortran-omp)
#                                       #   on the conv net and the poisson_guess U-Net at 256 samples, then the same
#                                       #   embedded harnesses re-timed at 1 and 16 (carry $ROSENNA_GPU_ENV's file, build/probe; ~4 min)
#   bash bench/h200.sh omp-point        # THERE: clang-16 `omp target` per-point loops, body vs loops, LTO, launch
#                                       #   clauses (bench/omp_point.sh; build here first, carry build/omp_point)
#   bash bench/h200.sh checks           # THERE: the OpenACC declare probe, then the gate (carry $ROSENNA_GPU_ENV's file, build/probe)
#   bash bench/h200.sh study [LABELS]   # THERE: the design study (bench/studies/design-mlp128): FMA/copy ceilings, every
#                                       #   hand-written variant (LABELS: a comma list filters them, as
#                                       #   the staged and tensor-core kernel study did), the __constant__ sweep, SASS counts (carry build/bench: prepare study)
#
# Gate variables: MODELS (GCC 12 nvptx gate; built-in names or .onnx paths, default gemm_big mlp128
# gemm_small), CLANG_MODELS (clang-16 gate, default gemm_big), POINTS (per pass, default 1000000),
# FIELD_GATES (whole-field, table: MODEL:POINTS ..., default the conv net at 64 and the LSTM cell at
# 100000), GATE_WEIGHTS (both, embedded or file-loaded; table: embedded). Each run builds in
# $GATE_WORK/<run> (default build/h200-gate) and its report is copied into $RESULTS/gate-reports.json
# and gate-reports.md (one file each: the device call brings back 8 files, 2 folders deep at most);
# $RESULTS/stages.txt has each stage's seconds.
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

#: `rosenna gpu-gate` through its module (the machine's python3 lacks the profiles' packages).
GATE_PY='import argparse, sys
from rosenna.commands import gpu_gate
p = argparse.ArgumentParser(); s = p.add_subparsers(dest="command"); gpu_gate.register(s)
a = p.parse_args(["gpu-gate"] + sys.argv[1:]); sys.exit(a.func(a))'
GATE_WORK=${GATE_WORK:-build/h200-gate}  # the gate's builds (large); each report is copied into $RESULTS
DEADLINE=${DEADLINE:-}                   # epoch seconds by which every gate run has ended (`table` sets it)
RESERVE=8                                # seconds kept after the last gate run for the table

gate_run() {  # gate_run RUN MODEL POINTS [gpu-gate args]: one gate into $GATE_WORK/RUN, cut at DEADLINE;
              # its report goes into $RESULTS/gate-reports.json (.md), a line into $RESULTS/stages.txt
    local run=$1 model=$2 points=$3 t0 limit=0 rc; shift 3
    t0=$(date +%s)
    if [ -n "$DEADLINE" ]; then
        limit=$((DEADLINE - RESERVE - t0))
        if [ $limit -lt "${GATE_MIN:-30}" ]; then
            echo "== gate $run: skipped, $limit s of the time budget left"
            echo "gate $run: skipped ($limit s left)" >> "$RESULTS/stages.txt"
            return 1
        fi
    fi
    rm -rf "${GATE_WORK:?}/$run"
    timeout -k 5 $limit env ${GATE_ENV:-} PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 -c "$GATE_PY" \
        --model "$model" --points "$points" --weights "${GATE_WEIGHTS:-both}" --out "$GATE_WORK/$run" "$@"
    rc=$?
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "== gate $run: stopped by the time budget after $(($(date +%s) - t0)) s"
    [ -f "$GATE_WORK/$run/gate-report.json" ] || echo "== gate $run: no report, exit status $rc (gate.txt says why)"
    python3 bench/h200_table.py "$RESULTS" --collect "$GATE_WORK/$run"
    echo "gate $run: $(($(date +%s) - t0)) s (limit $limit s; 0: none), exit $rc" >> "$RESULTS/stages.txt"
    [ -z "${TABLE_OUT:-}" ] || write_table
    return $rc
}

gate_gcc() {  # gate_gcc MODEL POINTS: GCC 12 nvptx (C, Fortran; OpenMP, OpenACC) + nvcc 13
    gate_run cuda-gcc12nvptx-"$(basename "$1" .onnx)" "$1" "$2" --cc "$ROSENNA_GCC" --fc "$ROSENNA_GFORTRAN" \
        --flags="-fopenmp $GCC_OFFLOAD_FLAGS" --acc-flags="-fopenacc $GCC_OFFLOAD_FLAGS" \
        --backend cuda --devcc nvcc --devflags="-O3 -arch=sm_90" --cflags=-O3 --fflags=-O3 --label "GCC 12 nvptx + nvcc 13"
}

gate_clang() {  # gate_clang MODEL POINTS: clang-16 OpenMP offload (C) + nvcc 13
    GATE_ENV="LD_LIBRARY_PATH=$CLANG_OMP_LIB" gate_run cuda-clang16-"$(basename "$1" .onnx)" "$1" "$2" \
        --cc "$ROSENNA_CLANG" --fc none --flags="-fopenmp $CLANG_OFFLOAD_FLAGS" --backend cuda --devcc nvcc \
        --devflags="-O3 -arch=sm_90" --cflags=-O3 --fflags=-O3 --label "clang-16 OpenMP offload + nvcc 13"
}

run_gate() {  # the GCC 12 nvptx and clang-16 gates over MODELS / CLANG_MODELS
    [ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
    local status=0 m
    for m in ${MODELS-gemm_big mlp128 gemm_small}; do gate_gcc "$m" "${POINTS:-1000000}" || status=1; done
    for m in ${CLANG_MODELS-gemm_big}; do gate_clang "$m" "${POINTS:-1000000}" || status=1; done
    return $status
}

write_table() {  # $RESULTS/table.md from what is there so far (replaced whole)
    python3 bench/h200_table.py "$RESULTS" --build "${TABLE_BUILD:-build/table}/frontier" --out "$RESULTS/table.md"
}

kernels() {
    bash bench/gen_bench.sh run 2>&1 | tee "$RESULTS/generated-kernels.txt"
    python3 bench/torch_baseline.py --csv "$RESULTS/pytorch-eager.csv" 2>&1 | tee "$RESULTS/pytorch-eager.txt"
}

whole_field_gates() {  # the conv net (infer_one) and the LSTM cell that `prepare` wrote; FIELD_GATES: MODEL:POINTS
    [ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
    local status=0 g
    for g in ${FIELD_GATES-build/probe/convnet.onnx:64 build/probe/lstm_cell.onnx:100000}; do
        gate_gcc "${g%:*}" "${g##*:}" || status=1
        gate_clang "${g%:*}" "${g##*:}" || status=1
    done
    return $status
}

fortran_field() {  # the Fortran whole-field batch rows at 256 samples, then 1 and 16 (us per sample)
    [ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
    local status=0 m r exe n
    for m in build/probe/convnet.onnx examples/surrogates/poisson_guess/pguess.onnx; do
        r=fortran-field-$(basename "$m" .onnx)
        gate_run "$r" "$m" 256 --cc "$ROSENNA_GCC" --fc "$ROSENNA_GFORTRAN" --backend omp \
             --flags="-fopenmp $GCC_OFFLOAD_FLAGS" --acc-flags="-fopenacc $GCC_OFFLOAD_FLAGS" --cflags=-O3 --fflags=-O3 \
             --label "GCC 12 nvptx, Fortran whole-field batch" || status=1
        r=$GATE_WORK/$r
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
    if [ "${1:-}" = study ]; then make -C bench/studies/design-mlp128; echo "carry: build/bench"; exit; fi
    bash bench/gen_bench.sh build
    mkdir -p build/probe
    ${PYTHON:-python3} -c "import sys; sys.path.insert(0, 'tests'); import op_models
op_models.convnet('build/probe/convnet.onnx'); op_models.lstm_cell('build/probe/lstm_cell.onnx')"
    echo "carry: build/gen build/probe (and the file ROSENNA_GPU_ENV names)"
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
    du -sh build/table; echo "carry: build/whl build/table build/probe (and the file ROSENNA_GPU_ENV names)"
    ;;
table)  # every stage cut within TABLE_BUDGET seconds; table.md rewritten after each
    export RESULTS; mkdir -p "$RESULTS"; rm -f "$RESULTS"/{stages.txt,gate.txt,gate-reports.json,gate-reports.md}
    start=$(date +%s); DEADLINE=$((start + ${TABLE_BUDGET:-525})); TABLE_OUT=1; GATE_WEIGHTS=${GATE_WEIGHTS-embedded}
    machine
    limit=$(((DEADLINE - start) / 3)); [ $limit -lt 180 ] || limit=180  # the table of main f28daa8: 50 s
    FRONTIER_OUT=${TABLE_BUILD:-build/table}/frontier timeout -k 5 $limit python3 bench/frontier.py run --budget $((limit * 2 / 3)) \
        --field-reps 41 > "$RESULTS/frontier.txt" 2>&1
    rc=$?; echo "frontier: $(($(date +%s) - start)) s (limit $limit s), exit $rc" >> "$RESULTS/stages.txt"
    tail -n 20 "$RESULTS/frontier.txt"
    write_table
    { MODELS="${MODELS-gemm_small gemm_big mlp128}" CLANG_MODELS="${CLANG_MODELS-gemm_big mlp128}" run_gate
      whole_field_gates; } > "$RESULTS/gate.txt" 2>&1
    grep -h -E "PASS:|FAIL:|^== gate" "$RESULTS/gate.txt"
    write_table
    cat "$RESULTS/stages.txt" "$RESULTS/table.md"
    echo "($(($(date +%s) - start)) s of ${TABLE_BUDGET:-525})"
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
    bash bench/studies/acc-probe/acc_declare.sh 2>&1 | tee "$RESULTS/openacc-declare-probe.txt"
    { MODELS=gemm_big CLANG_MODELS="gemm_big gemm_small" run_gate; whole_field_gates; } > "$RESULTS/gate.txt" 2>&1
    grep -h -E "^(c-|fortran-|batch|cuda-user|cuda-warp)|PASS:|FAIL:" "$RESULTS/gate.txt"
    ;;
study)
    mkdir -p "$RESULTS"; machine
    B=build/bench
    $B/mlp_bench --probe >/dev/null 2>&1 || { echo "prebuilt mlp_bench does not run here: rebuilding"; make -C bench/studies/design-mlp128 >/dev/null; }
    CSV="$RESULTS/kernel-study.csv"
    echo "model,variant,weights,weight_bytes,n,ns_per_point,min,max,tflops,err,status" > "$CSV"
    $B/mlp_bench --peak ${1:+--only "$1"} --csv "$CSV" 2>&1 | tee "$RESULTS/kernel-study.txt"
    [ -n "${1:-}" ] || for h in 16 24 28 32; do [ -x $B/sweep_$h ] && $B/sweep_$h --csv "$CSV"; done 2>&1 | tee "$RESULTS/constant-sweep.txt"
    grep -hE "Compiling entry|Used|spill" $B/*.ptxas > "$RESULTS/kernel-study-ptxas.txt" 2>/dev/null
    command -v cuobjdump >/dev/null && bash bench/studies/design-mlp128/sass_counts.sh $B/mlp_bench > "$RESULTS/kernel-study-sass-counts.txt" 2>&1
    ;;
*)
    sed -n '2,/^set -u/p' "$0" | sed '$d'
    [ "$cmd" = help ]
    ;;
esac
