#!/bin/bash
# Builds and runs the examples on an NVIDIA GPU with GCC 12's nvptx OpenMP/OpenACC offload and
# clang's OpenMP offload (the compilers the file $ROSENNA_GPU_ENV sets up, docs/admin-guide.md), and the ADR solver on rosenna's
# native CUDA backend (nvcc); prints per-step times, and counts what moves between host and device
# inside the time loops.
#
#   examples/run_gpu.sh prepare   # here, where rosenna is installed: generate every example's
#                                 # model sources into <example>/build/gpu (the GPU machine
#                                 # needs no Python); then send those build/gpu folders
#   examples/run_gpu.sh run       # on the GPU machine, from the repository root
#
# Every program runs with --require-device, which fails unless omp_is_initial_device() (or
# acc_on_device) says the offload region ran on the GPU: libgomp falls back to the host silently.
#
# Transfers: rosenna/data/count_transfers.cu (the gate's counter), a CUPTI injection library built here with nvcc,
# counts every host<->device copy of a run. Each program runs at two step counts; the difference
# is what the extra steps moved. For ADR that should be nothing but libgomp's per-launch argument
# blocks (tens of bytes; no field or weight data); for cns it is the halo rows, by design.
# Results go to stdout and to $OUT (or build/gpu-out) as one .txt per run and summary.md.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=build/gpu
SUR=examples/surrogates
PG=examples/surrogates/poisson_guess
CNS=examples/cns_closure

prepare() {
    local rosenna=${ROSENNA:-$root/.venv/bin/rosenna}
    rm -rf $SUR/$B $PG/$B $CNS/$B
    make -s -C $SUR BUILD=$B ROSENNA="$rosenna" $B/omp/adr_rate.h $B/acc/adr_rate.h $B/cuda/adr_rate.h &&
    make -s -C $PG BUILD=$B ROSENNA="$rosenna" $B/gen/pguess.h $B/gen-cuda/pguess.h &&
    make -s -C $CNS BUILD=$B ROSENNA="$rosenna" $B/gen/sgs.h $B/gen-cuda/sgs.h &&
    echo "generated: $SUR/$B $PG/$B $CNS/$B"
}

if [ "${1:-run}" = prepare ]; then
    prepare
    exit $?
fi

out=${OUT:-$root/build/gpu-out}
mkdir -p "$out"
summary=$out/summary.md
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }

if [ -n "${ROSENNA_GPU_ENV:-}" ]; then
    . "$ROSENNA_GPU_ENV" || { echo "run_gpu.sh: $ROSENNA_GPU_ENV failed"; exit 2; }
fi
nvidia-smi -L 2>&1 | tee -a "$summary"
export OMP_TARGET_OFFLOAD=MANDATORY   # ACC_DEVICE_TYPE=nvidia only for the OpenACC runs: libgomp
                                    # refuses it in OpenMP programs on a machine without one

# The generated sources came from elsewhere: make them newer than the .onnx so make keeps them.
for d in $SUR $PG $CNS; do
    [ -d $d/$B ] || { echo "run_gpu.sh: $d/$B missing: run 'examples/run_gpu.sh prepare' first"; exit 2; }
    find $d/$B -type f -exec touch {} +
done

# The transfer counter, if this machine has nvcc and CUPTI.
counter=
# The CUDA installation as nvcc's dry run names it (as the gate and the generated .mk find it).
cuda=$(nvcc -dryrun -c -x cu /dev/null -o /dev/null 2>&1 | sed -n 's/^#\$ TOP=//p')
for inc in "$cuda/extras/CUPTI/include" "$cuda/include" "$cuda/targets/x86_64-linux/include"; do
    [ -f "$inc/cupti.h" ] || continue
    lib=$(dirname "$(find "$cuda" -name 'libcupti.so*' 2>/dev/null | head -1)")
    if nvcc -shared -Xcompiler -fPIC -I"$inc" rosenna/data/count_transfers.cu -L"$lib" -lcupti \
        -Xlinker -rpath,"$lib" -o "$out/libcount_transfers.so" > "$out/counter-build.log" 2>&1; then
        counter=$out/libcount_transfers.so
    fi
    break
done
[ -n "$counter" ] && note "transfer counter: CUPTI injection ($counter)" ||
    note "transfer counter: not built (no CUPTI here; see $out/counter-build.log): transfers not counted"

# clang-16 builds the C programs in a tree of its own, from copies of the generated sources.
BC=build/gpu-clang
for d in $SUR $PG $CNS; do
    rm -rf $d/$BC && mkdir -p $d/$BC && cp -r $d/$B/. $d/$BC/
done

# Build: every example with GCC 12 (C and Fortran), the C ones with clang-16, and adr_cuda with
# nvcc, in parallel; logs in $out.
flags=(CC="$ROSENNA_GCC" FC="$ROSENNA_GFORTRAN" OFFLOAD="$GCC_OFFLOAD_FLAGS" BUILD=$B ROSENNA=false)
cflags=(CC="$ROSENNA_CLANG" OFFLOAD="$CLANG_OFFLOAD_FLAGS" BUILD=$BC ROSENNA=false)
t0=$(date +%s)
pids=()
make -C $SUR -j8 "${flags[@]}" all > "$out/build-surrogates.log" 2>&1 & pids+=($!)
make -C $PG -j8 "${flags[@]}" all > "$out/build-poisson.log" 2>&1 & pids+=($!)
make -C $CNS -j8 "${flags[@]}" all > "$out/build-cns.log" 2>&1 & pids+=($!)
make -C $SUR -j8 BUILD=$B ROSENNA=false CC=gcc CUDA_ARCH=-arch=sm_90 cuda > "$out/build-cuda.log" 2>&1 & pids+=($!)
make -C $SUR -j8 "${cflags[@]}" $BC/adr_c_omp > "$out/build-clang-surrogates.log" 2>&1 & pids+=($!)
make -C $PG -j8 "${cflags[@]}" $BC/poisson > "$out/build-clang-poisson.log" 2>&1 & pids+=($!)
make -C $CNS -j8 "${cflags[@]}" $BC/cns_c > "$out/build-clang-cns.log" 2>&1 & pids+=($!)
make -C $PG -j8 "${cflags[@]}" CUDA_ARCH=-arch=sm_90 $BC/poisson_cuda > "$out/build-clang-poisson-cuda.log" 2>&1 & pids+=($!)
make -C $CNS -j8 "${cflags[@]}" CUDA_ARCH=-arch=sm_90 $BC/cns_cuda > "$out/build-clang-cns-cuda.log" 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait $p || note "build failed: see the logs below"; done
note "build: $(( $(date +%s) - t0 )) s"
for log in "$out"/build-*.log; do grep -E -i "error" "$log" | head -5; done

mpirun_flags=(--oversubscribe)
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

# run NAME CMD...: one timed run, output to $out/NAME.txt; with the counter, transfers appended.
run() {
    local name=$1
    shift
    rm -f "$out/$name.transfers"
    if [ -n "$counter" ]; then
        CUDA_INJECTION64_PATH=$counter ROSENNA_TRANSFERS=$out/$name.transfers timeout 60 "$@" > "$out/$name.txt" 2>&1
    else
        timeout 60 "$@" > "$out/$name.txt" 2>&1
    fi
    local rc=$?
    if [ $rc != 0 ] && [ -n "$counter" ]; then   # in case the injected counter is what broke it
        echo "--- $name failed (exit $rc) with the counter; again without it"
        rm -f "$out/$name.transfers"
        timeout 60 "$@" > "$out/$name.txt" 2>&1
        rc=$?
    fi
    echo "--- $name (exit $rc): $*"
    cat "$out/$name.txt"
    [ -f "$out/$name.transfers" ] && cat "$out/$name.transfers"
    return $rc
}

# Sums the transfer lines of a run (one per MPI rank): "htod copies bytes dtoh copies bytes".
transfers() {
    awk '{h+=$3; hb+=$4; d+=$6; db+=$7} END {printf "%d %d %d %d", h, hb, d, db}' "$out/$1.transfers" 2>/dev/null
}

# loop_transfers NAME_SHORT NAME_LONG EXTRA_STEPS: what the extra steps moved.
loop_transfers() {
    [ -f "$out/$1.transfers" ] && [ -f "$out/$2.transfers" ] || { note "| $2 | not counted |"; return; }
    read -r h1 hb1 d1 db1 <<< "$(transfers "$1")"
    read -r h2 hb2 d2 db2 <<< "$(transfers "$2")"
    note "| $2 | $3 extra steps | $((h2 - h1)) copies, $((hb2 - hb1)) B | $((d2 - d1)) copies, $((db2 - db1)) B | whole run: $h2 copies $hb2 B to the device, $d2 copies $db2 B back |"
}

status=0
steps=200
n=1024
cn=1024
for prog in adr_c_omp adr_f_omp adr_c_acc adr_f_acc; do
    acc=()
    case $prog in *_acc) acc=(env ACC_DEVICE_TYPE=nvidia) ;; esac
    run "$prog" "${acc[@]}" $SUR/$B/$prog --n $n --steps $steps --require-device || status=1
    [ -n "$counter" ] && { run "${prog}_short" "${acc[@]}" $SUR/$B/$prog --n $n --steps $((steps / 2)) \
        --require-device || status=1; }
done
# The native CUDA backend: per cell from the solver's kernel, and through the batched kernel.
for mode in cell batch; do
    extra=(); [ $mode = batch ] && extra=(--batch)
    run "adr_cuda_$mode" $SUR/$B/adr_cuda --n $n --steps $steps "${extra[@]}" || status=1
    [ -n "$counter" ] && { run "adr_cuda_${mode}_short" $SUR/$B/adr_cuda --n $n --steps $((steps / 2)) \
        "${extra[@]}" || status=1; }
done
# clang OpenMP offload (its runtime's folder in CLANG_OMP_LIB).
export LD_LIBRARY_PATH=$CLANG_OMP_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
run adr_c_omp_clang $SUR/$BC/adr_c_omp --n $n --steps $steps --require-device || status=1
[ -n "$counter" ] && { run adr_c_omp_clang_short $SUR/$BC/adr_c_omp --n $n --steps $((steps / 2)) \
    --require-device || status=1; }
run poisson_clang $PG/$BC/poisson --cases 2 --require-device || status=1
# The net on the native CUDA backend inside the clang-built OpenMP program (one CUDA context).
run poisson_cuda_clang $PG/$BC/poisson_cuda --cases 2 --require-device || status=1
run cns_c_clang_np1 mpirun "${mpirun_flags[@]}" -np 1 $CNS/$BC/cns_c --nx $cn --ny $cn --steps 100 \
    --require-device --dump "$out/cns_c_clang_np1.bin" || status=1
# The closure as one batch per stage through the native CUDA kernel (clang's OpenMP + CUDA runtime).
run cns_cuda_clang_np1 mpirun "${mpirun_flags[@]}" -np 1 $CNS/$BC/cns_cuda --nx $cn --ny $cn --steps 100 \
    --batch --require-device || status=1
# Two cases only: each Jacobi sweep of a 64 x 64 field is one tiny kernel launch, and ~40,000
# launches per case (libgomp, GCC 12) took more than 60 s for 8 cases on the H200 on 2026-12-02.
run poisson $PG/$B/poisson --cases 2 --require-device || status=1
for prog in cns_c cns_f; do
    for np in 1 2; do
        run "${prog}_np$np" mpirun "${mpirun_flags[@]}" -np $np $CNS/$B/$prog --nx $cn --ny $cn --steps 100 \
            --require-device --dump "$out/${prog}_np$np.bin" || status=1
    done
    [ -n "$counter" ] && { run "${prog}_np1_short" mpirun "${mpirun_flags[@]}" -np 1 $CNS/$B/$prog --nx $cn \
        --ny $cn --steps 50 --require-device || status=1; }
done

note ""
note "## Per-step times (from the runs above)"
for f in "$out"/*.txt; do
    case $f in *_short.txt | */summary.md) continue ;; esac
    note "$(basename "$f" .txt): $(grep -h -E '^time per step|^total CG|ran on' "$f" | tr '\n' ' ')"
done
note ""
note "## Host<->device copies inside the time loops (long run minus short run)"
note "| program | difference | to the device | to the host | |"
note "| --- | --- | --- | --- | --- |"
for prog in adr_c_omp adr_f_omp adr_c_acc adr_f_acc adr_cuda_cell adr_cuda_batch adr_c_omp_clang; do
    loop_transfers "${prog}_short" "$prog" "2 x $((steps / 2))"
done
for prog in cns_c cns_f; do loop_transfers "${prog}_np1_short" "${prog}_np1" 50; done
note "(cns: halo rows by design, 2 stages x 2 sides x 2 rows x 4 variables x $cn x 8 B = $((2 * 2 * 2 * 4 * cn * 8)) B per step each way)"
for prog in cns_c cns_f; do
    if cmp -s "$out/${prog}_np1.bin" "$out/${prog}_np2.bin"; then note "$prog: 1 and 2 ranks give identical fields"
    else note "$prog: 1 and 2 ranks differ (or a run failed)"; status=1; fi
done
if cmp -s "$out/cns_c_np1.bin" "$out/cns_c_clang_np1.bin"; then note "cns_c: GCC and clang builds give identical fields"
else note "cns_c: GCC and clang builds differ (contraction or math library; see the runs' checks)"; fi
rm -f "$out"/*.bin
note "overall: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
