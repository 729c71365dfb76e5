"""Refusals grouped by op, with the workaround: a model of many unsupported nodes of few kinds
gives a few lines; a Tile whose repeats are a graph input names --freeze (and verifies with it);
onnxruntime's own logging stays off stderr."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rosenna.cli import main

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _save(path, nodes, inputs, outputs, inits=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
                              producer_name="tests")
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


def test_many_unsupported_nodes_give_one_line_per_kind(tmp_path, capsys):
    """A chain of 120 Bernoulli nodes (between supported Relus) and a RandomUniformLike: 121
    refused nodes of two kinds, two lines."""
    nodes, value = [], "x"
    for k in range(60):
        nodes.append(helper.make_node("Bernoulli", [value], [f"h{k}"], name=f"poly_feature_bernoulli_{k}"))
        nodes.append(helper.make_node("Relu", [f"h{k}"], [f"r{k}"], name=f"relu_{k}"))
        nodes.append(helper.make_node("Bernoulli", [f"r{k}"], [f"g{k}"], name=f"second_{k}"))
        value = f"g{k}"
    nodes.append(helper.make_node("RandomUniformLike", [value], ["d"], name="det"))
    path = _save(tmp_path / "poly.onnx", nodes, [helper.make_tensor_value_info("x", F, [3, 3])],
                 [helper.make_tensor_value_info("d", F, [3, 3])])
    rc = main(["generate", path, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) <= 4, err
    assert "the model uses 121 unsupported construct(s) of 2 kinds:" in lines[0]
    assert lines[1].strip().startswith("Bernoulli, 120 nodes ('poly_feature_bernoulli_0', 'second_0', "
                                       "'poly_feature_bernoulli_1' and 117 more): not an op rosenna supports"), err
    assert lines[2].strip() == "node 'det' (RandomUniformLike): not an op rosenna supports"
    assert "rosenna info --ops" in lines[3]


def test_repeats_on_a_graph_input_name_freeze(tmp_path, capsys):
    """Repeats fed at run time are refused with the --freeze that makes the model pass; with it,
    verify passes. (Gather indices fed at run time are lowered: tests/test_families_graph.py.)"""
    path = _save(tmp_path / "edges.onnx", [helper.make_node("Tile", ["x", "edges"], ["y"])],
                 [helper.make_tensor_value_info("x", F, [1, 6]), helper.make_tensor_value_info("edges", I64, [2])],
                 [helper.make_tensor_value_info("y", F, [2, 6])])
    rc = main(["verify", path, "--lang", "c"])
    err = capsys.readouterr().err
    assert rc == 2 and "node 'Tile_0' (Tile): repeats are computed at run time" in err, err
    assert "workaround: --freeze edges=edges.npy makes the graph input a constant" in err
    np.save(tmp_path / "edges.npy", np.array([2, 1], np.int64))
    rc = main(["verify", path, "--lang", "c", "--entry", "infer", "--freeze", f"edges={tmp_path / 'edges.npy'}"])
    out, err = capsys.readouterr()
    assert rc == 0 and out.rstrip().endswith("PASS"), out + err


def test_contrib_and_quantized_ops_name_the_workaround(tmp_path, capsys):
    path = _save(tmp_path / "fused.onnx", [helper.make_node("FastGelu", ["x"], ["y"], domain="com.microsoft")],
                 [helper.make_tensor_value_info("x", F, [1, 4])], [helper.make_tensor_value_info("y", F, [1, 4])],
                 opsets=(("", 17), ("com.microsoft", 1)))
    rc = main(["generate", path, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "com.microsoft.FastGelu" in err and "as the exporter wrote it" in err, err
    scale, zero = numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")
    w = numpy_helper.from_array(np.arange(16, dtype=np.uint8).reshape(4, 4), "w")
    U8, I32 = onnx.TensorProto.UINT8, onnx.TensorProto.INT32
    path = _save(tmp_path / "quant.onnx", [helper.make_node("MatMulInteger", ["x", "w"], ["q"]),
                                           helper.make_node("QLinearMatMul", ["x", "s", "z", "w", "s", "z", "s", "z"], ["y"])],
                 [helper.make_tensor_value_info("x", U8, [1, 4])],
                 [helper.make_tensor_value_info("q", I32, [1, 4]), helper.make_tensor_value_info("y", U8, [1, 4])],
                 [scale, zero, w])
    rc = main(["generate", path, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("the float model from before quantization") == 2, err


def test_onnxruntime_logging_is_silent(tmp_path, capfd):
    """A float64 Conv onnxruntime has no kernel for, and an unused initializer it would warn about:
    rosenna's one line on stderr (file descriptor 2, where onnxruntime's C++ logger writes), nothing
    of onnxruntime's."""
    w = numpy_helper.from_array(np.random.default_rng(0).uniform(-1, 1, (2, 1, 3, 3)), "w")
    unused = numpy_helper.from_array(np.ones(3), "unused")
    d = TensorProto.DOUBLE
    path = _save(tmp_path / "conv64.onnx", [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                 [helper.make_tensor_value_info("x", d, [1, 1, 5, 5])],
                 [helper.make_tensor_value_info("y", d, [1, 2, 5, 5])], [w, unused])
    rc = main(["verify", path, "--lang", "c"])
    err = capfd.readouterr().err
    assert rc == 2
    assert err.startswith("rosenna verify: error: ") and len(err.strip().splitlines()) == 1, err


def test_hostile_op_and_input_names_stay_on_their_line(tmp_path, capsys):
    """The refusal keeps its newlines; a newline or ESC in an op, domain or input name does not
    start a line of its own (nor reach the terminal), and the suggested --freeze is shell-quoted."""
    path = _save(tmp_path / "evil.onnx", [helper.make_node("Op\nrosenna: fine\x1b[2J", ["x"], ["y"], domain="evil.d"),
                                          helper.make_node("Tile", ["x", "i dx\n"], ["z"])],
                 [helper.make_tensor_value_info("x", F, [1, 6]), helper.make_tensor_value_info("i dx\n", I64, [2])],
                 [helper.make_tensor_value_info("y", F, [1, 6]), helper.make_tensor_value_info("z", F, [2, 6])],
                 opsets=(("", 17), ("evil.d", 1)))
    rc = main(["generate", path, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "\x1b" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) <= 4 and not any(line.startswith("rosenna: fine") for line in lines), err
    path = _save(tmp_path / "evil_input.onnx", [helper.make_node("Tile", ["x", "i dx\n"], ["z"])],
                 [helper.make_tensor_value_info("x", F, [1, 6]), helper.make_tensor_value_info("i dx\n", I64, [2])],
                 [helper.make_tensor_value_info("z", F, [2, 6])])
    rc = main(["generate", path, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 2, err
    assert "workaround: --freeze 'i dx\\n=i_dx.npy' makes the graph input a constant" in err, err
