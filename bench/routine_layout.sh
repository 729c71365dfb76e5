#!/bin/bash
# The tuning's routine_layout on the GPU: mlp128's tensor-core warp routine (<name>_infer_warp, and
# <name>_infer when the whole warp calls) reading the wide kernel's <name>_tc_packed by a gather
# ("wide": the kernel file holds the 3xTF32 weights once) against its own paired copy
# <name>_rchain ("paired": one 16-byte load per fragment), embedded and file-loaded weights, each
# in bench/gen_bench.cu (checks <name>_infer and <name>_infer_warp against the batched kernel on
# 1,000,003 points within verify's tolerance; times batch / _infer / _infer_warp at 2^20 and 2^24
# points), and <name>_infer_warp's outputs on those 1,000,003 points compared bit for bit between the layouts.
#   bash bench/routine_layout.sh build   # here (nvcc; PYTHON: rosenna's python): build/routine_layout
#   bash bench/routine_layout.sh run     # on the GPU machine, from the repository root (carry build/routine_layout)
set -eu
G=build/routine_layout
ARCH=${ARCH:--arch=sm_90}
GPU_ARCH=${GPU_ARCH:-sm_90}
LAYOUTS="wide paired"
case "${1:-run}" in
build)
    PYTHON=${PYTHON:-python3}
    rm -rf $G && mkdir -p $G
    $PYTHON -m rosenna zoo mlp128 -o $G/mlp128.onnx > /dev/null
    for layout in $LAYOUTS; do
        for w in embedded file; do
            d=$G/${layout}_$w
            flag=$([ $w = file ] && echo --no-embed || echo --embed-weights)
            $PYTHON -m rosenna generate $G/mlp128.onnx --name mlp128 $flag --lang c --gpu-arch $GPU_ARCH \
                --tune routine_layout=$layout --out $d > /dev/null
            make -s -f $d/mlp128.mk ROSENNA_BACKEND=cuda CC=gcc ROSENNA_OFFLOAD_FLAGS= "DEVFLAGS=-O3 $ARCH" > /dev/null
            rwt=$([ $w = file ] && echo "-DRWT=\"$d/mlp128.rwt\"" || true)
            nvcc -O3 $ARCH -rdc=true -Xptxas -v -DNAME=mlp128 -DHDR='"mlp128.h"' -Dmlp128_NX_M=MLP128_NX \
                -Dmlp128_NY_M=MLP128_NY -DDUMP=\"$d/warp_y.bin\" $rwt -I$d bench/gen_bench.cu \
                $d/libmlp128_device.a $d/libmlp128.a -o $d/gen_bench 2> $d/ptxas.txt
            echo "$layout $w: mlp128_kernel.cu $(stat -c %s $d/mlp128_kernel.cu) bytes"
            rm -f $d/*.o $d/*.a $d/*.c $d/*.cu $d/*.F90  # (the driver is linked: carry it and the weights file)
        done
    done
    ;;
run)
    for layout in $LAYOUTS; do
        for w in embedded file; do
            echo "== routine_layout=$layout, $w weights"
            timeout 60 $G/${layout}_$w/gen_bench | tail -4
        done
    done
    for w in embedded file; do
        if cmp -s $G/wide_$w/warp_y.bin $G/paired_$w/warp_y.bin; then
            echo "$w: <name>_infer_warp's outputs bit-identical (wide, paired)"
        else
            echo "$w: <name>_infer_warp's outputs DIFFER (wide, paired)"
        fi
    done
    ;;
esac
