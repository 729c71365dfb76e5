"""The operators scientific models add (issue 16) against onnxruntime, in C and Fortran, batched like
test_ops: elementwise math and masks, gated activations (and their fusion), Cast rounding, integer
and bool inputs, float16 initializers, 3-D fields, transposed convolutions, normalisations, Resize,
Tile, Einsum (with '...') and run-time MatMul and Gemm operands."""

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import conformance
from rosenna import generate as gen

F, D = TensorProto.FLOAT, TensorProto.DOUBLE
RNG = np.random.default_rng(16)


def rand(*shape, scale=1.0, dtype=np.float32):
    return (scale * RNG.uniform(-1, 1, shape)).astype(dtype)


def ints(*values):
    return np.array(values, np.int64)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs if isinstance(outputs, list) else [outputs], **attrs)


def model(nodes, inputs, outputs, consts=None, opset=17, elem=F):
    """``inputs``: {name: shape} or {name: (shape, elem_type)}; ``consts``: {name: array}."""
    infos = []
    for name, spec in inputs.items():
        shape, kind = spec if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], tuple) \
            else (spec, elem)
        infos.append(helper.make_tensor_value_info(name, kind, list(shape)))
    graph = helper.make_graph(nodes, "m", infos, [], [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset < 21 else 10
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(m, strict_mode=True).graph.value_info}
    m.graph.output.extend(inferred[n] for n in outputs)  # the outputs with their inferred types
    return onnx.shape_inference.infer_shapes(m)


def sample(info):
    """A random input for onnxruntime's input ``info`` (integers and bools drawn as such)."""
    shape = info.shape
    if info.type == "tensor(bool)":
        return RNG.integers(0, 2, shape).astype(bool)
    for kind in ("int8", "int16", "int32", "int64", "uint8"):
        if info.type == f"tensor({kind})":
            low = 0 if kind.startswith("u") else -9
            return RNG.integers(low, 10, shape).astype(kind)
    dtype = np.float64 if info.type == "tensor(double)" else np.float32
    scale = 40.0 if info.name == "big" else 3.0 if info.name == "wide" else 1.0
    return rand(*shape, scale=scale, dtype=dtype)


def write_case(root, name, proto):
    path = os.path.join(root, name)
    data = os.path.join(path, "test_data_set_0")
    os.makedirs(data)
    onnx.save(proto, os.path.join(path, "model.onnx"))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {}
    for j, info in enumerate(sess.get_inputs()):
        feed[info.name] = sample(info)
        with open(os.path.join(data, f"input_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(feed[info.name], info.name).SerializeToString())
    for j, value in enumerate(sess.run(None, feed)):
        with open(os.path.join(data, f"output_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(np.asarray(value), f"out{j}").SerializeToString())
    return conformance.Case(name, name, path)


MODELS = {
    "unary_math": lambda: model(
        [node("Floor", ["wide"], "fl"), node("Abs", ["x"], "a"), node("Sin", ["wide"], "b"), node("Cos", ["wide"], "c"),
         node("Reciprocal", ["x"], "d"), node("Floor", ["wide"], "e"), node("Ceil", ["wide"], "f"),
         node("Sign", ["fl"], "g"), node("Mish", ["wide"], "h"), node("HardSwish", ["wide"], "i"),
         node("Pow", ["a", "x"], "j"), node("Pow", ["x", "two"], "k"),
         node("Pow", ["x", "three"], "l"), node("Swish", ["wide"], "m", alpha=0.75)],
        {"x": (2, 5), "wide": (3, 4)}, list("abcdefghijklm"),
        {"two": np.array(2.0, np.float32), "three": np.array([3], np.int64)}, opset=24),
    "masks_and_where": lambda: model(
        [node("Less", ["x", "v"], "lt"), node("Greater", ["x", "zero"], "gt"), node("Floor", ["wide"], "fl"),
         node("Equal", ["fl", "one"], "eq"), node("LessOrEqual", ["fl", "one"], "le"),
         node("GreaterOrEqual", ["v", "x"], "ge"), node("And", ["lt", "gt"], "an"), node("Or", ["eq", "ge"], "orr"),
         node("Not", ["an"], "nt"), node("Where", ["an", "x", "v"], "w1"), node("Where", ["eq", "wide", "zero"], "w2"),
         node("Where", ["nt", "x", "fl"], "w3")],
        {"x": (3, 4), "v": (4,), "wide": (3, 4)}, ["lt", "gt", "eq", "le", "an", "orr", "nt", "w1", "w2", "w3"],
        {"zero": np.array(0.0, np.float32), "one": np.array([1.0], np.float32)}),
    "gated_activations_fused": lambda: model(
        [node("Gemm", ["x", "w"], "g", transB=1), node("Sigmoid", ["g"], "sg"), node("Mul", ["g", "sg"], "silu"),
         node("Gemm", ["silu", "w2"], "h"), node("Softplus", ["h"], "sp"), node("Tanh", ["sp"], "th"),
         node("Mul", ["th", "h"], "mish"), node("Gemm", ["mish", "w3"], "k"),
         node("HardSigmoid", ["k"], "hs", alpha=1.0 / 6.0, beta=0.5), node("Mul", ["k", "hs"], "y")],
        {"x": (1, 4)}, ["y"], {"w": rand(6, 4), "w2": rand(6, 5), "w3": rand(5, 3, scale=4.0)}),
    "integer_and_bool_inputs": lambda: model(
        [node("Cast", ["idx"], "fi", to=F), node("Mul", ["fi", "x"], "m"), node("Add", ["idx", "step"], "s"),
         node("Cast", ["s"], "sf", to=F), node("Where", ["flag", "m", "sf"], "y"),
         node("Cast", ["x"], "xi", to=TensorProto.INT32), node("Cast", ["x"], "xb", to=TensorProto.BOOL),
         node("Div", ["idx", "three"], "q")],
        {"idx": ((2, 3), TensorProto.INT32), "flag": ((2, 3), TensorProto.BOOL), "x": (2, 3)},
        ["y", "xi", "xb", "q", "s"], {"step": np.array(7, np.int32), "three": np.array(3, np.int32)}),
    "float16_initializers": lambda: model(
        [node("Cast", ["w16"], "w", to=F), node("MatMul", ["x", "w"], "m"),
         node("Cast", ["b16"], "b", to=F), node("Add", ["m", "b"], "y")],
        {"x": (1, 3)}, ["y"], {"w16": rand(3, 4).astype(np.float16), "b16": rand(4).astype(np.float16)}),
    "matmul_runtime_operands": lambda: model(
        [node("Transpose", ["k"], "kt", perm=[0, 2, 1]), node("MatMul", ["q", "kt"], "s"),
         node("Softmax", ["s"], "p", axis=-1), node("MatMul", ["p", "v"], "att"),
         node("MatMul", ["u", "m"], "um"), node("MatMul", ["um", "u"], "bilinear"),
         node("Einsum", ["q", "k"], "e1", equation="bij,bkj->bik"), node("Einsum", ["m"], "tr", equation="ii"),
         node("Einsum", ["q", "w"], "e2", equation="bij,jk->bk"), node("Einsum", ["u", "m", "u"], "e3", equation="i,ij,j")],
        {"q": (2, 3, 4), "k": (2, 5, 4), "v": (2, 5, 6), "u": (3,), "m": (3, 3)},
        ["att", "bilinear", "e1", "tr", "e2", "e3"], {"w": rand(4, 2)}, opset=17),
    "gemm_runtime_operands": lambda: model(
        [node("Gemm", ["a", "b", "c"], "g1", transA=1, transB=1, alpha=0.5, beta=2.0),
         node("Gemm", ["x", "w", "s"], "g2", beta=0.25), node("Gemm", ["x", "b2"], "g3", alpha=-1.5),
         node("Gemm", ["x", "w", "c2"], "g4")],
        {"a": (3, 2), "b": (4, 3), "c": (4,), "x": (2, 3), "b2": (3, 5), "c2": (2, 4)}, ["g1", "g2", "g3", "g4"],
        {"w": rand(3, 4), "s": np.array(0.75, np.float32)}, opset=13),
    "einsum_ellipsis": lambda: model(
        [node("Einsum", ["q", "k"], "e1", equation="...ij,...kj->...ik"),
         node("Einsum", ["m3"], "e2", equation="...ii->...i"),
         node("Einsum", ["q", "w"], "e3", equation="...j,jk"),
         node("Einsum", ["v", "q"], "e4", equation="...j,...j->...")],
        {"q": (2, 3, 4), "k": (2, 5, 4), "m3": (2, 3, 3), "v": (1, 3, 4)}, ["e1", "e2", "e3", "e4"],
        {"w": rand(4, 2)}, opset=17),
    "recurrent_activations_clip_input_forget": lambda: model(
        [node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=3, clip=0.7, input_forget=1,
              activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.2],
              activation_beta=[0.4]),
         node("GRU", ["x", "Wg", "Rg", "Bg"], ["gy", "gyh"], hidden_size=2, direction="bidirectional", clip=0.9,
              activations=["Sigmoid", "ScaledTanh", "Affine", "Tanh"], activation_alpha=[1.5, 0.5],
              activation_beta=[0.8, 0.1], linear_before_reset=1)],
        {"x": (4, 1, 2)}, ["y", "yh", "yc", "gy", "gyh"],
        {"W": rand(1, 12, 2), "R": rand(1, 12, 3), "B": rand(1, 24, scale=0.2), "Wg": rand(2, 6, 2),
         "Rg": rand(2, 6, 2), "Bg": rand(2, 12, scale=0.2)}),
    "cast_rounds_in_double": lambda: model(
        [node("Cast", ["x"], "s", to=F), node("Cast", ["s"], "d", to=D), node("Sub", ["x", "d"], "y"),
         node("Cast", ["x"], "z", to=TensorProto.INT64)],
        {"x": (2, 6)}, ["y", "s", "z"], elem=D),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("science")
    cases = [write_case(str(root / "cases"), name, build()) for name, build in MODELS.items()]
    return {o.case.name: o for o in conformance.run(cases, str(root / "work"), rtol=1e-5, atol=1e-6)}


@pytest.mark.parametrize("name", list(MODELS))
def test_against_onnxruntime(outcomes, name):
    o = outcomes[name]
    assert (o.status, o.variant) == ("passed", "as given"), f"{name}: {o.status}: {o.detail}"


def _plan(tmp_path, name):
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(MODELS[name](), path)
    return gen.build_plan(path, gen.Options())[1]


def test_gated_activations_fuse_into_the_gemm(tmp_path):
    ops = [op.label for op in _plan(tmp_path, "gated_activations_fused").ops]
    assert ops == ["Gemm+Swish", "Gemm+Mish", "Gemm+HardSwish"]


def test_cast_to_float32_rounds_in_a_double_model(tmp_path):
    """The float64 model's x - double(float(x)) is the float32 rounding error: not zero, exactly
    what onnxruntime gives (an alias would give zeros)."""
    case = write_case(str(tmp_path / "cases"), "c", MODELS["cast_rounds_in_double"]())
    [o] = conformance.run([case], str(tmp_path / "work"), rtol=0.0, atol=0.0)
    assert o.status == "passed", o.detail
    ops = [op.label for op in _plan(tmp_path, "cast_rounds_in_double").ops]
    assert ops.count("Cast") == 2 and "Cast (alias)" in ops  # to float32 rounds, to int64 truncates
