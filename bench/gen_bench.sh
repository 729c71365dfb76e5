#!/bin/bash
# The generated kernels on the H200: rosenna's <name>_infer_batch (the native batched kernel),
# <name>_infer in a user kernel and <name>_infer_warp from every lane, for the three benchmark
# models (embedded and file-loaded weights) and two float64 MLPs (4-32-32-2 Tanh, mlp128).
#   bash bench/gen_bench.sh build   # here (needs rosenna, its python as PYTHON, and nvcc): generate, build into build/gen
#   bash bench/gen_bench.sh run     # on the GPU machine, from the repository root (carry build/gen)
# gen_bench.cu checks the two paths agree on 1,000,003 points and times both at 2^20 and 2^24 points.
set -eu
G=build/gen
ARCH=${ARCH:--arch=sm_90}
case "${1:-run}" in
build)
    rosenna=${ROSENNA:-rosenna}
    rm -rf $G && mkdir -p $G
    for m in gemm_small gemm_big mlp128; do
        $rosenna zoo $m -o $G/$m.onnx > /dev/null
        for w in embedded file; do
            d=$G/${m}_$w
            flag=$([ $w = file ] && echo --no-embed || echo --embed-weights)
            $rosenna generate $G/$m.onnx --name $m $flag --lang c --out $d > /dev/null
            make -s -f $d/$m.mk ROSENNA_BACKEND=cuda CC=gcc ROSENNA_OFFLOAD_FLAGS= "DEVFLAGS=-O3 $ARCH" > /dev/null
            rwt=$([ $w = file ] && echo "-DRWT=\"$d/$m.rwt\"" || true)
            M=$(echo $m | tr a-z A-Z)
            nvcc -O3 $ARCH -rdc=true -Xptxas -v -DNAME=$m -DHDR="\"$m.h\"" -D${m}_NX_M=${M}_NX -D${m}_NY_M=${M}_NY \
                $rwt -I$d bench/gen_bench.cu \
                $d/lib${m}_device.a $d/lib$m.a -o $d/gen_bench 2> $d/ptxas.txt
        done
    done
    # float64: the 4-32-32-2 Tanh MLP and mlp128, on the FP64 tensor cores (embedded weights).
    ${PYTHON:-python3} -c "import sys, numpy as np, onnx; from rosenna import zoo
onnx.save(zoo.mlp('d4', [4, 32, 32, 2], ['Tanh', 'Tanh', None], np.float64, seed=4), sys.argv[1])" $G/d4.onnx
    $rosenna zoo mlp128 --double -o $G/dmlp128.onnx > /dev/null
    for m in d4 dmlp128; do
        d=$G/${m}_f64
        $rosenna generate $G/$m.onnx --name $m --embed-weights --lang c --out $d > /dev/null
        make -s -f $d/$m.mk ROSENNA_BACKEND=cuda CC=gcc ROSENNA_OFFLOAD_FLAGS= "DEVFLAGS=-O3 $ARCH" > /dev/null
        M=$(echo $m | tr a-z A-Z)
        nvcc -O3 $ARCH -rdc=true -Xptxas -v -DNAME=$m -DREAL=double -DHDR="\"$m.h\"" -D${m}_NX_M=${M}_NX -D${m}_NY_M=${M}_NY \
            -I$d bench/gen_bench.cu $d/lib${m}_device.a $d/lib$m.a -o $d/gen_bench 2> $d/ptxas.txt
    done
    # mlp128 once more with the FP32 kernels only (-DROSENNA_NO_TENSOR_CORES: the staged FP32 kernel).
    d=$G/mlp128_embedded_fp32
    $rosenna generate $G/mlp128.onnx --name mlp128 --embed-weights --lang c --out $d > /dev/null
    make -s -f $d/mlp128.mk ROSENNA_BACKEND=cuda CC=gcc ROSENNA_OFFLOAD_FLAGS= "DEVFLAGS=-O3 $ARCH -DROSENNA_NO_TENSOR_CORES" > /dev/null
    nvcc -O3 $ARCH -rdc=true -Xptxas -v -DNAME=mlp128 -DHDR='"mlp128.h"' -Dmlp128_NX_M=MLP128_NX -Dmlp128_NY_M=MLP128_NY \
        -I$d bench/gen_bench.cu $d/libmlp128_device.a $d/libmlp128.a -o $d/gen_bench 2> $d/ptxas.txt
    rm -f $G/*/*.o
    grep -h -A2 "_tc_kernel\|_batch_kernel" $G/*/ptxas.txt | grep -E "entry|Used|spill" | sort -u
    ;;
run)
    status=0
    for d in $G/*/; do
        [ -x $d/gen_bench ] || continue
        echo "== $(basename $d)"
        $d/gen_bench || status=1
    done
    exit $status
    ;;
esac
