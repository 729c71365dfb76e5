#!/bin/bash
# tc17 study (issue #17 items 1-2): each binary times <name>_infer_batch at 16M points (median of 7,
# CUDA events) and checks EVERY output (mlp256: 4M points, mlp512: 2M) against an FP64 reference
# (and an FP32 one) computed on the GPU. Run from the repository root: bash build/dev-tc17/run.sh
D=$(dirname "$0")
N=16777216
PYLIB=$(python3 -c 'import nvidia.cuda_runtime, os; print(os.path.join(list(nvidia.cuda_runtime.__path__)[0], "lib"))' 2>/dev/null)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$(ls -d /usr/local/cuda-13*/lib64 2>/dev/null | tr '\n' ':')$PYLIB:$LD_LIBRARY_PATH
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
START=$SECONDS
for b in mlp128_wide_split mlp128_old_tf32wide mlp128_old_staged_fp32 silu_split2 silu_split0 silu_split1 \
         silu_split2_fastexp silu_fp32 gelu_split2 gelu_split0 gelu_fp32 mish64_split2 mish64_split2_fastexp \
         tanh64_split2 silu16_cpw16_split2 silu16_cpw16_split2_fastexp gelu16_cpw16_split2 gemm_big_split2 gemm_big_split0 tanh96_wide96 tanh96_fp32 mlp256_wide mlp512_wide; do
  exe="$D/$b"
  [ -x "$exe" ] || { echo "$b: missing"; continue; }
  [ $((SECONDS - START)) -gt 135 ] && { echo "$b: skipped (time)"; continue; }
  m=${b%%_*}
  case "$b" in gemm_big_*) m=gemm_big;; esac
  chk=$N
  case "$m" in mlp512) chk=2097152;; mlp256) chk=4194304;; esac
  timeout 40 "$exe" $N 7 "$D/$m.ref" $chk 2>&1 | tail -3
done
[ $((SECONDS - START)) -lt 95 ] && timeout 50 python3 "$D/torch_time.py" mlp256 mlp512 2>&1 | grep -v Warning | tail -4
echo "($((SECONDS - START)) s)"
