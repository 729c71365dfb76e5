"""The operators beyond what the ONNX node tests exercise, against onnxruntime, C and Fortran.

Each model is a few nodes built with onnx.helper; onnxruntime's outputs on random inputs become
the expected outputs, and the models run through the conformance batch runner (one compile per
model, one C and one Fortran driver for all). Then the BatchNormalization folding, the refusals
and the recurrent stepping pattern.
"""

import os
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import op_models
from rosenna import conformance
from rosenna import generate as gen
from rosenna.errors import UnsupportedOp

F = TensorProto.FLOAT
RNG = np.random.default_rng(42)


def rand(*shape, scale=1.0):
    return (scale * RNG.uniform(-1, 1, shape)).astype(np.float32)


def ints(*values):
    return np.array(values, np.int64)


def model(nodes, inputs, outputs, consts=None, opset=17):
    """``inputs``: {name: shape}; ``outputs``: names; ``consts``: {name: array} as initializers."""
    graph = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, F, list(s)) for n, s in inputs.items()],
        [helper.make_tensor_value_info(n, F, None) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)  # gives the outputs their shapes


def conv(x, w, out="y", b=None, **attrs):
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [out], **attrs)


def lstm_weights(dirs, hidden, inputs, gates=4):
    return {"W": rand(dirs, gates * hidden, inputs), "R": rand(dirs, gates * hidden, hidden),
            "B": rand(dirs, 2 * gates * hidden, scale=0.2)}


MODELS = {
    "conv_depthwise_multiplier": lambda: model(
        [conv("x", "w", b="b", group=4, strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2])],
        {"x": (1, 4, 9, 9)}, ["y"], {"w": rand(8, 1, 3, 3), "b": rand(8)}),
    "conv_same_lower_grouped": lambda: model(
        [conv("x", "w", auto_pad="SAME_LOWER", strides=[2, 2], group=2)],
        {"x": (1, 4, 7, 8)}, ["y"], {"w": rand(6, 2, 4, 3)}),
    "conv_same_upper_valid": lambda: model(
        [conv("x", "w", "h", auto_pad="SAME_UPPER"), conv("h", "w2", auto_pad="VALID", strides=[2, 3])],
        {"x": (1, 2, 8, 9)}, ["y"], {"w": rand(3, 2, 2, 2), "w2": rand(2, 3, 3, 2)}),
    "conv_1d_dilated": lambda: model(
        [conv("x", "w", b="b", dilations=[2], pads=[2, 1])], {"x": (1, 3, 11)}, ["y"],
        {"w": rand(4, 3, 3), "b": rand(4)}),
    "conv_batch2_relu": lambda: model(
        [conv("x", "w", "c", b="b", pads=[1, 1, 1, 1]), helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1)],
        {"x": (2, 3, 6, 5)}, ["y"], {"w": rand(4, 3, 3, 3), "b": rand(4)}),
    "conv_bn_relu_folded": lambda: model(
        [conv("x", "w", "c", b="b", pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], epsilon=1e-3),
         helper.make_node("Relu", ["n"], ["y"])],
        {"x": (1, 3, 6, 6)}, ["y"],
        {"w": rand(4, 3, 3, 3), "b": rand(4), "s": rand(4) + 1.5, "bb": rand(4), "m": rand(4),
         "v": rand(4) + 1.2}),
    "gemm_bn": lambda: model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1),
         helper.make_node("BatchNormalization", ["g", "s", "bb", "m", "v"], ["y"])],
        {"x": (1, 5)}, ["y"],
        {"w": rand(3, 5), "b": rand(3), "s": rand(3) + 1.5, "bb": rand(3), "m": rand(3), "v": rand(3) + 1.2}),
    "batchnorm_standalone": lambda: model(
        [helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["y"])],
        {"x": (1, 3, 4, 2)}, ["y"], {"s": rand(3) + 1.5, "bb": rand(3), "m": rand(3), "v": rand(3) + 1.2}),
    "maxpool_ceil_pads_dilations": lambda: model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 1, 0],
                          dilations=[1, 2], ceil_mode=1)], {"x": (1, 2, 9, 8)}, ["y"], opset=12),
    "maxpool_all_negative_padding": lambda: model(
        [helper.make_node("Sub", ["x", "ten"], ["n"]),
         helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])],
        {"x": (1, 1, 4, 4)}, ["y"], {"ten": np.array([10.0], np.float32)}),
    "avgpool_include_pad_ceil": lambda: model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                          count_include_pad=1, ceil_mode=1)], {"x": (1, 2, 8, 7)}, ["y"], opset=19),
    "avgpool_exclude_pad_1d": lambda: model(
        [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[4], strides=[3], pads=[2, 1])],
        {"x": (1, 2, 10)}, ["y"]),
    "global_pools": lambda: model(
        [helper.make_node("GlobalAveragePool", ["x"], ["a"]), helper.make_node("GlobalMaxPool", ["x"], ["m"])],
        {"x": (1, 3, 5, 4)}, ["a", "m"]),
    "pad_modes_axes_negative": lambda: model(
        [helper.make_node("Pad", ["x", "p1", "", "ax"], ["a"], mode="reflect"),
         helper.make_node("Pad", ["a", "p2"], ["b"], mode="edge"),
         helper.make_node("Pad", ["b", "p3", "cv"], ["c"], mode="constant"),
         helper.make_node("Pad", ["c", "p4"], ["y"], mode="wrap")],
        {"x": (1, 2, 4, 5)}, ["y"],
        {"p1": ints(2, 1, 1, 3), "ax": ints(2, 3), "p2": ints(0, 0, 1, -1, 0, 1, 2, 0),
         "p3": ints(0, 1, -2, 1, 0, 0, 1, 0), "cv": np.array(0.75, np.float32), "p4": ints(0, 0, 2, 1, 0, 0, 1, 3)},
        opset=19),
    "pad_attribute_form": lambda: model(
        [helper.make_node("Pad", ["x"], ["y"], mode="constant", pads=[0, 1, 2, 0, 0, 2, 1, 1], value=-2.5)],
        {"x": (1, 2, 3, 3)}, ["y"], opset=9),
    "softmax_opset11_flatten": lambda: model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)], {"x": (2, 3, 4)}, ["y"], opset=11),
    "softmax_opset13_axis1": lambda: model(
        [helper.make_node("Softmax", ["x"], ["a"], axis=1), helper.make_node("LogSoftmax", ["x"], ["b"], axis=0)],
        {"x": (2, 3, 4)}, ["a", "b"], opset=13),
    "lstm_bidirectional_peepholes": lambda: model(
        [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0", "P"], ["y", "yh", "yc"], hidden_size=3,
                          direction="bidirectional")],
        {"x": (4, 2, 2), "h0": (2, 2, 3), "c0": (2, 2, 3)}, ["y", "yh", "yc"],
        dict(lstm_weights(2, 3, 2), P=rand(2, 9))),
    "lstm_reverse_yh_only": lambda: model(
        [helper.make_node("LSTM", ["x", "W", "R"], ["", "yh"], hidden_size=4, direction="reverse")],
        {"x": (3, 1, 2)}, ["yh"], {k: v for k, v in lstm_weights(1, 4, 2).items() if k != "B"}),
    "gru_linear_before_reset_reverse": lambda: model(
        [helper.make_node("GRU", ["x", "W", "R", "B", "", "h0"], ["y", "yh"], hidden_size=3,
                          linear_before_reset=1, direction="reverse")],
        {"x": (5, 1, 2), "h0": (1, 1, 3)}, ["y", "yh"], lstm_weights(1, 3, 2, gates=3)),
    "gru_default_y_only": lambda: model(
        [helper.make_node("GRU", ["x", "W", "R", "B"], ["y"], hidden_size=4)],
        {"x": (3, 2, 3)}, ["y"], lstm_weights(1, 4, 3, gates=3)),
    "gru_bidirectional_lbr": lambda: model(
        [helper.make_node("GRU", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=2, direction="bidirectional",
                          linear_before_reset=1)],
        {"x": (3, 1, 2)}, ["y", "yh"], lstm_weights(2, 2, 2, gates=3)),
    "transpose_gather_slice_split": lambda: model(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 3, 1]),
         helper.make_node("Gather", ["t", "idx"], ["g"], axis=1),
         helper.make_node("Gather", ["t", "one"], ["g1"], axis=2),
         helper.make_node("Slice", ["t", "st", "en", "ax", "sp"], ["s"]),
         helper.make_node("Split", ["x"], ["p", "q", "r"], axis=3, num_outputs=3)],
        {"x": (1, 3, 4, 7)}, ["g", "g1", "s", "p", "q", "r"],
        {"idx": ints(3, 0, 3), "one": np.array(-2, np.int64), "st": ints(-1, 0), "en": ints(-100, 5),
         "ax": ints(3, 2), "sp": ints(-2, 3)}, opset=18),
    "concat_runtime_and_constant": lambda: model(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Concat", ["r", "k", "x"], ["y"], axis=-2)],
        {"x": (1, 2, 3)}, ["y"], {"k": rand(1, 4, 3)}),
    "elementwise_broadcast": lambda: model(
        [helper.make_node("Max", ["x", "v", "k"], ["mx"]), helper.make_node("Min", ["x", "v"], ["mn"]),
         helper.make_node("Sum", ["x", "v", "k", "mx"], ["s"]), helper.make_node("PRelu", ["x", "slope"], ["pr"]),
         helper.make_node("Neg", ["v"], ["ng"]), helper.make_node("Div", ["mx", "two"], ["d"]),
         helper.make_node("Sub", ["k", "x"], ["sb"])],
        {"x": (1, 3, 2, 4), "v": (3, 1, 4), "slope": (1, 3, 1, 1)}, ["mx", "mn", "s", "pr", "ng", "d", "sb"],
        {"k": rand(4), "two": np.array([2.0], np.float32)}),
    "activations": lambda: model(
        [helper.make_node("Elu", ["x"], ["a"], alpha=0.7), helper.make_node("Selu", ["x"], ["b"]),
         helper.make_node("HardSigmoid", ["x"], ["c"], alpha=0.3, beta=0.4),
         helper.make_node("Softplus", ["big"], ["d"]), helper.make_node("Softsign", ["x"], ["e"]),
         helper.make_node("Gelu", ["x"], ["f"], approximate="tanh"), helper.make_node("Gelu", ["x"], ["g"]),
         helper.make_node("Erf", ["x"], ["h"]), helper.make_node("Exp", ["x"], ["i"]),
         helper.make_node("Clip", ["x", "lo"], ["j"]), helper.make_node("Clip", ["x", "", "hi"], ["k"]),
         helper.make_node("Mul", ["big", "big"], ["sq"]), helper.make_node("Sqrt", ["sq"], ["l"]),
         helper.make_node("Log", ["sq"], ["m"]), helper.make_node("Sigmoid", ["x"], ["n"])],
        {"x": (2, 5), "big": (1, 6)}, list("abcdefghijklmn"), {"lo": np.array(-0.3, np.float32),
                                                           "hi": np.array(0.2, np.float32)}, opset=20),
    "gemm_clip_fused": lambda: model(
        [helper.make_node("Gemm", ["x", "w"], ["g"], transB=1),
         helper.make_node("Clip", ["g", "lo", "hi"], ["y"])],
        {"x": (1, 4)}, ["y"], {"w": rand(6, 4), "lo": np.array(-0.2, np.float32), "hi": np.array(0.3, np.float32)}),
}


def _write_case(root, name, proto):
    path = os.path.join(root, name)
    data = os.path.join(path, "test_data_set_0")
    os.makedirs(data)
    onnx.save(proto, os.path.join(path, "model.onnx"))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {}
    for j, info in enumerate(sess.get_inputs()):
        scale = 40.0 if info.name == "big" else 1.0
        feed[info.name] = rand(*info.shape, scale=scale)
        with open(os.path.join(data, f"input_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(feed[info.name], info.name).SerializeToString())
    for j, value in enumerate(sess.run(None, feed)):
        with open(os.path.join(data, f"output_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(np.asarray(value), f"out{j}").SerializeToString())
    return conformance.Case(name, name, path)


def test_operators_against_onnxruntime(tmp_path):
    cases = [_write_case(str(tmp_path / "cases"), name, build()) for name, build in MODELS.items()]
    outcomes = conformance.run(cases, str(tmp_path / "work"), rtol=1e-5, atol=1e-5)
    bad = [f"{o.case.name}: {o.status}: {o.detail}" for o in outcomes if o.status != "passed" or o.variant != "as given"]
    assert not bad, "\n  ".join(["not passed:"] + bad)


def _plan_ops(tmp_path, name):
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(MODELS[name](), path)
    return [op.label for op in gen.build_plan(path, gen.Options())[1].ops]


def test_batchnorm_folds_into_conv_and_gemm(tmp_path):
    assert _plan_ops(tmp_path, "conv_bn_relu_folded") == ["Conv+Relu"]
    assert _plan_ops(tmp_path, "gemm_bn") == ["Gemm"]
    assert _plan_ops(tmp_path, "batchnorm_standalone") == ["BatchNormalization"]


@pytest.mark.parametrize("nodes, inputs, consts, opset, reason", [
    ([helper.make_node("LayerNormalization", ["x", "s"], ["y"])], {"x": (1, 4), "s": (4,)}, {}, 17,
     "scale is computed at run time"),
    ([conv("x", "w")], {"x": (1, 2, 4, 4), "w": (2, 2, 3, 3)}, {}, 17, "W are computed at run time"),
    ([helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect")], {"x": (1, 3)}, {"p": ints(0, 3, 0, 0)}, 17,
     "reflect pad 3 not smaller"),
    ([helper.make_node("LSTM", ["x", "W", "R", "", "lens"], ["y"], hidden_size=2)], {"x": (3, 1, 2)},
     {"W": rand(1, 8, 2), "R": rand(1, 8, 2), "lens": np.array([2], np.int32)}, 17, "sequence_lens is given"),
    ([helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=2, activations=["Relu", "Swish"])],
     {"x": (3, 1, 2)}, {"W": rand(1, 6, 2), "R": rand(1, 6, 2)}, 17, "2 per direction from"),
    ([helper.make_node("MaxPool", ["x"], ["y", "ix"], kernel_shape=[2, 2], storage_order=2)], {"x": (1, 1, 4, 4)},
     {}, 17, "storage_order 2 is not 0"),
])
def test_refused_with_a_reason(tmp_path, nodes, inputs, consts, opset, reason):
    outputs = [o for n in nodes for o in n.output if o][-1:]
    proto = model(nodes, inputs, outputs, consts, opset)
    if nodes[0].op_type == "MaxPool":  # the Indices output used
        proto = model(nodes + [helper.make_node("Cast", ["ix"], ["ixf"], to=TensorProto.FLOAT)], inputs,
                      ["y", "ixf"], consts, opset)
    path = str(tmp_path / "m.onnx")
    onnx.save(proto, path)
    with pytest.raises(UnsupportedOp, match=reason):
        gen.build_plan(path, gen.Options())


C_STEPPER = """#include <stdio.h>
#include <string.h>
#include "{n}.h"

/* A solver's loop: each step feeds the state slices of y back into x. */
int main(void)
{{
    float x[{NX}], y[{NY}];
    FILE *in = fopen("xs.bin", "rb"), *out = fopen("ys.bin", "wb");
    memset(x, 0, sizeof x);
    for (int step = 0; step < {steps}; ++step) {{
        if (fread(x + {xin}, sizeof(float), {nin}, in) != {nin}) return 1;
        {n}_infer(x, y);
        memcpy(x + {h0}, y + {hn}, {hidden} * sizeof(float));  /* h: y -> x */
        memcpy(x + {c0}, y + {cn}, {hidden} * sizeof(float));  /* c: y -> x */
        fwrite(y, sizeof(float), {NY}, out);
    }}
    fclose(in);
    fclose(out);
    return 0;
}}
"""


def test_lstm_cell_stepped_in_a_solver_loop_matches_the_sequence(tmp_path):
    steps, hidden, inputs = 10, 5, 3
    cell = op_models.lstm_cell(tmp_path / "cell.onnx", inputs=inputs, hidden=hidden)
    seq = op_models.lstm_sequence(tmp_path / "seq.onnx", steps=steps, inputs=inputs, hidden=hidden)
    out = tmp_path / "gen"
    plan, _ = gen.generate(cell, str(out), gen.Options(lang="c"))
    slices = {s.name: s for s in plan.inputs + plan.outputs}
    xs = np.random.default_rng(3).uniform(-1, 1, (steps, inputs)).astype(np.float32)
    xs.tofile(out / "xs.bin")
    (out / "main.c").write_text(C_STEPPER.format(
        n=plan.name, NX=plan.nx, NY=plan.ny, steps=steps, xin=slices["x"].offset, nin=inputs,
        h0=slices["h0"].offset, c0=slices["c0"].offset, hn=slices["hn"].offset, cn=slices["cn"].offset, hidden=hidden))
    subprocess.run(["gcc", "-O2", "-I", str(out), "main.c", f"{plan.name}.c", "-o", "main", "-lm"], cwd=out,
                   check=True)
    subprocess.run([str(out / "main")], cwd=out, check=True)
    ys = np.fromfile(out / "ys.bin", np.float32).reshape(steps, plan.ny)

    zeros = np.zeros((1, 1, hidden), np.float32)
    y, hn, cn = ort.InferenceSession(seq, providers=["CPUExecutionProvider"]).run(
        None, {"x": xs.reshape(steps, 1, inputs), "h0": zeros, "c0": zeros})
    got_h = ys[:, slices["hn"].offset:slices["hn"].offset + hidden]
    np.testing.assert_allclose(got_h, y.reshape(steps, hidden), rtol=1e-5, atol=1e-6,
                               err_msg="hidden state per step (y's hn slice vs the sequence's Y)")
    np.testing.assert_allclose(ys[-1, slices["cn"].offset:slices["cn"].offset + hidden], cn.reshape(-1),
                               rtol=1e-5, atol=1e-6, err_msg="final cell state")
    np.testing.assert_allclose(got_h[-1], hn.reshape(-1), rtol=1e-5, atol=1e-6)
