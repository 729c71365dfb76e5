"""Built-in example models, made with onnx.helper from fixed seeds (byte-reproducible).

gemm_small: Linear 2->2, ReLU, Linear 2->3, ReLU
gemm_big:   2->20 ReLU, ->30 Sigmoid, ->30 ReLU, ->40 Tanh, ->1 Sigmoid
mlp128:     16->128 ReLU ->128 ReLU ->128 ReLU ->8
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def mlp(name, sizes, activations, dtype=np.float32, seed=0):
    """A Gemm MLP: ``sizes`` are layer widths, ``activations`` one op name (or None) per layer."""
    rng = np.random.default_rng(seed)
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    nodes, inits = [], []
    prev = "input"
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(dtype)
        b = (0.1 * rng.standard_normal(n)).astype(dtype)
        inits += [numpy_helper.from_array(w, f"fc{i}.weight"), numpy_helper.from_array(b, f"fc{i}.bias")]
        out = f"fc{i}_out"
        nodes.append(helper.make_node("Gemm", [prev, f"fc{i}.weight", f"fc{i}.bias"], [out], name=f"fc{i}", transB=1))
        prev = out
        if activations[i]:
            act_out = f"act{i}_out"
            nodes.append(helper.make_node(activations[i], [prev], [act_out], name=f"act{i}"))
            prev = act_out
    nodes.append(helper.make_node("Identity", [prev], ["output"], name="out"))
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", elem, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("output", elem, ["batch", sizes[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rosenna.zoo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


MODELS = {
    "gemm_small": lambda dtype=np.float32: mlp("gemm_small", [2, 2, 3], ["Relu", "Relu"], dtype, seed=1),
    "gemm_big": lambda dtype=np.float32: mlp("gemm_big", [2, 20, 30, 30, 40, 1],
                                             ["Relu", "Sigmoid", "Relu", "Tanh", "Sigmoid"], dtype, seed=2),
    "mlp128": lambda dtype=np.float32: mlp("mlp128", [16, 128, 128, 128, 8], ["Relu", "Relu", "Relu", None],
                                           dtype, seed=3),
}


def save(name, path, dtype=np.float32):
    """Write the example model ``name`` to ``path``."""
    onnx.save(MODELS[name](dtype), path)
    return path
