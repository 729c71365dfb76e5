#!/bin/bash
# rosenna gpu-gate on the H200 for the scientific models (bench/science_models.py, built with onnx alone):
#   unet3d       a 3-D U-Net over a 32^3 field of 2 channels (Conv3d, MaxPool3d, channels-last
#                LayerNormalization, SiLU, stride-2 ConvTranspose3d, skip Concat): whole-field path,
#                <name>_infer_one, one launch per op; UNET_SAMPLES samples per pass (default 256)
#   fourier_mlp  a Fourier-feature MLP (Sin/Cos of 2*pi*x@B, Gemm+SiLU, Gemm+Tanh, Gemm) per point;
#                POINTS points per pass (default 1000000), also through clang-16
# Runs bench/h200.sh gate (the same harnesses, compilers and ROSENNA_GPU_ENV as the gate) once
# per model. Reports under $OUT (default gate-out)/gate/cuda-*-{unet3d,fourier_mlp}/gate-report.{md,json}.
#   bash bench/gate_science.sh        # from the repository root, on the GPU machine
set -u
OUT=${OUT:-gate-out}
MODELS_DIR=${MODELS_DIR:-/tmp/science-models}
python3 bench/science_models.py "$MODELS_DIR" 32 || exit 1
status=0
MODELS="$MODELS_DIR/unet3d.onnx" CLANG_MODELS="" POINTS="${UNET_SAMPLES:-256}" RESULTS="$OUT" \
    bash bench/h200.sh gate || status=1
MODELS="$MODELS_DIR/fourier_mlp.onnx" CLANG_MODELS="$MODELS_DIR/fourier_mlp.onnx" POINTS="${POINTS:-1000000}" \
    RESULTS="$OUT" bash bench/h200.sh gate || status=1
exit $status
