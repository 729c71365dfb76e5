#!/bin/bash
# The tensor-core warp body of <name>_infer_warp (rosenna/emit/cuda/routine.py) in variants of its
# constants, on mlp128 with file-loaded weights, each in bench/gen_bench.cu (checks <name>_infer and
# <name>_infer_warp against the batched kernel on 1,000,003 points within verify's tolerance, times
# batch / _infer / _infer_warp at 2^20 and 2^24 points):
#   bash bench/warp_variants.sh build   # HERE (nvcc; PYTHON: rosenna's python): build/warp_variants/<label>/
#   bash bench/warp_variants.sh run     # THERE, from the repository root (carry build/warp_variants)
# A label is tiles-registers-fragments[-kCAP][-lSUMS]: WARP_TILES (16-row tiles at once: 2 = the
# warp's 32 points, 1 = two passes of 16), WARP_REGISTERS (a layer's input + one group's sums),
# fragments ldg (16-byte, __ldg), plain (16-byte, plain loads) or compact (8-byte, __ldg); kCAP: the
# device archive compiled with -maxrregcount=CAP; lSUMS: WARP_LOCAL_SUMS (inputs of the wide layers
# in local memory, SUMS registers of sums; without it 0: inputs in registers). VARIANTS overrides the list. results/measurement-log.md
# ("The warp-routine study") has the measurements.
set -eu
G=build/warp_variants
VARIANTS=${VARIANTS:-"2-144-ldg 2-160-ldg 2-160-plain 2-136-ldg 1-96-ldg 1-128-ldg 2-144-compact 2-144-ldg-k168 1-80-ldg-k128 2-144-ldg-l64 2-144-ldg-l32 2-144-ldg-k128-l64"}
case "${1:-run}" in
build)
    PYTHON=${PYTHON:-python3}
    mkdir -p $G
    $PYTHON -m rosenna zoo mlp128 -o $G/mlp128.onnx > /dev/null
    for v in $VARIANTS; do
        IFS=- read -r tiles regs frags more <<< "$v"
        cap=; sums=0
        for o in ${more//-/ }; do
            case $o in k*) cap=${o#k} ;; l*) sums=${o#l} ;; esac
        done
        d=$G/$v
        rm -rf $d && mkdir -p $d
        $PYTHON - "$G/mlp128.onnx" "$d" "$tiles" "$regs" "$frags" "$sums" <<'EOF'
import sys
from rosenna.emit.cuda import routine
from rosenna.generate import Options, generate
path, out, tiles, regs, frags, sums = sys.argv[1:]
routine.WARP_TILES, routine.WARP_REGISTERS, routine.WARP_LOCAL_SUMS = int(tiles), int(regs), int(sums)
routine.WARP_LDG, routine.WARP_COMPACT = frags != "plain", frags == "compact"
generate(path, out, Options(lang="c", embed=False, name="mlp128"))
EOF
        cp $d/mlp128.rwt $G/mlp128.rwt
        make -s -C $d -f mlp128.mk ROSENNA_BACKEND=cuda CC=gcc ROSENNA_OFFLOAD_FLAGS= "DEVFLAGS=-O3 -arch=sm_90" > /dev/null 2>&1
        (cd $d && nvcc -O3 -arch=sm_90 ${cap:+-maxrregcount=$cap} -Xptxas -v -rdc=true -DROSENNA_DEVICE_ROUTINE \
            -c mlp128_kernel.cu -o mlp128_device.o 2> ptxas.txt && objcopy --weaken-symbol=mlp128_infer mlp128_device.o && rm -f libmlp128_device.a && ar rcs libmlp128_device.a mlp128_device.o)
        nvcc -O3 -arch=sm_90 -rdc=true -DNAME=mlp128 -DHDR='"mlp128.h"' -Dmlp128_NX_M=MLP128_NX -Dmlp128_NY_M=MLP128_NY \
            -DRWT="\"$G/mlp128.rwt\"" -I$d bench/gen_bench.cu $d/libmlp128_device.a $d/libmlp128.a -o $d/gen_bench
        rm -f $d/*.o $d/*.c
        echo "$v: $(grep -A1 'properties for mlp128_infer_warp' $d/ptxas.txt | tail -1)"
    done
    ;;
run)
    for v in $VARIANTS; do
        echo "== $v"
        timeout 30 $G/$v/gen_bench | tail -4
    done
    ;;
esac
