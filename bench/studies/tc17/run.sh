#!/bin/bash
# tc17 study (issue #17 items 1-3): each binary times <name>_infer_batch at 16,777,216 points
# (CUDA events, median of 7) and checks every output (mlp256: 4M points, mlp512: 2M) against an
# FP64 reference computed on the GPU, counting outputs outside verify's float32 tolerance; ptxas
# registers and spills of its tensor-core kernel from the build (variants.txt). From the
# repository root: bash build/dev-tc17/run.sh   (built by bench/studies/tc17/build.py)
D=$(dirname "$0")
N=16777216
PYLIB=$(python3 -c 'import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$(ls -d /usr/local/cuda-13*/lib64 2>/dev/null | tr '\n' ':')$PYLIB:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
START=$SECONDS
while read -r tag model check info; do
  [ $((SECONDS - START)) -gt 138 ] && { echo "$tag: skipped (time)"; continue; }
  line=$(timeout 30 "$D/$tag" $N 7 "$D/$model.ref" "$check" 2>&1 | tail -1)
  case "$line" in "$tag "*) echo "$line  [$info]";; *) echo "$tag FAILED: $line";; esac
done < "$D/variants.txt"
echo "($((SECONDS - START)) s)"
