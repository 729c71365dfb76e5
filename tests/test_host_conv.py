"""The register-blocked direct convolution of the host whole-field path (rosenna/strategy/field/
host_conv.py, rosenna/emit/host_conv.py): which convs the strategy gives it and why, `rosenna
info`'s account of it, and one compile batch of a model of many conv shapes (5x5, strided,
dilated, asymmetric pads, a 2x3 kernel, 1x1, odd channel counts and counts that no block divides,
a row under a vector, no bias, one output channel, a depthwise conv left to the plan's loops) in
five forms, run on 2 threads against onnxruntime with verify's tolerance, and against the plan's
loops bit for bit: the blocked form keeps every sum's order."""

import contextlib
import io
import os
import re
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import op_models
from rosenna import cli, toolchain
from rosenna import generate as gen
from rosenna.compare import compare
from rosenna.strategy import Tuning
from rosenna.strategy.field import host_conv


def _shapes_model(path, seed=4):
    """x [1, 3, 19, 45] through convs of every geometry the blocked form handles (5x5, a
    stride and a dilation of 2, 1x1, strides (1, 2) with a 2x3 kernel, asymmetric pads, no bias,
    a row under a vector, one output channel) and one it refuses (depthwise)."""
    rng = np.random.default_rng(seed)
    node, inits, nodes = helper.make_node, [], []

    def conv(src, dst, cin, cout, kernel, act=None, bias=True, **attrs):
        group = attrs.get("group", 1)
        w = rng.standard_normal((cout, cin // group, *kernel)) / np.sqrt(cin // group * np.prod(kernel))
        inputs = [src, dst + "_w"]
        inits.append(numpy_helper.from_array(w.astype(np.float32), dst + "_w"))
        if bias:
            inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(cout)).astype(np.float32), dst + "_b"))
            inputs.append(dst + "_b")
        out = dst + "_c" if act else dst
        nodes.append(node("Conv", inputs, [out], name=dst, **attrs))
        if act:
            nodes.append(node(act, [out], [dst]))
        return dst

    h = conv("x", "k5", 3, 5, (5, 5), "Relu", pads=[2, 2, 2, 2])  # 19x45, 5 channels: one pass
    h = conv(h, "s2", 5, 11, (3, 3), "Tanh", pads=[2, 2, 2, 2], strides=[2, 2], dilations=[2, 2])  # 10x23: 6 + 5
    h = conv(h, "p1", 11, 20, (1, 1), "Sigmoid")  # 20: 7 + 7 + 6
    h = conv(h, "dw", 20, 20, (3, 3), pads=[1, 1, 1, 1], group=20)  # the plan's loops
    h = conv(h, "sw", 20, 6, (2, 3), bias=False, pads=[0, 1, 2, 0], strides=[1, 2])  # 11x11, under a vector
    conv(h, "y", 6, 1, (3, 3), pads=[1, 1, 1, 1])  # one output channel
    graph = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 19, 45])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return str(path)


#: The forms built (for an AVX-512 target; each C file takes seconds to compile): name -> (--tune,
#: embedded weights). The blocked form and the plan's loops, bit-reproducible (host_fma=off); the
#: blocked form with the default host_fma=auto (ROSENNA_MADDF: fma where the compiler says it is
#: fast); the blocked form with file-loaded weights (read in W's own layout, not packed).
FORMS = {"blk": (["host_fma=off"], True), "loops": (["host_conv=false", "host_fma=off"], True),
         "blkauto": ([], True), "blkfile": (["host_fma=off"], False)}

MAIN = r"""#include <stdio.h>
{includes}
int main(void)
{{
    static float x[BLK_NX], y[{count}][BLK_NY];
    int status = 0;
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), BLK_NX, f) != BLK_NX) return 3;
    fclose(f);
{calls}
    f = fopen("y.bin", "wb");
    fwrite(y, sizeof(float), {count} * BLK_NY, f);
    fclose(f);
    return status;
}}
"""


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """The shapes model generated in every form of :data:`FORMS` into one directory, compiled in
    one gcc run, run once on 2 threads; onnxruntime's y."""
    out = tmp_path_factory.mktemp("hostconv")
    path = _shapes_model(out / "shapes.onnx")
    plans = {}
    profile = toolchain.resolve(None, target="icelake", gpu_arch="sm_80")
    for name, (tune, embed) in FORMS.items():
        plans[name], _ = gen.generate(path, str(out), gen.Options.from_profile(profile, tune, name=name, lang="c",
                                                                               embed=embed))
    x = np.random.default_rng(5).uniform(-1, 1, plans["blk"].nx).astype(np.float32)
    x.tofile(out / "x.bin")
    calls = "\n".join(f"    status |= {name}_init(\"{name}.rwt\");" for name, (_, embed) in FORMS.items() if not embed)
    calls += "\n" + "\n".join(f"    status |= {name}_infer_one(x, y[{i}], NULL);" for i, name in enumerate(FORMS))
    (out / "main.c").write_text(MAIN.format(includes="\n".join(f'#include "{n}.h"' for n in FORMS), count=len(FORMS),
                                            calls=calls))
    # -ffp-contract=off, as the profiles build: the compiler fuses no product the code does not
    subprocess.run(["gcc", "-O1", "-ftree-vectorize", "-march=native", "-ffp-contract=off", "-fopenmp", "-I", str(out),
                    "main.c", *[f"{n}.c" for n in FORMS], "-o", "main", "-lm"], cwd=out, check=True, capture_output=True)
    subprocess.run([str(out / "main")], cwd=out, check=True, env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=60)
    got = dict(zip(FORMS, np.fromfile(out / "y.bin", np.float32).reshape(len(FORMS), -1)))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x.reshape(1, 3, 19, 45)})[0].reshape(-1)
    return plans, out, got, want


def _decisions(path, target):
    """``{part: Decision}`` of the host convs of the model at ``path`` for a CPU ``target``."""
    options = gen.Options.from_profile(toolchain.resolve(None, target=target, gpu_arch="sm_80"))
    return {d.part: d for d in gen.decide(gen.build_plan(path, options)[1], options).host_regions.decisions}


def test_blocked_form_chosen_per_conv(shapes):
    """Every conv of group 1 takes the blocked form, with its blocks; the depthwise one keeps the
    plan's loops and says why; host_conv=false keeps them all."""
    plans, out, _, _ = shapes
    chosen = list(_decisions(str(out / "shapes.onnx"), "icelake").values())
    assert [d.chosen for d in chosen] == [host_conv.NAME] * 3 + ["loops"] + [host_conv.NAME] * 2
    assert "grouped or depthwise" in chosen[3].rejected[0].reasons[0]
    blocks = [(d.value("block_channels"), d.value("block_rows")) for d in chosen if d.chosen == host_conv.NAME]
    # 5 | 11 -> 6 + 5 | 20 -> 7 + 7 + 6 | 6 | 1 channel; rows to keep 8 x 2 accumulators, the row count at most
    assert blocks == [(5, 3), (6, 2), (7, 2), (6, 2), (1, 11)]
    narrow = _decisions(str(out / "shapes.onnx"), "x86_64")
    # AVX2 (16 vector registers): at most 4 channels a block, 4 x 2 accumulators
    assert [d.value("block_channels") for d in narrow.values() if d.chosen == host_conv.NAME] == [3, 4, 4, 3, 1]
    loops = gen.Options.from_profile(toolchain.resolve(None, target="icelake", gpu_arch="sm_80"), ["host_conv=false"])
    assert all(d.chosen == "loops" and "host_conv is false" in d.rejected[0].reasons[0]
               for d in gen.decide(gen.build_plan(str(out / "shapes.onnx"), loops)[1], loops).host_regions.decisions)
    text = (out / "blk.c").read_text()
    assert text.count("register-blocked direct convolution") == 5 and "static const float blk_" in text
    assert "register-blocked" not in (out / "loops.c").read_text()
    assert "host_conv=false" in (out / "loops.c").read_text().splitlines()[0]  # the provenance line
    assert "_blocked" not in (out / "blkfile.c").read_text()  # file-loaded: W read in place
    assert "MADD" not in text.split("register-blocked")[1] and "fmaf(" not in text
    assert re.search(r"acc_0_0 = ROSENNA_MADDF\(blkauto_\w+_blocked\[", (out / "blkauto.c").read_text())


def test_blocked_form_matches_onnxruntime_and_the_loops_bit_for_bit(shapes):
    """Every form within verify's tolerance of onnxruntime; with host_fma=off the blocked form equals
    the plan's loops bit for bit (each sum's terms in the plan's order; the padding's taps add
    w * 0, which changes no finite sum), with embedded and with file-loaded weights."""
    _, _, got, want = shapes
    for name, y in got.items():
        result = compare(y, want, output=name)
        assert result.passed, result.message()
    assert np.array_equal(got["blk"], got["loops"]) and np.array_equal(got["blkfile"], got["loops"])


def test_convnet_takes_the_blocked_form_and_info_shows_it(tmp_path):
    """The 3-conv net of the benchmarks: its three convs blocked (8 channels x 2 rows on AVX-512,
    the 1-channel output 16 rows), as `rosenna info` prints."""
    path = op_models.convnet(str(tmp_path / "convnet16.onnx"), channels=16)
    decisions = list(_decisions(path, "icelake").values())
    assert [(d.chosen, d.value("block_channels"), d.value("block_rows")) for d in decisions] == \
        [(host_conv.NAME, 8, 2), (host_conv.NAME, 8, 2), (host_conv.NAME, 1, 16)]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert cli.main(["info", path, "--target", "icelake"]) == 0
    assert "host whole-field conv (Conv+Tanh: conv1+act1): register-blocked (8 channels x 2 rows x 16 columns" in \
        printed.getvalue()


def test_tuning_knobs_set_the_blocks():
    """host_conv_channels and host_conv_rows set the block, host_conv_tile_bytes shrinks its rows
    and refuses a conv whose one row does not fit; all other shapes refused with a reason."""
    window = {"x": "a", "y": "b", "x_shape": (1, 16, 64, 64), "w_shape": (16, 16, 3, 3), "y_shape": (1, 16, 64, 64),
              "strides": (1, 1), "dilations": (1, 1), "pads": (1, 1), "group": 1, "activation": None}

    class Plan:
        host_vector, itemsize = 64, 4

    assert host_conv.block(Plan, window, Tuning()) == (8, 2)
    assert host_conv.block(Plan, window, Tuning(host_conv_channels=16, host_conv_rows=1)) == (16, 1)
    assert host_conv.block(Plan, window, Tuning(host_conv_channels=5, host_conv_rows=3)) == (4, 3)  # 16: 4 passes of 4
    one_row = host_conv.tile_bytes(window, 1, 16, 4)  # 16 channels x 3 rows x 66 columns x 4 bytes
    assert one_row == 16 * 3 * 66 * 4
    assert host_conv.block(Plan, window, Tuning(host_conv_tile_bytes=one_row)) == (8, 1)
    assert "host_conv_tile_bytes" in host_conv.refusal(Plan, window, Tuning(host_conv_tile_bytes=one_row - 1))
    assert host_conv.refusal(Plan, window, Tuning()) == ""
    assert host_conv.refusal(Plan, window, Tuning(host_conv=False)) == "host_conv is false"
    for change, why in (({"x_shape": (1, 16, 8, 8, 8)}, "not 2-D"), ({"x_shape": (2, 16, 64, 64)}, "batch axis"),
                        ({"group": 2}, "grouped"), ({"y": "a"}, "in place"), ({"y_shape": (1, 16, 64, 7)}, "half a vector")):
        assert why in host_conv.refusal(Plan, {**window, **change}, Tuning())
