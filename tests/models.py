"""Test models built with onnx.helper (deterministic), shared by the test modules."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rosenna import zoo


def _model(nodes, inputs, outputs, inits, opset=17, name="m"):
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="tests")
    model.ir_version = 8
    return model


def two_in_two_out(dtype=np.float32):
    """a[1,3], b[1,2] -> p = relu(Gemm(concat-free: a@W1 + b@W2 + c)), q = tanh(Gemm(b))."""
    rng = np.random.default_rng(5)
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    w1 = rng.standard_normal((3, 4)).astype(dtype)
    w2 = rng.standard_normal((2, 4)).astype(dtype)
    c = rng.standard_normal(4).astype(dtype)
    w3 = rng.standard_normal((2, 2)).astype(dtype)
    nodes = [
        helper.make_node("MatMul", ["a", "w1"], ["m1"], name="mm1"),
        helper.make_node("MatMul", ["b", "w2"], ["m2"], name="mm2"),
        helper.make_node("Add", ["m1", "m2"], ["s"], name="add"),
        helper.make_node("Add", ["s", "c"], ["s2"], name="bias"),
        helper.make_node("Relu", ["s2"], ["p"], name="relu"),
        helper.make_node("Gemm", ["b", "w3"], ["g"], name="g"),
        helper.make_node("Tanh", ["g"], ["q"], name="tanh"),
    ]
    return _model(nodes,
                  [helper.make_tensor_value_info("a", elem, ["N", 3]), helper.make_tensor_value_info("b", elem, ["N", 2])],
                  [helper.make_tensor_value_info("p", elem, ["N", 4]), helper.make_tensor_value_info("q", elem, ["N", 2])],
                  [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                   numpy_helper.from_array(c, "c"), numpy_helper.from_array(w3, "w3")])


def matmul_const(dtype=np.float32):
    """x[1,2,3] @ W[3,5] + bias, sigmoid; then a constant [4,2] @ reshaped runtime [2,5]."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((3, 5)).astype(dtype)
    bias = rng.standard_normal(5).astype(dtype)
    left = rng.standard_normal((4, 2)).astype(dtype)
    shape = np.array([2, 5], np.int64)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Add", ["h", "bias"], ["hb"], name="add"),
        helper.make_node("Sigmoid", ["hb"], ["hs"], name="sig"),
        helper.make_node("Reshape", ["hs", "shape"], ["r"], name="reshape"),
        helper.make_node("MatMul", ["left", "r"], ["y"], name="mm_left"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias"),
                   numpy_helper.from_array(left, "left"), numpy_helper.from_array(shape, "shape")])


def evil_names():
    """Names with quotes, comment ends, newlines, &, !, non-ASCII, and case-fold collisions."""
    rng = np.random.default_rng(7)
    names = {"in": 'in"put*/\n&!', "w": "Weight'*/", "W": "weight'*/", "b": "bïas\n!&", "out": "out/*ü*/ \"q\""}
    nodes = [
        helper.make_node("MatMul", [names["in"], names["w"]], ["h one"], name="node */ \"evil\"\n!&"),
        helper.make_node("MatMul", ["h one", names["W"]], ["h two"], name="NODE ÄÖ"),
        helper.make_node("Add", ["h two", names["b"]], ["h three"], name="add!&"),
        helper.make_node("Relu", ["h three"], [names["out"]], name="relu'"),
    ]
    return _model(nodes, [helper.make_tensor_value_info(names["in"], TensorProto.FLOAT, [1, 3])],
                  [helper.make_tensor_value_info(names["out"], TensorProto.FLOAT, [1, 2])],
                  [numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), names["w"]),
                   numpy_helper.from_array(rng.standard_normal((4, 2)).astype(np.float32), names["W"]),
                   numpy_helper.from_array(rng.standard_normal(2).astype(np.float32), names["b"])])


def dynamic_reshape():
    """The Shape->Gather->Unsqueeze->Concat->Reshape chain of dynamic-shape exports, then a Gemm."""
    rng = np.random.default_rng(8)
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"], name="shape"),
        helper.make_node("Gather", ["sh", "zero"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsq"),
        helper.make_node("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Gemm", ["flat", "w", "b"], ["y0"], name="fc", transB=1),
        helper.make_node("Sigmoid", ["y0"], ["y"], name="sig"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 3])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
                  [numpy_helper.from_array(np.array(0, np.int64), "zero"),
                   numpy_helper.from_array(np.array([0], np.int64), "axes0"),
                   numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
                   numpy_helper.from_array(rng.standard_normal((4, 6)).astype(np.float32), "w"),
                   numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")])


def gemm_bias_broadcast():
    """A Gemm whose bias is one value broadcast to every output: refused."""
    w = np.ones((3, 2), np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "c"], ["y"], name="fc", transB=1)]  # w is [out, in]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.ones(1, np.float32), "c")])


def unsupported_ops():
    """Two standard ops rosenna does not support (random ones), beside a supported one."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="ok"),
        helper.make_node("Bernoulli", ["r"], ["d"], name="the_coin"),
        helper.make_node("RandomUniformLike", ["r"], ["h"], name="the_noise"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                  [helper.make_tensor_value_info("d", TensorProto.FLOAT, [2, 2]),
                   helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 2])], [])


def int_input():
    nodes = [helper.make_node("Cast", ["x"], ["y"], name="cast", to=TensorProto.FLOAT)]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT64, [1, 2])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])], [])


def symbolic_inner():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "F"])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "F"])], [])


BUILDERS = {
    "gemm_small": lambda: zoo.MODELS["gemm_small"](),
    "gemm_big": lambda: zoo.MODELS["gemm_big"](),
    "gemm_big_f64": lambda: zoo.MODELS["gemm_big"](np.float64),
    "two_in_two_out": two_in_two_out,
    "matmul_const": matmul_const,
    "evil_names": evil_names,
    "dynamic_reshape": dynamic_reshape,
    "gemm_bias_broadcast": gemm_bias_broadcast,
    "unsupported_ops": unsupported_ops,
    "int_input": int_input,
    "symbolic_inner": symbolic_inner,
}


def write(name, directory):
    path = directory / f"{name}.onnx"
    if not path.exists():
        onnx.save(BUILDERS[name](), str(path))
    return str(path)


def output_aliases():
    """Outputs that are not computed by a node of their own: the input itself (Identity), a
    constant, the same value twice, and a reshape of an intermediate that is also an output."""
    rng = np.random.default_rng(9)
    nodes = [
        helper.make_node("Identity", ["x"], ["echo"], name="echo"),
        helper.make_node("Gemm", ["x", "w"], ["h"], name="fc", transB=1),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["r_again"], name="again"),
        helper.make_node("Reshape", ["r", "shape"], ["r_flat"], name="flat"),
        helper.make_node("Identity", ["k"], ["const_out"], name="const"),
    ]
    f = TensorProto.FLOAT
    return _model(nodes, [helper.make_tensor_value_info("x", f, [1, 3])],
                  [helper.make_tensor_value_info("echo", f, [1, 3]), helper.make_tensor_value_info("r", f, [1, 4]),
                   helper.make_tensor_value_info("r_again", f, [1, 4]), helper.make_tensor_value_info("r_flat", f, [4]),
                   helper.make_tensor_value_info("const_out", f, [2])],
                  [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
                   numpy_helper.from_array(np.array([4], np.int64), "shape"),
                   numpy_helper.from_array(np.array([1.5, -2.25], np.float32), "k")])


BUILDERS["output_aliases"] = output_aliases
