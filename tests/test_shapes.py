"""Shapes as strict as onnxruntime's load, sizes the generated integers hold, opsets and element
types onnx knows, and one-line messages for what a real user meets (issue 12 groups 4 and 8).

Each model here was accepted (or refused with a misleading message) before: generate exited 0 and
the C read out of bounds, or the message named the wrong problem.
"""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import ops
from rosenna.cli import main

F = TensorProto.FLOAT


def save(tmp_path, name, nodes, inputs, outputs, inits=(), opset=17, domains=(), **kwargs):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    model = helper.make_model(graph, opset_imports=imports, producer_name="tests")
    model.ir_version = 8
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(model, path, **kwargs)
    return path


def vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, shape, dtype=np.float32):
    return numpy_helper.from_array(np.ones(shape, dtype), name)


def refused(tmp_path, capsys, path, *needles, extra=()):
    out = tmp_path / "out"
    rc = main(["generate", path, "--out", str(out)] + list(extra))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) <= 2, err  # one line, at most one hint line
    for needle in needles:
        assert needle in err, err
    assert not out.exists() or not [f for f in os.listdir(out) if not f.startswith(".")]
    return err


# -- group 4: inconsistent shapes ------------------------------------------------------------------

def test_gemm_inner_dimensions_disagree(tmp_path, capsys):
    path = save(tmp_path, "gemm_k", [helper.make_node("Gemm", ["x", "W"], ["y"])], [vi("x", [1, 3])],
                [vi("y", [1, 4])], [const("W", (7, 4))])
    refused(tmp_path, capsys, path, "ONNX shape inference rejects the model", "Gemm",
            "Dimension mismatch in unification between 7 and 3")


def test_dim_binding_contradicts_the_model(tmp_path, capsys):
    """--dim K=5 where the model's own weights fix K=3 (UBSan: index out of bounds before)."""
    path = save(tmp_path, "dim_k", [helper.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", [1, "K"])],
                [vi("y", [1, 4])], [const("W", (3, 4))])
    refused(tmp_path, capsys, path, "MatMul", "Incompatible dimensions", extra=["--dim", "K=5"])
    assert main(["generate", path, "--out", str(tmp_path / "ok"), "--dim", "K=3"]) == 0


def test_dim_binding_contradicts_a_declared_output(tmp_path, capsys):
    path = save(tmp_path, "dim_out", [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, "K"])],
                [vi("y", [1, 6])])
    refused(tmp_path, capsys, path, "ONNX shape inference rejects the model", extra=["--dim", "K=5"])


@pytest.mark.parametrize("case", ["add", "concat"])
def test_strict_inference_reasons(tmp_path, capsys, case):
    if case == "add":
        node, want = helper.make_node("Add", ["x", "W"], ["y"]), "Incompatible dimensions"
    else:
        node, want = helper.make_node("Concat", ["x", "W"], ["y"], axis=0), "Inferred=4 Declared=3"
    path = save(tmp_path, case, [node], [vi("x", [1, 3])], [vi("y", ["a", "b"])], [const("W", (7, 4))])
    refused(tmp_path, capsys, path, want)


def test_conv_channels_checked_by_the_op_rule(tmp_path, capsys):
    """ONNX's inference lets Conv channel counts disagree; rosenna's rule in ops/conv.py does not."""
    path = save(tmp_path, "conv_c", [helper.make_node("Conv", ["x", "W"], ["y"])], [vi("x", [1, 2, 5, 5])],
                [vi("y", ["n", "c", "h", "w"])], [const("W", (4, 3, 3, 3))])
    refused(tmp_path, capsys, path, "'Conv_0' (Conv)", "W of shape (4, 3, 3, 3) does not match X of shape "
            "(1, 2, 5, 5) with group=1")


def test_reshape_element_count_checked_by_the_op_rule(tmp_path, capsys):
    shape = numpy_helper.from_array(np.array([2, 5], np.int64), "s")
    path = save(tmp_path, "reshape_n", [helper.make_node("Reshape", ["x", "s"], ["y"])], [vi("x", [1, 3])],
                [vi("y", ["a", "b"])], [shape])
    refused(tmp_path, capsys, path, "(Reshape)", "target shape [2, 5] holds 10 elements, the input (1, 3) 3")


def test_shapes_only_folding_knows_are_checked(tmp_path, capsys):
    """A Gemm fed through a Shape->Concat->Reshape chain: ONNX cannot see the inner dimension (6 vs
    5), only rosenna's folding does, and the Gemm rule in ops/gemm.py refuses it."""
    nodes = [helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Gather", ["sx", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["t64"], axis=0),
             helper.make_node("Max", ["t64", "minus1b"], ["target"]),  # onnx's data propagation stops here
             helper.make_node("Reshape", ["x", "target"], ["flat"]),
             helper.make_node("Gemm", ["flat", "W"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([-1, -1], np.int64), "minus1b"), const("W", (5, 4))]
    path = save(tmp_path, "folded", nodes, [vi("x", ["N", 2, 3])], [vi("y", ["a", "b"])], inits)
    refused(tmp_path, capsys, path, "(Gemm)", "inner dimensions disagree", "has 6", "has 5")


def test_op_rule_and_onnx_inference_must_agree(model, tmp_path, capsys, monkeypatch):
    """The generic cross-check: an op whose rule gives another shape than ONNX inferred is refused
    (shown with a deliberately wrong rule)."""
    monkeypatch.setattr(type(ops.get("Relu")), "shape", lambda self, node, graph: [(1, 99)])
    err = refused(tmp_path, capsys, model("gemm_small"), "(1, 99) by the op's rule", "by ONNX shape inference")
    assert "(Relu)" in err


@pytest.mark.parametrize("value", ["2147483648", "4294967296"])
def test_dimension_beyond_32_bit_index(tmp_path, capsys, value):
    path = save(tmp_path, "big", [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, "K"])], [vi("y", [1, "K"])])
    refused(tmp_path, capsys, path, f"holds {value} elements", "32-bit", extra=["--dim", f"K={value}"])


def test_scratch_beyond_32_bit_index(tmp_path, capsys):
    """Each value fits, their per-point total does not."""
    n = 2**30
    path = save(tmp_path, "wide", [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["b"]),
                                   helper.make_node("Add", ["a", "b"], ["y"])], [vi("x", [1, n])], [vi("y", [1, n])])
    refused(tmp_path, capsys, path, "32-bit")


def test_opset_newer_than_onnx_knows(tmp_path, capsys):
    path = save(tmp_path, "op99", [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 3])], [vi("y", [1, 3])],
                opset=99)
    refused(tmp_path, capsys, path, "opset 99", f"up to {onnx.defs.onnx_opset_version()}")


def test_element_type_zero(tmp_path, capsys):
    path = save(tmp_path, "t0", [helper.make_node("Relu", ["x"], ["y"])], [vi("x", [1, 3], 0)], [vi("y", [1, 3])])
    refused(tmp_path, capsys, path, "input 'x' has element type 0", "not an ONNX element type")


# -- group 8: messages that name the actual problem ------------------------------------------------

def test_missing_external_data_gives_onnx_reason(tmp_path, capsys):
    path = save(tmp_path, "ext", [helper.make_node("MatMul", ["x", "W"], ["y"])], [vi("x", [1, 3])],
                [vi("y", [1, 4])], [const("W", (3, 4))], save_as_external_data=True,
                all_tensors_to_one_file=True, location="ext.onnx.data", size_threshold=0)
    os.remove(tmp_path / "ext.onnx.data")
    err = refused(tmp_path, capsys, path, "external data cannot be read", "tensor name: W", "ext.onnx.data")
    assert "not an ONNX model" not in err


def test_unknown_domain_says_so(tmp_path, capsys):
    """An op of a foreign domain feeding a standard op was refused as 'output shape is not static'."""
    path = save(tmp_path, "dom", [helper.make_node("Foo", ["x"], ["h"], domain="com.example"),
                                  helper.make_node("Relu", ["h"], ["y"])], [vi("x", [1, 3])], [vi("y", ["a", "b"])],
                domains=["com.example"])
    err = refused(tmp_path, capsys, path, "(com.example.Foo)", "domain 'com.example'")
    assert "not static" not in err


@pytest.mark.parametrize("elem,needle", [(TensorProto.COMPLEX64, "feed it as float32"),
                                         (TensorProto.STRING, "feed it as float32")])
def test_inputs_of_types_rosenna_does_not_hold(tmp_path, capsys, elem, needle):
    """float16, bfloat16, bool and integer inputs are passed as the working float type (ir.HELD_DTYPES);
    complex numbers and strings are refused with what to do."""
    path = save(tmp_path, "typed", [helper.make_node("Identity", ["x"], ["y"])], [vi("x", [1, 3], elem)],
                [vi("y", [1, 3], elem)])
    err = refused(tmp_path, capsys, path, "input 'x' has element type", needle)
    assert "cast integer inputs" not in err


def test_opset_6_broadcasting_is_named(capsys, tmp_path):
    """onnx's own opset-6 PRelu with a per-channel slope: refused, naming the opset rule."""
    data = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "pytorch-converted")
    err = refused(tmp_path, capsys, os.path.join(data, "test_PReLU_2d_multiparam", "model.onnx"),
                  "(PRelu)", "do not broadcast by the rules of opset 7 and later", "opset 6")
    assert "cannot be checked" not in err
