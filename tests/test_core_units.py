"""Pure-Python tier: IR verifier, passes, plan and emitted text, without compilers."""

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import frontend, ir, passes
from rosenna.errors import ModelError
from rosenna.generate import Options, build_plan
from rosenna.emit import c, cuda, fortran
from rosenna.strategy import of


def graph_after_passes(path):
    graph = frontend.import_model(path)
    passes.run(graph)
    return graph


def test_verifier_catches_use_before_definition(model):
    graph = frontend.import_model(model("gemm_small"))
    graph.nodes.reverse()
    with pytest.raises(ModelError, match="before it is written"):
        ir.verify(graph, where="a broken pass")


def test_dynamic_shape_chain_folds_away(model):
    graph = graph_after_passes(model("dynamic_reshape"))
    assert [n.op for n in graph.nodes] == ["Alias", "Gemm"]
    assert graph.nodes[1].attrs["_activation"][0] == "Sigmoid"


def test_matmul_add_becomes_gemm(tmp_path):
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
                              [numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
                               numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")])
    path = tmp_path / "mm.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    g = graph_after_passes(str(path))
    assert [n.op for n in g.nodes] == ["Gemm"] and len(g.nodes[0].inputs) == 3


def test_scratch_reused_by_liveness(model):
    _, plan = build_plan(model("gemm_big"), Options())
    # five layers, outputs 20/30/30/40 then y: two ping-pong buffers suffice
    assert len(plan.scratch) == 2 and max(plan.scratch) == 40


def test_identifiers_sanitized_and_unique_under_case_folding(model, tmp_path):
    _, plan = build_plan(model("evil_names"), Options(name="evil"))
    idents = [w.ident for w in plan.weights]
    assert len({i.lower() for i in idents}) == len(idents)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]{0,62}", i) for i in idents)
    text = c.source(of(plan), "stamp") + fortran.module(plan, "stamp", 16)
    for bad in ('"', "*/ ", "ü", "Ä", "&!"):
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("#include",)))
        assert bad not in body.replace('"RSNNAWT"', ""), bad


def test_literals_round_trip(tmp_path):
    """The shortest round-trip decimals give the exact bits back in the C, CUDA and Fortran files,
    special values included."""
    values = np.array([0.1, -0.0, 1e-45, 3.4028235e38, -1.17549435e-38, 1 / 3, np.inf, -np.inf, np.nan], np.float32)
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9])],
                              [numpy_helper.from_array(values.reshape(1, 9), "w")])
    path = tmp_path / "lit.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    _, plan = build_plan(str(path), Options())
    src = c.source(of(plan), "stamp")
    body = src[src.index("= {") + 3:src.index("};")]
    texts = [t.strip() for t in body.split(",")]
    assert texts[-3:] == ["INFINITY", "-INFINITY", "NAN"]
    parsed = np.array([float(t.rstrip("f")) for t in texts[:-3]], np.float32)
    assert parsed.tobytes() == values[:-3].tobytes()
    mod = fortran.module(plan, "stamp", 16)
    assert "transfer(2139095040_int32, 1.0_rk)" in mod  # +inf bits
    data = re.search(rf"{plan.weights[0].ident}\(9\) = \[(.*?)\]", mod, re.S).group(1)
    texts = re.findall(r"transfer\([^)]*\)|[^,\s&]+", data)
    assert all(t.endswith("_rk") for t in texts[:-3])
    parsed = np.array([float(t[:-len("_rk")]) for t in texts[:-3]], np.float32)
    assert parsed.tobytes() == values[:-3].tobytes()
    kernel = cuda.kernel_source(plan, "stamp")
    body = kernel[kernel.index("= {", kernel.index("float ")) + 3:]
    texts = [t.strip() for t in body[:body.index("};")].split(",")]
    assert np.array([float(t.rstrip("f")) for t in texts[:-3]], np.float32).tobytes() == values[:-3].tobytes()


def _exactly_rounds_to(text, value):
    """Whether the decimal ``text`` rounds to ``value`` (float32 or float64) when read as that type
    directly, as a C compiler reads a literal: closer to it than to either neighbour, exactly."""
    from fractions import Fraction

    exact, v = Fraction(text), Fraction(float(value))
    below, above = (np.nextafter(value, value.dtype.type(-np.inf)), np.nextafter(value, value.dtype.type(np.inf)))
    return all(abs(exact - v) < abs(exact - Fraction(float(n))) or (abs(exact - v) == abs(exact - Fraction(float(n)))
                                                                   and int(value.view(np.uint64 if value.dtype == np.float64
                                                                                      else np.uint32)) % 2 == 0)
               for n in (below, above) if np.isfinite(n))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_decimal_texts_are_the_shortest_that_round_trip(dtype):
    """Random bit patterns (subnormals, extremes, every exponent) and a few named values: each text
    reads back to the same bits (float(), and for a sample exactly, as a compiler reads a literal),
    no text with one digit fewer does, every text is a C floating constant (a point or an exponent),
    and the exponent form appears only where it is shorter than the positional one; a subnormal
    keeps its type's digits (gfortran reads 1e-45 as zero, not as the nearest subnormal)."""
    from rosenna.loopir import decimal_texts

    rng = np.random.default_rng(4)
    uint = np.uint64 if dtype == np.float64 else np.uint32
    bits = rng.integers(0, np.iinfo(uint).max, size=4000, dtype=np.uint64, endpoint=True).astype(uint)
    named = np.array([0.0, -0.0, 1.0, -2.0, 0.1, 100.0, 1e7, 123456.7, 2.5e-5, 1 / 3], dtype)
    weights = (rng.standard_normal(4000) * np.exp2(rng.integers(-12, 24, 4000))).astype(dtype)  # (numpy's own texts)
    values = np.concatenate([named, bits.view(dtype), weights])
    values = values[np.isfinite(values)]
    texts = decimal_texts(values)
    assert np.array([float(t) for t in texts], np.float64).astype(dtype).tobytes() == values.tobytes()
    assert texts[:10] == (["0.0", "-0.0", "1.0", "-2.0", "0.1", "1e2", "1e7", "123456.7", "2.5e-5", "0.33333334"]
                          if dtype == np.float32 else
                          ["0.0", "-0.0", "1.0", "-2.0", "0.1", "1e2", "1e7", "123456.7", "2.5e-5", "0.3333333333333333"])
    for text in texts:
        assert re.fullmatch(r"-?\d+\.\d+|-?\d(\.\d+)?e-?\d+", text), text
    for value, text in list(zip(values, texts))[::12]:
        assert _exactly_rounds_to(text, value), (value, text)
        digits = len(re.sub(r"e.*|[-.]", "", text).strip("0")) or 1
        if value != 0 and abs(value) < np.finfo(dtype).tiny:  # a subnormal keeps its type's digits
            assert len(re.sub(r"e.*|[-.]", "", text).lstrip("0")) >= (9 if dtype == np.float32 else 17) - 2, text
        elif digits > 1:  # one digit fewer, correctly rounded, reads back to another number
            assert dtype(float(f"{float(value):.{digits - 2}e}")) != value, (value, text)
        if "e" in text:  # (the positional form: numpy's, with a 0 after a trailing point)
            positional = np.format_float_positional(value, unique=True)
            assert len(text) < len(positional + "0" if positional.endswith(".") else positional), text


def test_generated_c_names_model_nodes_in_comments(model):
    _, plan = build_plan(model("gemm_small"), Options())
    src = c.source(of(plan), "stamp")
    assert "/* Gemm+Relu: fc0+act0 */" in src


def test_per_point_scratch_is_thread_private_for_clang_device_passes(model):
    """clang's OpenMP device passes put a declare-target function's local arrays on a per-team
    stack that falls back to device malloc (NULL once a million threads exhaust the heap: the
    illegal address of the H200 clang-16 gate). The per-point routine names every scratch array
    thread-private for those passes only; the host SIMD block routine keeps plain arrays."""
    _, plan = build_plan(model("gemm_big"), Options())
    src = c.source(of(plan), "stamp")
    guard = "#if defined(_OPENMP) && defined(__clang__) && (defined(__NVPTX__) || defined(__AMDGPU__))"
    pragma = "#pragma omp allocate(t0, t1) allocator(omp_thread_mem_alloc)"
    point = src[src.index(f"void {plan.name}_infer("):]
    point = point[:point.index("\n}\n")]
    assert f"{guard}\n{pragma}\n#endif" in point
    assert point.index("float t1[40];") < point.index(pragma) < point.index("/* Gemm")
    assert src.count(pragma) == 1


def test_store_offsets_are_sorted_and_unique():
    """parallel's element sets (which stores of a launch meet) are np.unique's, computed by sorting:
    evenly spaced runs with repeats, random values, one value, none."""
    from rosenna import parallel

    rng = np.random.default_rng(3)
    runs = (np.arange(64)[:, None] * 40 + np.arange(48)[None, :]).ravel()
    for values in (runs, rng.integers(-50, 50, 1000), np.array([7]), np.zeros(0, np.int64)):
        got = parallel._unique(values.astype(np.int64))
        assert np.array_equal(got, np.unique(values)) and got.dtype == np.int64, values[:8]


def test_rewrite_keeps_a_run_time_offset():
    """The whole-field rewriting (substituted indices, renamed loops) keeps a load's and a store's
    run-time offset, itself rewritten, instead of dropping it to a fixed element."""
    from rosenna.loopir import Assign, Idx, Loop, Ref
    from rosenna.strategy.field.rewrite import rewrite

    offset = Ref("index", Idx.of("i"))
    body = [Loop("i", 4, [Assign(Ref("y", Idx.of("i"), offset), Ref("x", Idx((), 0), offset))])]
    (loop,) = rewrite(body, {}, fresh=lambda: "j")
    (store,) = loop.body
    assert store.target.at == Ref("index", Idx.of("j")) and store.expr.at == Ref("index", Idx.of("j"))
    assert store.target.idx == Idx.of("j")


def test_element_of_takes_only_the_same_element():
    """element_of replaces loads of the element being computed and refuses any other load: another
    element, a run-time offset, a loop variable."""
    from rosenna.loopir import Bin, Idx, Num, Ref, Var, element_of

    i, env = Idx.of("i"), {"a": Bin("*", Num(2.0), Var("v"))}
    assert element_of(Bin("+", Ref("a", i), Num(1.0)), env, i) == Bin("+", env["a"], Num(1.0))
    assert element_of(Ref("a", Idx.of("k")), env, i) is None
    assert element_of(Ref("a", i, Ref("index", i)), env, i) is None
    assert element_of(Var("i"), env, i) is None
    assert element_of(Ref("b", i), env, i) is None
