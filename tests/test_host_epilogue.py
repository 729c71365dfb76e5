"""Pointwise epilogues of the host batch (rosenna/strategy/point/epilogue.py): a chain of
elementwise nodes after a Gemm, MatMul or Conv folded into the producer's store, where it may be.

The cases a wrong fold would get wrong: a value of the chain read again after it (it must stay
stored: the chain is cut there), a chain ending at the model's output, a node that is not
elementwise in the middle (the chain stops before it), a chain whose output reuses the buffer the
producer reads (a copy loop), a Conv's 4-D output. The folded block is checked against
onnxruntime through every entry point (``verify``), and against the unfolded loops bit for bit.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import op_models
from rosenna import strategy
from rosenna.generate import Options, build_plan
from rosenna.loopir import Assign, Loop, Ref, walk
from rosenna.strategy.point.epilogue import fuse
from rosenna.verify import verify


def _mixed(path):
    """x[1, 6] ->
    a = Gemm; Softsign as Abs/Add/Div                      (folded: three nodes)
    c = Gemm; Mul by 2; Softmax; Mul by 3                  (the Mul folded; the Softmax is not
                                                            elementwise: the chain stops there)
    d = Gemm; e = Sigmoid(d) -> output y1; f = Gemm(d)     (d read again by f: nothing folded)
    f; Mul by 2 -> output y2                               (folded into f: a chain ending at y)."""
    rng = np.random.default_rng(11)
    inits, nodes = [], []

    def gemm(name, src, k, n):
        inits.extend([numpy_helper.from_array((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), f"{name}.w"),
                      numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), f"{name}.b")])
        nodes.append(helper.make_node("Gemm", [src, f"{name}.w", f"{name}.b"], [name], name=name, transB=1))
        return name

    def node(op, ins, out, **attrs):
        nodes.append(helper.make_node(op, ins, [out], name=f"n_{out}", **attrs))
        return out

    for name, value in (("one", 1.0), ("two", 2.0), ("three", 3.0)):
        inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
    a = gemm("a", "x", 6, 8)
    s = node("Div", [a, node("Add", [node("Abs", [a], "a1"), "one"], "a2")], "s")
    c = gemm("c", s, 8, 8)
    m = node("Mul", [c, "two"], "m")
    sm = node("Mul", [node("Softmax", [m], "soft", axis=1), "three"], "sm")
    d = gemm("d", sm, 8, 8)
    node("Sigmoid", [d], "y1")
    node("Mul", [gemm("f", d, 8, 4), "two"], "y2")
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])],
                              [helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 8]),
                               helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def _conv_gelu(path):
    """field[1, 2, 6, 6] -> Conv(4) -> GELU in its tanh form (Pow/Mul/Add/Mul/Tanh/Add/Mul/Mul) ->
    Conv(1): the chain over a 4-D output, between two Convs."""
    rng = np.random.default_rng(12)
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
             (("three", 3.0), ("k", 0.044715), ("r", np.sqrt(2 / np.pi)), ("one", 1.0), ("half", 0.5))]
    inits += [numpy_helper.from_array((0.4 * rng.standard_normal(s)).astype(np.float32), n) for n, s in
              (("w0", (4, 2, 3, 3)), ("b0", (4,)), ("w1", (1, 4, 3, 3)), ("b1", (1,)))]
    nodes = [helper.make_node("Conv", ["field", "w0", "b0"], ["h"], name="conv0", pads=[1, 1, 1, 1])]
    for op, ins, out in [("Pow", ["h", "three"], "p"), ("Mul", ["p", "k"], "pk"), ("Add", ["h", "pk"], "s"),
                         ("Mul", ["s", "r"], "sr"), ("Tanh", ["sr"], "t"), ("Add", ["t", "one"], "a"),
                         ("Mul", ["h", "a"], "m"), ("Mul", ["m", "half"], "g")]:
        nodes.append(helper.make_node(op, ins, [out], name=f"gelu_{out}"))
    nodes.append(helper.make_node("Conv", ["g", "w1", "b1"], ["out"], name="conv1", pads=[1, 1, 1, 1]))
    graph = helper.make_graph(nodes, "cg", [helper.make_tensor_value_info("field", TensorProto.FLOAT, [1, 2, 6, 6])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 1, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host_epilogue")
    return {"mixed": _mixed(tmp / "mixed.onnx"), "conv_gelu": _conv_gelu(tmp / "conv_gelu.onnx")}


def _plan(path):
    return build_plan(path, Options(lang="c"))[1]


def test_what_is_folded_and_where_a_chain_is_cut(models):
    plan = _plan(models["mixed"])
    body, fused = fuse(plan)
    assert [(f.nodes[0], f.ops) for f in fused] == [("a", ("Abs", "Add", "Div")), ("c", ("Mul",)), ("f", ("Mul",))]
    ops = [s.op.label for s in body if hasattr(s, "op") and s.op is not None]
    # the Softmax and what follows it keep their loops; d's Sigmoid too (d is read again by f)
    assert ops == ["Gemm+Abs+Add+Div", "Gemm+Mul", "Softmax", "Mul", "Gemm", "Sigmoid", "Gemm+Mul"]
    stored = {s.target.buf for s in walk(body) if isinstance(s, Assign) and isinstance(s.target, Ref)}
    assert {"a", "a1", "a2", "c", "f"}.isdisjoint(stored) and {"s", "m", "d", "y1", "y2"} <= stored
    # the chain ending at the output stores into y
    assert plan.storage["y2"][0] == "y"
    # the strategy records it, and the plan itself is left as it was
    s = strategy.decide(plan)
    assert s.host_body == body and "Abs+Add+Div after a" in s.host.value("epilogues")
    assert len([c for c in plan.body if hasattr(c, "op") and c.op is not None]) == 12


def test_a_conv_chain_over_a_4d_output(models):
    plan = _plan(models["conv_gelu"])
    body, fused = fuse(plan)
    assert [f.ops for f in fused] == [("Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul", "Mul")]
    loops = [s for s in body if isinstance(s, Loop)]
    copies = [s for s in loops if len(s.body) == 1 and isinstance(s.body[0], Assign)
              and isinstance(s.body[0].expr, Ref)]
    assert len(copies) == int(fused[0].copy)
    assert not any(isinstance(s, Assign) and isinstance(s.expr, Ref) and s.target.buf == "p" for s in walk(body))


def test_the_output_buffer_shared_with_the_producers_input_takes_a_copy(tmp_path):
    """Gemm -> Abs (its fused activation) -> Neg: the plan puts Neg's output in the buffer the
    Gemm read (free after it); the fold stores into the Gemm's own buffer and one loop copies it,
    as the Gemm still reads its input; verified against onnxruntime."""
    rng = np.random.default_rng(2)
    inits = [numpy_helper.from_array(rng.standard_normal((5, 5)).astype(np.float32), "w0"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b0"),
             numpy_helper.from_array(rng.standard_normal((5, 5)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b2")]
    nodes = [helper.make_node("Gemm", ["x", "w0", "b0"], ["g0"], transB=1),
             helper.make_node("Gemm", ["g0", "w1", "b1"], ["g1"], transB=1),
             helper.make_node("Abs", ["g1"], ["ab"]), helper.make_node("Neg", ["ab"], ["ng"]),
             helper.make_node("Gemm", ["ng", "w2", "b2"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "cp.onnx"))
    plan = _plan(str(tmp_path / "cp.onnx"))
    body, fused = fuse(plan)
    assert plan.storage["ng"] == plan.storage["g0"], "the plan no longer reuses the buffer: pick another case"
    assert [(f.ops, f.copy) for f in fused] == [(("Neg",), True)]
    _, results = verify(str(tmp_path / "cp.onnx"), Options(lang="c"), cases=37)
    assert results and all(r.passed for r in results), [r.message() for r in results if not r.passed]


@pytest.mark.parametrize("name,lang", [("mixed", "both"), ("conv_gelu", "c")])
def test_folded_blocks_verify_against_onnxruntime(models, name, lang):
    """Every entry point (the host batch's folded block in full and partial blocks, the per-point
    routine unfolded) against onnxruntime: C and Fortran, the conv net in C alone."""
    _, results = verify(models[name], Options(lang=lang), cases=37)
    assert results and all(r.passed for r in results), [r.message() for r in results if not r.passed]
