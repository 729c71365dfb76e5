"""The ops the whole node-test suite brought in, on every path: one model of many of them (scans,
arg-reductions, top-k, integer and bitwise ops, inverse hyperbolic functions, NaN/Inf tests,
triangular masks, norms, a one-hot of run-time indices, a fixed GridSample) against onnxruntime in
C and Fortran, its whole-field form against its per-point form, and its CUDA and HIP kernel files
and libraries built with nvcc and hipcc (compile only: the loop IR renders the same statements for
the device)."""

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


def mixed_model(path):
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
    graph = helper.make_graph(nodes, "mixed", [helper.make_tensor_value_info("x", F, [2, 6])],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outs], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)
    return path


def test_mixed_model_matches_onnxruntime_in_c_and_fortran(tmp_path):
    import onnxruntime as ort

    path = mixed_model(str(tmp_path / "mixed.onnx"))
    folder = tmp_path / "case"
    (folder / "test_data_set_0").mkdir(parents=True)
    shutil.copy(path, folder / "model.onnx")
    x = np.random.default_rng(5).uniform(-1, 1, (2, 6)).astype(np.float32)
    x[0, 3] = x[0, 1]  # a tie for ArgMax's select_last_index and TopK's order
    outputs = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for kind, arrays in (("input", [x]), ("output", outputs)):
        for j, array in enumerate(arrays):
            (folder / "test_data_set_0" / f"{kind}_{j}.pb").write_bytes(
                numpy_helper.from_array(np.asarray(array)).SerializeToString())
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
#include "mixed.h"
int main(void)
{
    float x[MIXED_NX], a[MIXED_NY], b[MIXED_NY];
    int bad = 0;
    for (int i = 0; i < MIXED_NX; ++i)
        x[i] = (float)((i * 37) % 11) / 7.0f - 0.7f;
    mixed_infer(x, a);
    if (mixed_infer_one(x, b, NULL) != 0)
        return 2;
    for (int i = 0; i < MIXED_NY; ++i)
        if (a[i] != b[i] && !(a[i] != a[i] && b[i] != b[i])) {
            printf("y[%d]: per point %.9g, whole field %.9g\n", i, a[i], b[i]);
            bad = 1;
        }
    return bad;
}
"""


def test_the_whole_field_form_computes_what_the_point_form_does(tmp_path):
    """``<name>_infer_one`` (one parallel loop per op over the field) gives the per-point routine's
    numbers, bit for bit, on the host (no offload device: host pointers)."""
    generate(mixed_model(str(tmp_path / "mixed.onnx")), str(tmp_path / "g"), Options(lang="c", embed=True,
                                                                                   infer_one=True))
    (tmp_path / "g" / "driver.c").write_text(WHOLE_FIELD_DRIVER)
    build = subprocess.run(["gcc", "-O1", "-fopenmp", "driver.c", "mixed.c", "-lm", "-o", "driver"],
                           cwd=tmp_path / "g", capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    run = subprocess.run(["./driver"], cwd=tmp_path / "g", capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
