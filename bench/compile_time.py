"""Build time of whole-field conv nets: `rosenna verify` of a 3-D U-Net on a 16^3 field, a small
ResNet and a 64x64 field CNN, and where the time goes (generate, gcc and gfortran on each file).

    python bench/compile_time.py [--only unet3d resnet fieldcnn] [--markdown]

The models are built with onnx.helper (no torch):

- ``unet3d``: bench/science_models.py's 3-D U-Net, 2 channels on 16^3 (Conv3d 3x3x3 pad 1,
  MaxPool, LayerNorm, SiLU, ConvTranspose3d stride 2, skip Concat);
- ``resnet``: a ResNet-8 on a 3 x 32 x 32 image: a 3x3 stem of 16 channels, three basic blocks
  (16, 32 and 64 channels, the last two stride 2 with a 1x1 projection), global average pool and a
  10-way Gemm;
- ``fieldcnn``: a closure CNN on a 64x64 field: 2 -> 16 -> 16 -> 16 -> 1 channels, 3x3 convs with
  pad 1 and ReLU.

Each row: the wall and CPU seconds of `python -m rosenna verify MODEL --cases 2` (generate, both
languages built at once, every entry point run), then, one at a time, the generate time and the
CPU seconds of compiling the generated <name>.c and <name>_model.F90 with the flags verify uses
(-O3 -march=native), and the size of the generated files.
"""

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import science_models  # noqa: E402


def _save(nodes, x_shape, y_shape, weights, path, name):
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="rosenna-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def resnet(path, seed=0):
    rng = np.random.default_rng(seed)
    nodes, weights = [], {}

    def conv(src, dst, cin, cout, k, stride=1, relu=False):
        name = f"w{len(weights)}"
        weights[name] = rng.normal(0, np.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))
        weights[name + "b"] = rng.normal(0, 0.05, cout)
        nodes.append(helper.make_node("Conv", [src, name, name + "b"], [dst + ("_c" if relu else "")],
                                      pads=[k // 2] * 4, strides=[stride, stride]))
        if relu:
            nodes.append(helper.make_node("Relu", [dst + "_c"], [dst]))
        return dst

    h = conv("x", "stem", 3, 16, 3, relu=True)
    cin = 16
    for i, (cout, stride) in enumerate([(16, 1), (32, 2), (64, 2)]):
        a = conv(h, f"b{i}a", cin, cout, 3, stride, relu=True)
        b = conv(a, f"b{i}b", cout, cout, 3)
        skip = h if (cin, stride) == (cout, 1) else conv(h, f"b{i}p", cin, cout, 1, stride)
        nodes += [helper.make_node("Add", [b, skip], [f"b{i}s"]), helper.make_node("Relu", [f"b{i}s"], [f"b{i}"])]
        h, cin = f"b{i}", cout
    weights["fc"] = rng.normal(0, 0.1, (10, 64))
    weights["fcb"] = rng.normal(0, 0.1, 10)
    nodes += [helper.make_node("GlobalAveragePool", [h], ["pool"]), helper.make_node("Flatten", ["pool"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc", "fcb"], ["y"], transB=1)]
    return _save(nodes, [1, 3, 32, 32], [1, 10], weights, path, "resnet")


def fieldcnn(path, size=64, width=16, seed=0):
    rng = np.random.default_rng(seed)
    nodes, weights, prev, cin = [], {}, "x", 2
    for i, cout in enumerate([width, width, width, 1]):
        weights[f"w{i}"] = rng.normal(0, np.sqrt(2.0 / (cin * 9)), (cout, cin, 3, 3))
        weights[f"b{i}"] = rng.normal(0, 0.05, cout)
        out = "y" if cout == 1 else f"c{i}"
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [out], pads=[1] * 4))
        if cout != 1:
            nodes.append(helper.make_node("Relu", [out], [f"a{i}"]))
            prev = f"a{i}"
        cin = cout
    return _save(nodes, [1, 2, size, size], [1, 1, size, size], weights, path, "fieldcnn")


MODELS = {"unet3d": lambda path: science_models.unet3d(path, 16), "resnet": resnet, "fieldcnn": fieldcnn}


def _cpu_children():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd, cwd=None):
    """(wall seconds, CPU seconds of the command and its children)."""
    cpu, wall = _cpu_children(), time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - wall, _cpu_children() - cpu


def measure(name, work):
    path = MODELS[name](os.path.join(work, f"{name}.onnx"))
    python = [sys.executable, "-m", "rosenna"]
    verify_wall, verify_cpu = _timed(python + ["verify", path, "--cases", "2"])
    out = os.path.join(work, name)
    gen_wall, _ = _timed(python + ["generate", path, "--out", out, "--name", name])
    c_wall, c_cpu = _timed(["gcc", "-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-c", f"{name}.c"], cwd=out)
    f_wall, f_cpu = _timed(["gfortran", "-O3", "-march=native", "-fopenmp", "-c", f"{name}_model.F90"], cwd=out)
    lines = {ext: sum(1 for _ in open(os.path.join(out, name + ext))) for ext in (".c", "_model.F90")}
    return {"model": name, "verify wall s": verify_wall, "verify CPU s": verify_cpu, "generate s": gen_wall,
            "gcc CPU s": c_cpu, "gfortran CPU s": f_cpu, "C lines": lines[".c"], "Fortran lines": lines["_model.F90"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", choices=sorted(MODELS), default=list(MODELS))
    ap.add_argument("--markdown", action="store_true", help="print one Markdown table")
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="rosenna-compile-")
    rows = [measure(name, work) for name in args.only]
    keys = list(rows[0])
    if args.markdown:
        print("| " + " | ".join(keys) + " |")
        print("|" + " --- |" * len(keys))
    for row in rows:
        cells = [f"{v:.1f}" if isinstance(v, float) else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(f"{k}={c}" for k, c in zip(keys, cells)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
