#!/bin/bash
# Where mlp128's 3xTF32 weights live in its kernel file, timed on the GPU. Variants (generate --tune):
#   wide:   routine_layout=wide (the default): the tensor-core warp routine (<name>_infer_warp, and
#           <name>_infer when the whole warp calls) reads the wide kernel's <name>_tc_packed by a
#           gather (four 4-byte loads per fragment): the kernel file holds the 3xTF32 weights once;
#   paired: routine_layout=paired: the routine reads its own copy <name>_rchain in the paired row
#           order (one 16-byte load per fragment);
#   weight: wide, with wide_compact_from=1 compact_fragments=weight: the wide kernel and the routine
#           read 8-byte fragments holding the weights themselves, split in the kernel (four
#           instructions per weight; half the weight stream): mlp128's kernel file under 1.2 MB;
#   kpaired: wide_k_order=paired (routine_layout at its default): the wide kernel reads its A
#           fragments in the paired k order (columns 2tig, 2tig+1: one 8-byte shared-memory load per
#           row) against the routine's paired rows, so both read one <name>_tc_packed with one
#           16-byte load per fragment (mlp128's kernel file 1.69 MB). The batched kernel's products
#           reach the tensor cores in another order within each k8 tile: its outputs may differ from
#           the others' in the last bits (<name>_infer_warp's should not: the same operands).
#   kweight: kpaired with the compact weight fragments of `weight` (both kernels read 8-byte
#           fragments that hold the weights, split in the kernel; mlp128's kernel file 1.14 MB);
#   literal: the default layouts with every copy written as literals (compile_pack_floats=0), not
#           packed while the kernel file compiles: the same device data and code, so the same
#           bits and times as `paired` (VARIANTS="paired literal").
# Each, embedded and file-loaded weights, in bench/gen_bench.cu (checks <name>_infer and
# <name>_infer_warp against the batched kernel on 1,000,003 points within verify's tolerance; times
# batch / _infer / _infer_warp at 2^20 and 2^24 points); then the batched kernel's and
# <name>_infer_warp's outputs on those points compared bit for bit across the variants (the same
# numbers reach the tensor cores in all three: tests/test_warp_tc.py, tests/test_tensor_core.py).
#   bash bench/routine_layout.sh build   # here (nvcc; PYTHON: rosenna's python): build/routine_layout (~12 MB)
#   bash bench/routine_layout.sh run     # on the GPU machine, from the repository root (carry build/routine_layout)
set -eu
G=${G:-build/routine_layout}
#: SASS only (no PTX copy of the embedded weights in the drivers).
ARCH=${ARCH:--gencode=arch=compute_90,code=sm_90}
GPU_ARCH=${GPU_ARCH:-sm_90}
VARIANTS=${VARIANTS:-"wide paired weight kpaired kweight"}
tunes() {
    case $1 in
    wide) echo "--tune routine_layout=wide" ;;
    paired) echo "--tune routine_layout=paired" ;;
    weight) echo "--tune routine_layout=wide --tune wide_compact_from=1 --tune compact_fragments=weight" ;;
    kpaired) echo "--tune wide_k_order=paired" ;;
    kweight) echo "--tune wide_k_order=paired --tune wide_compact_from=1 --tune compact_fragments=weight" ;;
    literal) echo "--tune compile_pack_floats=0" ;;
    esac
}
case "${1:-run}" in
build)
    PYTHON=${PYTHON:-python3}
    rm -rf $G && mkdir -p $G
    $PYTHON -m rosenna zoo mlp128 -o $G/mlp128.onnx > /dev/null
    for v in $VARIANTS; do
        for w in embedded file; do
            d=$G/${v}_$w
            flag=$([ $w = file ] && echo --no-embed || echo --embed-weights)
            $PYTHON -m rosenna generate $G/mlp128.onnx --name mlp128 $flag --lang c --gpu-arch $GPU_ARCH $(tunes $v) \
                --out $d > /dev/null
            make -s -f $d/mlp128.mk ROSENNA_BACKEND=cuda CC=gcc ROSENNA_OFFLOAD_FLAGS= "DEVFLAGS=-O3 $ARCH" > /dev/null
            rwt=$([ $w = file ] && echo "-DRWT=\"$d/mlp128.rwt\"" || true)
            nvcc -O3 $ARCH -rdc=true -DNAME=mlp128 -DHDR='"mlp128.h"' -Dmlp128_NX_M=MLP128_NX -Dmlp128_NY_M=MLP128_NY \
                -DDUMP=\"$d/y.bin\" $rwt -I$d bench/gen_bench.cu $d/libmlp128_device.a $d/libmlp128.a -o $d/gen_bench
            echo "$v $w: mlp128_kernel.cu $(stat -c %s $d/mlp128_kernel.cu) bytes"
            rm -f $d/*.o $d/*.a $d/*.c $d/*.cu $d/*.F90  # (the driver is linked: carry it and the weights file)
        done
    done
    ;;
run)
    for v in $VARIANTS; do
        for w in embedded file; do
            echo "== $v, $w weights"
            timeout 60 $G/${v}_$w/gen_bench | tail -4
        done
    done
    # y.bin: the batched kernel's outputs, then <name>_infer_warp's (as many); each variant against the first.
    first=${VARIANTS%% *}
    for w in embedded file; do
        half=$(( $(stat -c %s $G/${first}_$w/y.bin) / 2 ))
        for v in ${VARIANTS#$first}; do
            cmp -s -n $half $G/${first}_$w/y.bin $G/${v}_$w/y.bin && batch=bit-identical || batch=DIFFER
            cmp -s -i $half $G/${first}_$w/y.bin $G/${v}_$w/y.bin && warp=bit-identical || warp=DIFFER
            echo "$w weights, $first and $v: batch outputs $batch, <name>_infer_warp outputs $warp"
        done
    done
    ;;
esac
