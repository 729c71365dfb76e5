"""Models for the operator tests and benchmarks, built with onnx.helper from fixed seeds."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _save(nodes, inputs, outputs, inits, path, opset=17, name="m"):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


def conv(path, c, h, w, cout, k=(3, 3), strides=(1, 1), pads=(1, 1, 1, 1), dil=(1, 1), group=1, act=None, seed=0):
    """One Conv (bias, ``group`` groups) of a c x h x w field into cout channels, then the activation
    ``act`` (an ONNX op name) if given: the geometry tests of the CUDA conv kernels."""
    rng = np.random.default_rng(seed)
    weight = (rng.standard_normal((cout, c // group) + tuple(k)) / np.sqrt(c // group * k[0] * k[1])).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c" if act else "y"], name="conv", kernel_shape=list(k),
                              strides=list(strides), pads=list(pads), dilations=list(dil), group=group)]
    if act:
        nodes.append(helper.make_node(act, ["c"], ["y"], name="act"))
    out_hw = [(n + p0 + p1 - (kk - 1) * d - 1) // s + 1 for n, p0, p1, kk, d, s in
              zip((h, w), pads[:2], pads[2:], k, dil, strides)]
    return _save(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout] + out_hw)],
                 [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "B")], path, name="conv")


def convnet(path, height=64, width=64, channels=8, seed=0):
    """field[N, 2, H, W] -> 3x3 Conv(8)+ReLU -> 3x3 Conv(8)+Tanh -> 3x3 Conv(1): a whole-field CNN."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev, cin = "field", 2
    for i, (cout, act) in enumerate([(channels, "Relu"), (channels, "Tanh"), (1, None)]):
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"conv{i}.weight"), numpy_helper.from_array(b, f"conv{i}.bias")]
        nodes.append(helper.make_node("Conv", [prev, f"conv{i}.weight", f"conv{i}.bias"], [f"c{i}"], name=f"conv{i}",
                                      pads=[1, 1, 1, 1]))
        prev, cin = f"c{i}", cout
        if act:
            nodes.append(helper.make_node(act, [prev], [f"a{i}"], name=f"act{i}"))
            prev = f"a{i}"
    nodes.append(helper.make_node("Identity", [prev], ["out"], name="out"))
    return _save(nodes, [helper.make_tensor_value_info("field", TensorProto.FLOAT, ["N", 2, height, width])],
                 [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 1, height, width])], inits, path,
                 name="convnet")


def lstm_cell(path, inputs=3, hidden=5, seed=1, seq=1):
    """One LSTM step per call: x[seq,1,I], h0[1,1,H], c0[1,1,H] -> Y_h, Y_c (and a Linear head on Y_h)."""
    rng = np.random.default_rng(seed)
    w = (0.5 * rng.standard_normal((1, 4 * hidden, inputs))).astype(np.float32)
    r = (0.5 * rng.standard_normal((1, 4 * hidden, hidden))).astype(np.float32)
    b = (0.1 * rng.standard_normal((1, 8 * hidden))).astype(np.float32)
    head = (rng.standard_normal((hidden, 1)) / np.sqrt(hidden)).astype(np.float32)
    nodes = [
        helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["", "hn", "cn"], name="lstm", hidden_size=hidden),
        helper.make_node("Reshape", ["hn", "flat"], ["hflat"], name="flatten"),
        helper.make_node("MatMul", ["hflat", "head"], ["pred"], name="head"),
    ]
    f = TensorProto.FLOAT
    return _save(nodes,
                 [helper.make_tensor_value_info("x", f, [seq, 1, inputs]),
                  helper.make_tensor_value_info("h0", f, [1, 1, hidden]),
                  helper.make_tensor_value_info("c0", f, [1, 1, hidden])],
                 [helper.make_tensor_value_info("pred", f, [1, 1]),
                  helper.make_tensor_value_info("hn", f, [1, 1, hidden]),
                  helper.make_tensor_value_info("cn", f, [1, 1, hidden])],
                 [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"), numpy_helper.from_array(b, "B"),
                  numpy_helper.from_array(head, "head"), numpy_helper.from_array(np.array([1, hidden], np.int64), "flat")],
                 path, name="lstm_cell")


def lstm_sequence(path, steps=10, inputs=3, hidden=5, seed=1):
    """The same cell as lstm_cell over a whole sequence (the reference for the stepping test)."""
    rng = np.random.default_rng(seed)
    w = (0.5 * rng.standard_normal((1, 4 * hidden, inputs))).astype(np.float32)
    r = (0.5 * rng.standard_normal((1, 4 * hidden, hidden))).astype(np.float32)
    b = (0.1 * rng.standard_normal((1, 8 * hidden))).astype(np.float32)
    nodes = [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "hn", "cn"], name="lstm",
                              hidden_size=hidden)]
    f = TensorProto.FLOAT
    return _save(nodes,
                 [helper.make_tensor_value_info("x", f, [steps, 1, inputs]),
                  helper.make_tensor_value_info("h0", f, [1, 1, hidden]),
                  helper.make_tensor_value_info("c0", f, [1, 1, hidden])],
                 [helper.make_tensor_value_info("y", f, [steps, 1, 1, hidden]),
                  helper.make_tensor_value_info("hn", f, [1, 1, hidden]),
                  helper.make_tensor_value_info("cn", f, [1, 1, hidden])],
                 [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"), numpy_helper.from_array(b, "B")],
                 path, name="lstm_sequence")


def unet(path, size=16, channels=4, levels=3, seed=3):
    """examples/surrogates/poisson_guess's U-Net in small: field[1, 1, S, S] -> 3x3 Conv per level
    with a 2x2 AveragePool before each but the first, then per level back up a nearest 2x
    upsampling made of Reshape and Concat (as torch exports repeat_interleave), an Add of the skip
    connection and a 3x3 Conv (ReLU on the first), a last 3x3 Conv to one channel."""
    rng = np.random.default_rng(seed)
    nodes, inits, c = [], [], channels

    def conv(name, src, cin, cout, act=None):
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (0.1 * rng.standard_normal(cout)).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"), numpy_helper.from_array(b, f"{name}.b")])
        nodes.append(helper.make_node("Conv", [src, f"{name}.w", f"{name}.b"], [name], name=name, pads=[1, 1, 1, 1]))
        if act:
            nodes.append(helper.make_node(act, [name], [name + ".a"], name=name + ".a"))
            return name + ".a"
        return name

    def shape(name, dims):
        inits.append(numpy_helper.from_array(np.array(dims, np.int64), name))
        return name

    skips, x, n = [], "field", size
    for k in range(levels):
        if k:
            nodes.append(helper.make_node("AveragePool", [x], [f"pool{k}"], kernel_shape=[2, 2], strides=[2, 2]))
            x, n = f"pool{k}", n // 2
        x = conv(f"down{k}", x, 1 if k == 0 else c, c)
        skips.append(x)
    for k in range(levels - 2, -1, -1):
        h = n
        steps = [("r0", [1, c, h * h, 1]), ("r1", [1, c, h, 2 * h]), ("r2", [1, c, 2 * h, 2 * h])]
        prev = x
        for j, (tag, dims) in enumerate(steps):
            nodes.append(helper.make_node("Reshape", [prev, shape(f"up{k}.{tag}.shape", dims)], [f"up{k}.{tag}"]))
            prev = f"up{k}.{tag}"
            if j < 2:
                nodes.append(helper.make_node("Concat", [prev, prev], [f"up{k}.c{j}"], axis=3))
                prev = f"up{k}.c{j}"
        nodes.append(helper.make_node("Add", [prev, skips[k]], [f"up{k}.add"]))
        x, n = conv(f"up{k}", f"up{k}.add", c, c, "Relu" if k == levels - 2 else None), 2 * h
    conv("out", x, c, 1)
    return _save(nodes, [helper.make_tensor_value_info("field", TensorProto.FLOAT, [1, 1, size, size])],
                 [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, size, size])], inits, path, name="unet")
