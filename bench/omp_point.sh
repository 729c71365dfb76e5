#!/bin/bash
# <name>_infer inside the program's own clang-16 `omp target teams distribute parallel for` loop
# (the gate's c-omp harness, bench/omp_point.c) for gemm_big and mlp128: the routine rosenna
# generates (the MLP body of clang's device pass, rosenna/emit/offload_mlp.py: mlp128 takes its warp
# path when the whole warp calls) against its one-thread path alone (-DROSENNA_WARP=0, `thread`) and
# the plan's loops (-DROSENNA_OFFLOAD_BODY=0, `loops`), each also with -foffload-lto, and launch clauses.
#
#   bash bench/omp_point.sh prepare   # HERE: generate the two models' C into build/omp_point/src
#                                     #   (ROSENNA="python -m rosenna" for a venv; ~1.5 MB)
#   bash bench/omp_point.sh run       # THERE (carry build/omp_point): build every variant with the
#                                     #   machine's clang-16 ($ROSENNA_CLANG, $CLANG_OFFLOAD_FLAGS from
#                                     #   $ROSENNA_GPU_ENV, as the gate), then print ns/point (median of 7)
#                                     #   and the worst error in units of verify's tolerance (< 150 s)
set -u
cmd=${1:-help}
out=${OMP_POINT_DIR:-build/omp_point}
case "$cmd" in
prepare)
    ROSENNA=${ROSENNA:-python3 -m rosenna}
    rm -rf "$out"; mkdir -p "$out/src"
    cp bench/omp_point.c "$out/src/"
    for m in gemm_big mlp128; do
        mkdir -p "$out/src/$m"
        $ROSENNA zoo $m -o "$out/src/$m/$m.onnx" >/dev/null
        $ROSENNA generate "$out/src/$m/$m.onnx" --out "$out/src/$m" --lang c --embed-weights --gpu-arch sm_90 >/dev/null
        rm -f "$out/src/$m/"*.onnx "$out/src/$m/"*.mk "$out/src/$m/"*.pc "$out/src/$m/"*Config.cmake "$out/src/$m/"*_kernel.cu
    done
    du -sh "$out"; echo "carry: $out (and the file ROSENNA_GPU_ENV names)"
    ;;
run)
    [ -n "${ROSENNA_CLANG:-}" ] || [ -z "${ROSENNA_GPU_ENV:-}" ] || . "$ROSENNA_GPU_ENV" >/dev/null
    export LD_LIBRARY_PATH=$CLANG_OMP_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OMP_TARGET_OFFLOAD=MANDATORY
    bin=$out/bin; mkdir -p "$bin"
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader 2>/dev/null
    variants=${VARIANTS:-"gemm_big:body gemm_big:loops mlp128:body mlp128:thread mlp128:loops"}
    for mv in $variants; do  # each variant with and without -foffload-lto, all in parallel
        m=${mv%%:*}; v=${mv#*:}; M=$(echo $m | tr a-z A-Z); src=$out/src/$m
        def=""; [ $v = loops ] && def=-DROSENNA_OFFLOAD_BODY=0; [ $v = thread ] && def=-DROSENNA_WARP=0
        [ -d "$out/src/$m-$v" ] && src=$out/src/$m-$v  # a variant with its own generated C
        for lto in "" -lto; do
            extra=""; [ -n "$lto" ] && extra=-foffload-lto
            ( $ROSENNA_CLANG -O3 -fopenmp $CLANG_OFFLOAD_FLAGS $extra $def -I"$src" -c "$src/$m.c" -o "$bin/$m-$v$lto.o" &&
              $ROSENNA_CLANG -O3 -fopenmp $CLANG_OFFLOAD_FLAGS $extra -I"$src" -DMODEL_H="\"$m.h\"" -DINFER=${m}_infer \
                  -DNX=${M}_NX -DNY=${M}_NY "$out/src/omp_point.c" "$bin/$m-$v$lto.o" -lm -o "$bin/$m-$v$lto" ) \
                > "$bin/$m-$v$lto.log" 2>&1 &
        done
    done
    wait
    one() {  # variant points [thread_limit num_teams]
        printf "%-20s " "$1"
        if [ -x "$bin/$1" ]; then timeout 40 "$bin/$1" "$2" 7 "${3:-0}" "${4:-0}" 2>&1 | tail -1
        else echo "build failed: $(grep -v warning "$bin/$1.log" | tail -1)"; fi
    }
    for m in gemm_big:4000000 mlp128:1000000; do
        name=${m%%:*}; n=${m##*:}
        echo "== $name, $n points (tl/nt: thread_limit/num_teams clauses, 0 = none)"
        for mv in $variants; do
            [ "${mv%%:*}" = $name ] || continue
            one $name-${mv#*:} $n; one $name-${mv#*:}-lto $n
        done
        for tl in 64 128 256; do one $name-body $n $tl; done
        one $name-body $n 128 1056
    done
    ;;
*)
    sed -n '2,13p' "$0"; exit 2
    ;;
esac
