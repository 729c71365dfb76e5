#!/bin/bash
# f64 study (issue #17 item 4), on the H200 from the repository root: bash build/dev-f64/run.sh
# (built by bench/studies/f64-dmma/build.py). Each variant: ns per point of <name>_infer_batch at 16,777,216
# points (CUDA events, median of 7) and every output against the generic FP64 kernel (verify's float64
# tolerance); then rosenna_tanh against libdevice's tanh on 2^30 points on the device; PyTorch fp64.
D=$(dirname "$0")
N=16777216
PYLIB=$(python3 -c 'import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$(ls -d /usr/local/cuda-13*/lib64 2>/dev/null | tr '\n' ':')$PYLIB:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
START=$SECONDS
while read -r tag rest; do
  [ $((SECONDS - START)) -gt 90 ] && { echo "$tag: skipped (time)"; continue; }
  line=$(timeout 20 "$D/$tag" "$tag" $N 7 2>&1 | tail -1)
  echo "$line  [${rest#* }]"
done < "$D/variants.txt"
timeout 20 "$D/d4-p4-m2-b2" tanh
[ $((SECONDS - START)) -lt 100 ] && timeout 20 python3 bench/torch_baseline.py --sizes $N --reps 7 2>&1 | grep -i "d4\|dmlp\|fp64\|float64" | head -4
echo "($((SECONDS - START)) s)"
