"""Two scientific models (a 3-D field U-Net and a coordinate MLP), built with onnx.helper alone (no torch), so
the GPU machine can write them too:

- ``unet3d``: a 3-D U-Net over an n^3 field of 2 channels (rank-5 tensors): Conv3d+ReLU, MaxPool3d,
  Conv3d, a channels-last LayerNorm (Transpose, LayerNormalization over the channels, Transpose
  back) and SiLU (exported as x*sigmoid(x)), a stride-2 ConvTranspose3d, skip Concat, Conv3d+ReLU
  and a 1x1x1 Conv3d to one channel. Whole-field: it runs through ``<name>_infer_one``.
- ``fourier_mlp``: a Fourier-feature MLP (Tancik et al. 2020) on 3 coordinates: sin and cos of
  2*pi*x@B with a fixed Gaussian B, then three Gemm layers (SiLU, Tanh) to 4 outputs. Per point.

    python bench/science_models.py OUTDIR [N]      # writes OUTDIR/unet3d.onnx, OUTDIR/fourier_mlp.onnx
"""

import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(nodes, inputs, outputs, weights, path, name):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="rosenna-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def unet3d(path, n=32, seed=0):
    rng = np.random.default_rng(seed)

    def w(*shape):
        fan_in = int(np.prod(shape[1:]))
        return rng.normal(0, math.sqrt(2.0 / fan_in), shape)

    h = n // 2
    node = helper.make_node
    nodes = [
        node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1] * 6), node("Relu", ["c1"], ["e1"]),
        node("MaxPool", ["e1"], ["p"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        node("Conv", ["p", "w2", "b2"], ["c2"], pads=[1] * 6),
        node("Transpose", ["c2"], ["t"], perm=[0, 2, 3, 4, 1]),
        node("LayerNormalization", ["t", "g", "beta"], ["ln"], axis=-1, epsilon=1e-5),
        node("Transpose", ["ln"], ["lnc"], perm=[0, 4, 1, 2, 3]),
        node("Sigmoid", ["lnc"], ["sg"]), node("Mul", ["lnc", "sg"], ["e2"]),
        node("ConvTranspose", ["e2", "wt", "bt"], ["u"], kernel_shape=[2, 2, 2], strides=[2, 2, 2]),
        node("Concat", ["e1", "u"], ["cat"], axis=1),
        node("Conv", ["cat", "w3", "b3"], ["c3"], pads=[1] * 6), node("Relu", ["c3"], ["d"]),
        node("Conv", ["d", "w4", "b4"], ["y"]),
    ]
    weights = {"w1": w(8, 2, 3, 3, 3), "b1": rng.normal(0, 0.1, 8), "w2": w(16, 8, 3, 3, 3),
               "b2": rng.normal(0, 0.1, 16), "g": 1 + rng.normal(0, 0.1, 16), "beta": rng.normal(0, 0.1, 16),
               "wt": w(16, 8, 2, 2, 2), "bt": rng.normal(0, 0.1, 8), "w3": w(8, 16, 3, 3, 3),
               "b3": rng.normal(0, 0.1, 8), "w4": w(1, 8, 1, 1, 1), "b4": rng.normal(0, 0.1, 1)}
    assert h * 2 == n
    return _save(nodes, [("x", [1, 2, n, n, n])], [("y", [1, 1, n, n, n])], weights, path, "unet3d")


def fourier_mlp(path, features=32, hidden=64, seed=1):
    rng = np.random.default_rng(seed)
    node = helper.make_node
    nodes = [
        node("MatMul", ["x", "B"], ["proj"]),
        node("Sin", ["proj"], ["s"]), node("Cos", ["proj"], ["c"]), node("Concat", ["s", "c"], ["f"], axis=1),
        node("Gemm", ["f", "w1", "b1"], ["h1"], transB=1), node("Sigmoid", ["h1"], ["g1"]),
        node("Mul", ["h1", "g1"], ["a1"]),
        node("Gemm", ["a1", "w2", "b2"], ["h2"], transB=1), node("Tanh", ["h2"], ["a2"]),
        node("Gemm", ["a2", "w3", "b3"], ["y"], transB=1),
    ]
    weights = {"B": 2 * math.pi * rng.normal(0, 2.0, (3, features)),
               "w1": rng.normal(0, 1 / math.sqrt(2 * features), (hidden, 2 * features)), "b1": rng.normal(0, 0.1, hidden),
               "w2": rng.normal(0, 1 / math.sqrt(hidden), (hidden, hidden)), "b2": rng.normal(0, 0.1, hidden),
               "w3": rng.normal(0, 1 / math.sqrt(hidden), (4, hidden)), "b3": rng.normal(0, 0.1, 4)}
    return _save(nodes, [("x", [1, 3])], [("y", [1, 4])], weights, path, "fourier_mlp")


def main(argv):
    out = argv[0] if argv else "."
    n = int(argv[1]) if len(argv) > 1 else 32
    os.makedirs(out, exist_ok=True)
    print(unet3d(os.path.join(out, "unet3d.onnx"), n))
    print(fourier_mlp(os.path.join(out, "fourier_mlp.onnx")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
