"""A 3-D Conv over more than rosenna.passes.conv_pad.PAD_ABOVE border regions reads a zero-padded
copy of its input (one loop nest instead of one per region): symmetric and asymmetric pads,
stride, dilation, groups and a fused ReLU, in C and Fortran against onnxruntime, one batch; 2-D
convs keep their copy-free nests."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import conformance, generate as gen
from rosenna.loopir import Comment, Loop

RNG = np.random.default_rng(30)

#: name -> (x shape, W shape, Conv attributes, ReLU after it)
CONVS = {
    "pad1_k3": ((1, 2, 6, 5, 7), (3, 2, 3, 3, 3), {"pads": [1] * 6}, True),
    "asymmetric_stride_dilation": ((1, 4, 9, 8, 7), (4, 2, 3, 2, 3),
                                   {"pads": [2, 1, 0, 0, 2, 1], "strides": [2, 1, 2], "dilations": [2, 1, 1],
                                    "group": 2}, False),
}


def _model(x_shape, w_shape, attrs, relu):
    w = RNG.normal(size=w_shape).astype(np.float32)
    bias = RNG.normal(size=w_shape[0]).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], **attrs)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _case(root, name, model):
    path = root / name
    data = path / "test_data_set_0"
    data.mkdir(parents=True)
    onnx.save(model, str(path / "model.onnx"))
    x = RNG.normal(size=[d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(y, "y").SerializeToString())
    return conformance.Case(name, name, str(path))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("convpad")
    cases = [_case(root / "cases", name, _model(*spec)) for name, spec in CONVS.items()]
    return {o.case.name: o for o in conformance.run(cases, str(root / "work"), rtol=1e-5, atol=1e-5)}


@pytest.mark.parametrize("name", list(CONVS))
def test_padded_3d_convs_match_onnxruntime(outcomes, name):
    o = outcomes[name]
    assert (o.status, o.variant) == ("passed", "as given"), f"{name}: {o.status}: {o.detail}"


def _nests(tmp_path, model):
    """{op label: top-level loop nests} of the plan's per-point body."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    plan = gen.build_plan(path, gen.Options())[1]
    counts, op = {}, None
    for stmt in plan.body:
        if isinstance(stmt, Comment) and stmt.op is not None:
            op = stmt.op.op
        elif isinstance(stmt, Loop):
            counts[op] = counts.get(op, 0) + 1
    return counts


def test_a_3d_conv_is_one_nest_after_its_pad(tmp_path):
    counts = _nests(tmp_path, _model(*CONVS["pad1_k3"]))
    assert counts["Conv"] == 1 and counts["Pad"] == 27, counts


@pytest.mark.parametrize("kernel, pads", [((3, 3), [1] * 4), ((5, 5), [2] * 4)])
def test_a_2d_conv_keeps_its_border_nests(tmp_path, kernel, pads):
    """Also past PAD_ABOVE nests (5x5 with padding 2: 25): 2-D convs are what the CUDA conv kernels take."""
    counts = _nests(tmp_path, _model((1, 2, 8, 8), (3, 2) + kernel, {"pads": pads}, True))
    assert "Pad" not in counts and counts["Conv"] == (9 if kernel == (3, 3) else 25), counts
