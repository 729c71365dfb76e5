#!/bin/bash
# <name>_infer inside the program's own clang-16 `omp target teams distribute parallel for` loop
# (the gate's c-omp harness, bench/omp_point.c) for gemm_big and mlp128: the routine rosenna
# generates (the unrolled MLP body of clang's device pass, rosenna/emit/offload_mlp.py) against the
# plan's loops (-DROSENNA_OFFLOAD_BODY=0), each also with -foffload-lto, and launch clauses.
#
#   bash bench/omp_point.sh build   # HERE: clang-16 + libomp-16-dev (Debian 12: apt-get install clang-16
#                                   #   clang-tools-16 libomp-16-dev), nvcc 13 (ptxas, nvlink, libdevice);
#                                   #   ROSENNA="python -m rosenna" for a venv. Writes build/omp_point (~6 MB)
#   bash bench/omp_point.sh run     # THERE (carry build/omp_point): prints ns/point (median of 7) and the
#                                   #   worst error in units of verify's tolerance, per variant (< 150 s)
set -eu
cmd=${1:-help}
out=build/omp_point
case "$cmd" in
build)
    ROSENNA=${ROSENNA:-python3 -m rosenna}
    cuda=$(dirname "$(dirname "$(readlink -f "$(command -v ptxas || command -v nvcc)")")")
    [ -f "$cuda/nvvm/libdevice/libdevice.10.bc" ] || cuda=$(nvcc -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p')
    llvm=$(dirname "$(dirname "$(readlink -f "$(command -v clang-16)")")")
    F="-O3 -fopenmp -fopenmp-targets=nvptx64-nvidia-cuda --offload-arch=sm_90 --cuda-path=$cuda -Wno-unknown-cuda-version"
    rm -rf "$out"; mkdir -p "$out/bin" "$out/lib" "$out/obj"
    cp -L "$llvm"/lib/libomptarget.so.16 "$llvm"/lib/libomptarget.rtl.cuda.so.16 \
          "$llvm"/lib/libomptarget.rtl.cuda.nextgen.so.16 "$llvm"/lib/libomp.so.5 "$out/lib/"
    for m in gemm_big mlp128; do
        M=$(echo $m | tr a-z A-Z); src=$out/src/$m
        mkdir -p "$src"
        $ROSENNA zoo $m -o "$src/$m.onnx" >/dev/null
        $ROSENNA generate "$src/$m.onnx" --out "$src" --lang c --embed-weights --gpu-arch sm_90 >/dev/null
        for v in body loops; do
            def=""; [ $v = loops ] && def=-DROSENNA_OFFLOAD_BODY=0
            for lto in "" -lto; do
                tag=$m-$v$lto; extra=""; [ -n "$lto" ] && extra=-foffload-lto
                PATH=$cuda/bin:$PATH clang-16 $F $extra $def -I"$src" -c "$src/$m.c" -o "$out/obj/$tag.o"
                PATH=$cuda/bin:$PATH clang-16 $F $extra -I"$src" -DMODEL_H="\"$m.h\"" -DINFER=${m}_infer -DNX=${M}_NX \
                    -DNY=${M}_NY bench/omp_point.c "$out/obj/$tag.o" -L"$llvm/lib" -Wl,-rpath,'$ORIGIN/../lib' -lm \
                    -o "$out/bin/$tag"
                echo "built $tag"
            done
        done
    done
    rm -rf "$out/obj" "$out/src"
    du -sh "$out"; echo "carry: $out"
    ;;
run)
    L=$PWD/$out/lib
    [ -e /usr/lib/x86_64-linux-gnu/libcuda.so ] || [ -e "$L/libcuda.so" ] || ln -sf /usr/lib/x86_64-linux-gnu/libcuda.so.1 "$L/libcuda.so"
    if ! ldd "$L/libomptarget.rtl.cuda.so.16" | grep -q "libLLVM-16.so.1 => /" && [ -f .gpu/setup.sh ]; then
        source .gpu/setup.sh >/dev/null; L=$CLANG_OMP_LIB  # the carried bundle's libomptarget instead
    fi
    export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} OMP_TARGET_OFFLOAD=MANDATORY
    nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true
    one() {  # variant points [thread_limit num_teams]
        printf "%-18s " "$1"; timeout 40 "$out/bin/$1" "$2" 7 "${3:-0}" "${4:-0}" 2>&1 | tail -1 || true
    }
    for m in gemm_big:4000000 mlp128:1000000; do
        name=${m%%:*}; n=${m##*:}
        echo "== $name, $n points (tl/nt: thread_limit/num_teams clauses, 0 = none)"
        for v in loops loops-lto body body-lto; do one $name-$v $n; done
        for tl in 64 128 256; do one $name-body $n $tl; done
        one $name-body $n 128 1056
    done
    ;;
*)
    sed -n '2,12p' "$0"; exit 2
    ;;
esac
