"""The ops the whole node-test suite brought in, on every path: one model of many of them (scans,
arg-reductions, top-k, integer and bitwise ops, inverse hyperbolic functions, NaN/Inf tests,
triangular masks, norms, a one-hot of run-time indices, a fixed GridSample; MaxPool's Indices,
MaxUnpool, Resize antialias, RoiAlign, DeformConv, STFT, a constant rank-4 MatMul operand, tree set
membership) against onnxruntime in C and Fortran, its whole-field form against its per-point form,
and its CUDA and HIP kernel files and libraries built with nvcc and hipcc
(compile only: the loop IR renders the same statements for the device)."""

import os
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import devflags
from rosenna import conformance
from rosenna.compare import tolerance_for
from rosenna.generate import Options, generate

F = TensorProto.FLOAT


def _c(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def mixed_model(path, indexed=True):
    nodes = [
        helper.make_node("CumSum", ["x", "axis1"], ["integral"], exclusive=1, reverse=1),
        helper.make_node("ArgMax", ["x"], ["regime"], axis=1, select_last_index=1),
        helper.make_node("TopK", ["x", "two"], ["top", "top_at"], axis=1),
        helper.make_node("Mod", ["x", "period"], ["phase"], fmod=1),
        helper.make_node("Asinh", ["x"], ["stretched"]),
        helper.make_node("IsInf", ["x"], ["infinite"]),
        helper.make_node("Trilu", ["x"], ["upper"]),
        helper.make_node("ReduceL2", ["x", "axes1"], ["norm"], keepdims=0),
        helper.make_node("ReduceLogSumExp", ["x", "axes1"], ["lse"], keepdims=0),
        helper.make_node("Mul", ["x", "four"], ["scaled"]),
        helper.make_node("Floor", ["scaled"], ["floored"]),
        helper.make_node("Cast", ["floored"], ["ints"], to=TensorProto.INT32),
        helper.make_node("BitwiseAnd", ["ints", "mask"], ["bits"]),
        helper.make_node("Cast", ["floored"], ["longs"], to=TensorProto.INT64),
        helper.make_node("Abs", ["longs"], ["magnitude"]),
        helper.make_node("OneHot", ["magnitude", "depth", "onoff"], ["hot"]),
        helper.make_node("Reshape", ["x", "image_shape"], ["image"]),
        helper.make_node("GridSample", ["image", "grid"], ["warped"], mode="linear", padding_mode="border"),
    ]
    rng = np.random.default_rng(3)
    inits = [_c("axis1", np.asarray(1, np.int64)), _c("axes1", np.asarray([1], np.int64)),
             _c("two", np.asarray([2], np.int64)),
             _c("period", np.asarray(0.7, np.float32)), _c("four", np.asarray(4.0, np.float32)),
             _c("mask", np.asarray(6, np.int32)), _c("depth", np.asarray(5, np.int64)),
             _c("onoff", np.asarray([-1.0, 2.0], np.float32)), _c("image_shape", np.asarray([1, 2, 2, 3], np.int64)),
             _c("grid", rng.uniform(-1.2, 1.2, (1, 3, 2, 2)).astype(np.float32))]
    outs = [("integral", F, [2, 6]), ("regime", TensorProto.INT64, [2, 1]), ("top", F, [2, 2]),
            ("top_at", TensorProto.INT64, [2, 2]), ("phase", F, [2, 6]), ("stretched", F, [2, 6]),
            ("infinite", TensorProto.BOOL, [2, 6]), ("upper", F, [2, 6]), ("norm", F, [2]), ("lse", F, [2]),
            ("bits", TensorProto.INT32, [2, 6]), ("hot", F, [2, 6, 5]), ("warped", F, [1, 2, 3, 2])]
    more_nodes, more_inits, inputs, more_outs = _sampled_parts(indexed)
    graph = helper.make_graph(nodes + more_nodes, "mixed", [helper.make_tensor_value_info("x", F, [2, 6])] + inputs,
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outs + more_outs],
                              inits + more_inits)
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid("ai.onnx.ml", 5)] if indexed else [])
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def _sampled_parts(indexed):
    """The ops the last refusals of the node tests brought in, on inputs unlike those tests': MaxPool's
    Indices (column-major, padded), MaxUnpool of run-time indices, Resize antialias (cubic and
    linear), RoiAlign (max and avg), DeformConv (groups, offset groups, a mask computed at run time,
    constant and run-time offsets),
    STFT, a constant rank-4 MatMul operand, TreeEnsemble set membership: (nodes, initializers, inputs,
    outputs). ``indexed`` False leaves out MaxUnpool, the tree and the DeformConv of run-time offsets
    (the loads and stores at run-time offsets)."""
    rng = np.random.default_rng(11)
    nodes = [
        helper.make_node("MaxPool", ["field"], ["pooled", "pooled_at"], kernel_shape=[3, 2], strides=[2, 2],
                         pads=[1, 0, 1, 1], storage_order=1),
        helper.make_node("MaxPool", ["field"], ["halved", "halved_at"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("MaxUnpool", ["halved", "halved_at"], ["unpooled"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Resize", ["field", "", "shrink"], ["smooth"], mode="cubic", antialias=1),
        helper.make_node("Resize", ["field", "", "", "sizes"], ["coarse"], mode="linear", antialias=1),
        helper.make_node("RoiAlign", ["field", "rois", "roi_batch"], ["roi_max"], mode="max", output_height=2,
                         output_width=2, spatial_scale=0.5),
        helper.make_node("RoiAlign", ["field", "rois", "roi_batch"], ["roi_avg"], output_height=2, output_width=3,
                         sampling_ratio=2, coordinate_transformation_mode="output_half_pixel"),
        helper.make_node("Slice", ["field", "corner_start", "corner_end", "corner_axes"], ["corner"]),
        helper.make_node("Tile", ["corner", "mask_tiles"], ["deform_mask_pre"]),
        helper.make_node("Sigmoid", ["deform_mask_pre"], ["deform_mask"]),
        helper.make_node("DeformConv", ["field", "deform_w", "offsets", "deform_b", "deform_mask"], ["deformed"],
                         kernel_shape=[2, 2], strides=[2, 2], group=2, offset_group=2),
        helper.make_node("Tile", ["corner", "offset_tiles"], ["corner_tiled"]),
        helper.make_node("Mul", ["corner_tiled", "offset_scale"], ["runtime_offsets"]),
        helper.make_node("DeformConv", ["field", "deform_w", "runtime_offsets", "", "deform_mask"], ["deformed_rt"],
                         kernel_shape=[2, 2], strides=[2, 2], group=2, offset_group=2),
        helper.make_node("Reshape", ["field", "signal_shape"], ["signal"]),
        helper.make_node("STFT", ["signal", "step", "window"], ["spectrum"], onesided=1),
        helper.make_node("MatMul", ["field", "blocks"], ["projected"]),
        helper.make_node("Mul", ["features", "per_unit"], ["feature_scaled"]),
        helper.make_node("Floor", ["feature_scaled"], ["rows"]),
        helper.make_node("TreeEnsemble", ["rows"], ["votes"], domain="ai.onnx.ml", n_targets=2,
                         aggregate_function=1, tree_roots=[0], nodes_featureids=[2, 4, 0],
                         nodes_modes=numpy_helper.from_array(np.array([6, 0, 6], np.uint8), "nodes_modes"),
                         nodes_splits=numpy_helper.from_array(np.array([0, 0.5, 0], np.float32), "nodes_splits"),
                         nodes_truenodeids=[1, 0, 1], nodes_trueleafs=[0, 1, 1],
                         nodes_falsenodeids=[2, 2, 3], nodes_falseleafs=[0, 1, 1],
                         nodes_missing_value_tracks_true=[0, 0, 1],
                         membership_values=numpy_helper.from_array(
                             np.array([2, -1, 3, np.nan, 0, -3, np.nan], np.float32), "membership_values"),
                         leaf_targetids=[0, 1, 0, 1],
                         leaf_weights=numpy_helper.from_array(np.array([1, 10, 100, 1000], np.float32),
                                                              "leaf_weights")),
    ]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(16) / 16)).astype(np.float32)
    inits = [_c("shrink", np.asarray([1, 1, 0.7, 1], np.float32)), _c("sizes", np.asarray([1, 2, 3, 4], np.int64)),
             _c("rois", np.asarray([[0.5, 1.0, 4.2, 5.7], [-0.7, 2.0, 6.5, 6.2]], np.float32)),
             _c("roi_batch", np.asarray([0, 0], np.int64)),
             _c("corner_start", np.asarray([1, 0], np.int64)), _c("corner_end", np.asarray([4, 3], np.int64)),
             _c("corner_axes", np.asarray([2, 3], np.int64)), _c("mask_tiles", np.asarray([1, 4, 1, 1], np.int64)),
             _c("offset_tiles", np.asarray([1, 8, 1, 1], np.int64)), _c("offset_scale", np.asarray(2.5, np.float32)),
             _c("deform_w", rng.normal(0, 1, (4, 1, 2, 2)).astype(np.float32)),
             _c("offsets", rng.uniform(-1.6, 1.6, (1, 16, 3, 3)).astype(np.float32)),
             _c("deform_b", rng.normal(0, 1, (4,)).astype(np.float32)),
             _c("signal_shape", np.asarray([1, 72, 1], np.int64)), _c("step", np.asarray(10, np.int64)),
             _c("window", window), _c("blocks", rng.normal(0, 1, (3, 1, 6, 4)).astype(np.float32)),
             _c("per_unit", np.asarray(4.0, np.float32))]
    outs = [("pooled", F, [1, 2, 3, 3]), ("pooled_at", TensorProto.INT64, [1, 2, 3, 3]), ("unpooled", F, [1, 2, 6, 6]),
            ("smooth", F, [1, 2, 4, 6]), ("coarse", F, [1, 2, 3, 4]), ("roi_max", F, [2, 2, 2, 2]),
            ("roi_avg", F, [2, 2, 2, 3]), ("deformed", F, [1, 4, 3, 3]), ("deformed_rt", F, [1, 4, 3, 3]), ("spectrum", F, [1, 6, 9, 2]),
            ("projected", F, [3, 2, 6, 4]), ("votes", F, [12, 2])]
    inputs = [helper.make_tensor_value_info("field", F, [1, 2, 6, 6]),
              helper.make_tensor_value_info("features", F, [12, 6])]
    if not indexed:
        nodes = [n for n in nodes if n.op_type not in ("MaxUnpool", "TreeEnsemble", "Mul", "Floor")
                 and "runtime_offsets" not in n.input and "corner_tiled" not in n.output]
        outs = [o for o in outs if o[0] not in ("unpooled", "votes", "deformed_rt")]
        inputs = inputs[:1]
    return nodes, inits, inputs, outs


def _case_folder(tmp_path, path, feeds):
    """A node-test style folder of the model at ``path`` with onnxruntime's outputs for ``feeds``."""
    import onnxruntime as ort

    folder = tmp_path / "case"
    (folder / "test_data_set_0").mkdir(parents=True)
    shutil.copy(path, folder / "model.onnx")
    outputs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    for kind, arrays in (("input", list(feeds.values())), ("output", outputs)):
        for j, array in enumerate(arrays):
            (folder / "test_data_set_0" / f"{kind}_{j}.pb").write_bytes(
                numpy_helper.from_array(np.asarray(array)).SerializeToString())
    return folder


def test_mixed_model_matches_onnxruntime_in_c_and_fortran(tmp_path):
    path = mixed_model(str(tmp_path / "mixed.onnx"))
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (2, 6)).astype(np.float32)
    x[0, 3] = x[0, 1]  # a tie for ArgMax's select_last_index and TopK's order
    field = rng.uniform(-1, 1, (1, 2, 6, 6)).astype(np.float32)
    field[0, 0, 4, 4] = field[0, 0, 4, 5]  # a tie inside a pooling window: the first position wins
    features = rng.uniform(-1, 1, (12, 6)).astype(np.float32)
    features[3:6, 2] = [0.6, -0.2, 0.8]  # members of the root's set {2, -1, 3} (after x 4, floor)
    features[[1, 7], [2, 0]] = np.nan  # NaN features: the member node that tracks missing values sends it true
    folder = _case_folder(tmp_path, path, {"x": x, "field": field, "features": features})
    tol = tolerance_for("float32")
    outcome, = conformance.run([conformance.Case("mixed", "mixed", str(folder))], str(tmp_path / "work"),
                               rtol=tol.rtol, atol=tol.atol, optimize="-O0")
    assert outcome.status == "passed", outcome.detail


def _build(directory, name, backend, flags, env=None):
    cmd = ["make", "-s", "-f", f"{name}.mk", f"ROSENNA_BACKEND={backend}", "CFLAGS=-O1", "ROSENNA_OFFLOAD_FLAGS=",
           f"DEVFLAGS={flags}"]
    proc = subprocess.run(cmd, check=False, cwd=directory, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"{' '.join(cmd)}:\n{proc.stdout}{proc.stderr}"
    assert (directory / f"lib{name}_device.a").exists()


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_nvcc_builds_the_mixed_model(tmp_path):
    generate(mixed_model(str(tmp_path / "mixed.onnx")), str(tmp_path / "g"), Options(lang="c", embed=True))
    _build(tmp_path / "g", "mixed", "cuda", f"{devflags.NVCC} -arch=sm_90")


@pytest.mark.skipif(not shutil.which("hipcc"), reason="hipcc not installed")
def test_hipcc_builds_the_mixed_model(tmp_path):
    generate(mixed_model(str(tmp_path / "mixed.onnx")), str(tmp_path / "g"), Options(lang="c", embed=True))
    _build(tmp_path / "g", "mixed", "hip", f"{devflags.HIPCC} --offload-arch=gfx90a",
           env=dict(os.environ, HIP_PLATFORM="amd"))


WHOLE_FIELD_DRIVER = r"""#include <stdio.h>
#include "NAME.h"
int main(void)
{
    static float x[UPPER_NX], a[UPPER_NY], b[UPPER_NY];
    int bad = 0;
    for (int i = 0; i < UPPER_NX; ++i)
        x[i] = (float)((i * 37) % 11) / 7.0f - 0.7f;
    NAME_infer(x, a);
    if (NAME_infer_one(x, b, NULL) != 0)
        return 2;
    for (int i = 0; i < UPPER_NY; ++i)
        if (a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i])) {
            printf("y[%d]: per point %.9g, whole field %.9g\n", i, a[i], b[i]);
            bad = 1;
        }
    return bad;
}
"""


def test_the_whole_field_form_computes_what_the_point_form_does(tmp_path):
    """``<name>_infer_one`` (one parallel loop per op over the field) gives the per-point routine's
    numbers, bit for bit, on the host (no offload device: host pointers; -O0: the same arithmetic in
    both, what is compared is the loops)."""
    name = "wholefield"  # loads and stores at run-time offsets (MaxUnpool, the tree, DeformConv) included
    generate(mixed_model(str(tmp_path / f"{name}.onnx")), str(tmp_path / "g"),
             Options(lang="c", embed=True, infer_one=True))
    driver = WHOLE_FIELD_DRIVER.replace("NAME", name).replace("UPPER", name.upper())
    (tmp_path / "g" / "driver.c").write_text(driver)
    build = subprocess.run(["gcc", "-O0", "-fopenmp", "driver.c", f"{name}.c", "-lm", "-o", "driver"],
                           cwd=tmp_path / "g", capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run(["./driver"], cwd=tmp_path / "g", capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
