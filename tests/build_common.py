"""What the tests/test_build_*.py files share: one generated model folder per test run (built by
one `rosenna generate`, reused by every consumer build), the reference outputs of onnxruntime, and
small helpers to run a command and fail with its output.

The model is a file-loaded two-layer MLP (weights in a .rwt beside the code), so the same folder
serves the CMake, make, pkg-config, fpm and weight-reload tests.
"""

import os
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NAME = "bmdl"
NX, NH, NY = 3, 5, 2
#: The inputs every consumer program feeds: two points.
POINTS = np.array([[0.5, -1.25, 2.0], [-0.75, 0.25, 1.5]], dtype=np.float32)


def mlp(seed, hidden=NH, path=None):
    """A Gemm-Tanh-Gemm model x[N,NX] -> y[N,NY] with weights from ``seed``; ``hidden`` changes the
    structure (another model). Saved to ``path`` when given; returns the ModelProto."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((hidden, NX)).astype(np.float32)
    b1 = rng.standard_normal(hidden).astype(np.float32)
    w2 = rng.standard_normal((NY, hidden)).astype(np.float32)
    b2 = rng.standard_normal(NY).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1, name="dense1"),
             helper.make_node("Tanh", ["h"], ["a"], name="act"),
             helper.make_node("Gemm", ["a", "w2", "b2"], ["y"], transB=1, name="dense2")]
    graph = helper.make_graph(
        nodes, "bmlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", NX])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", NY])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    if path is not None:
        onnx.save(model, str(path))
    return model


def reference(path, points=POINTS):
    """onnxruntime's outputs of the model at ``path`` for ``points``, one row per point."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.asarray(points, dtype=np.float32)})[0]


def run(cmd, cwd=None, env=None, ok=True):
    """Run ``cmd``; with ``ok`` fail the test showing the command and its output unless it succeeds.
    Returns the CompletedProcess (stdout and stderr together in ``.stdout``)."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if ok:
        assert proc.returncode == 0, f"{cmd} in {cwd} exited {proc.returncode}:\n{proc.stdout[-4000:]}"
    return proc


def clean_env(**extra):
    """os.environ without the compiler variables a developer's shell may set, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CC", "FC", "CXX", "CFLAGS", "FFLAGS", "CXXFLAGS", "HIP_PLATFORM", "MAKEFLAGS")}
    env.update(extra)
    return env


def numbers(text):
    """The floats printed one per line (other lines ignored)."""
    out = []
    for line in text.split():
        try:
            out.append(float(line))
        except ValueError:
            pass
    return np.array(out)


_FOLDERS = {}


def folder(tmp_path_factory, *extra):
    """The generated folder of model ``NAME`` (``--no-embed --lang both --gpu-arch 80`` plus
    ``extra`` options), made once per test session and option set; its ONNX file is ``model.onnx``
    in its parent. Tests that build inside it take a copy (:func:`copy_of`)."""
    key = tuple(extra)
    if key not in _FOLDERS:
        from rosenna.cli import main

        root = tmp_path_factory.mktemp("build_model")
        onnx_path = root / "model.onnx"
        mlp(1, path=onnx_path)
        gen = root / "gen"
        assert main(["generate", str(onnx_path), "--name", NAME, "--out", str(gen), "--no-embed",
                     "--gpu-arch", "80", *extra]) == 0
        _FOLDERS[key] = gen
    return _FOLDERS[key]


def copy_of(gen, dest):
    """A copy of generated folder ``gen`` at ``dest`` (a test's own, to build in)."""
    import shutil

    shutil.copytree(gen, dest, ignore=shutil.ignore_patterns(".rosenna*"))
    return dest
