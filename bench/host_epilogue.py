"""Host batch speed of MLPs that differ only in the pointwise epilogue after each hidden Gemm:
Relu (an activation the passes fuse into the Gemm), GELU in its tanh form (the eight
Pow/Mul/Add/Tanh nodes PyTorch's ``approximate='tanh'`` exports below opset 20), Softsign
(Abs/Add/Div), x * sigmoid(x) (Sigmoid, Mul: the passes make it a fused Swish), a scaled tanh
(Tanh, Mul) and a clamp (Clip), each folded into the Gemm's store on the host batch path
(rosenna/strategy/point/epilogue.py).

    python bench/host_epilogue.py [--sizes 16 128 128 128 8] [--points 200000] [--repeats 5] [--threads 1]
                                  [--cflags "-O3 -march=native"] [--cpu-time] [--epilogue relu gelu_tanh ...]

Prints ns per point of ``<name>_infer_batch`` in C and Fortran (median of the repeats), each as a
multiple of the Relu MLP's, and onnxruntime's on the same model. Writes nothing else.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.host_batch import C_DRIVER, F_DRIVER, onnxruntime_ns
from rosenna.generate import Options, generate

#: Each epilogue as the nodes an exporter writes: (op, inputs, output) with ``h`` the Gemm's output
#: and named constants; the last output is the epilogue's.
EPILOGUES = {
    "relu": [("Relu", ["h"], "out")],
    "gelu_tanh": [("Pow", ["h", "three"], "p"), ("Mul", ["p", "k"], "pk"), ("Add", ["h", "pk"], "s"),
                  ("Mul", ["s", "r"], "sr"), ("Tanh", ["sr"], "t"), ("Add", ["t", "one"], "a"),
                  ("Mul", ["h", "a"], "m"), ("Mul", ["m", "half"], "out")],
    "softsign": [("Abs", ["h"], "ab"), ("Add", ["ab", "one"], "d"), ("Div", ["h", "d"], "out")],
    "swish": [("Sigmoid", ["h"], "sg"), ("Mul", ["h", "sg"], "out")],
    "scaled_tanh": [("Tanh", ["h"], "t"), ("Mul", ["t", "two"], "out")],
    "clamp": [("Clip", ["h", "lo", "hi"], "out")],
}
CONSTANTS = {"three": 3.0, "k": 0.044715, "r": float(np.sqrt(2 / np.pi)), "one": 1.0, "half": 0.5, "two": 2.0,
             "lo": -1.0, "hi": 1.0}


def mlp(path, sizes, epilogue, seed=3):
    """A Gemm MLP of ``sizes`` with ``epilogue``'s nodes after every hidden layer."""
    rng = np.random.default_rng(seed)
    used = {x for _, ins, _ in EPILOGUES[epilogue] for x in ins}
    inits = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in CONSTANTS.items() if n in used]
    nodes, prev = [], "x"
    last = len(sizes) - 2
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), f"b{i}")]
        h = f"h{i}"
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [h if i < last else "y"], transB=1))
        if i == last:
            break
        names = {"h": h, **{c: c for c in CONSTANTS}}
        for op, ins, out in EPILOGUES[epilogue]:
            nodes.append(helper.make_node(op, [names.get(x, f"e{i}_{x}") for x in ins], [f"e{i}_{out}"]))
        prev = f"e{i}_out"
    graph = helper.make_graph(nodes, epilogue, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", sizes[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", sizes[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def measure(epilogue, args):
    """``(C batch ns, Fortran batch ns, onnxruntime ns)`` per point for one epilogue."""
    work = tempfile.mkdtemp(prefix="rosenna-bench-")
    path = mlp(os.path.join(work, "m.onnx"), args.sizes, epilogue)
    plan, _ = generate(path, work, Options(name="mdl"))
    flags = args.cflags.split() + (["-DCPU_TIME"] if args.cpu_time else [])
    for name, text in (("drv.c", C_DRIVER), ("drv.F90", F_DRIVER)):
        with open(os.path.join(work, name), "w") as fh:
            fh.write(text)
    subprocess.run(["gcc", *flags, "-fopenmp", "-I", work, os.path.join(work, "drv.c"), os.path.join(work, "mdl.c"),
                    "-o", os.path.join(work, "drv_c"), "-lm"], check=True)
    subprocess.run(["gfortran", *flags, "-fopenmp", "-J", work, os.path.join(work, "mdl_model.F90"),
                    os.path.join(work, "drv.F90"), "-o", os.path.join(work, "drv_f")], check=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    batch = [float(subprocess.run([os.path.join(work, f"drv_{lang}"), str(args.points), str(args.repeats)],
                                  capture_output=True, text=True, check=True, env=env).stdout.split()[0])
             for lang in ("c", "f")]
    return (*batch, onnxruntime_ns(path, plan.nx, args.points, args.repeats, args.threads, args.cpu_time))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 128, 128, 128, 8])
    ap.add_argument("--epilogue", nargs="+", default=list(EPILOGUES), choices=list(EPILOGUES))
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cflags", default="-O3 -march=native")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cpu-time", action="store_true", help="process CPU time instead of wall clock (use one thread)")
    args = ap.parse_args(argv)
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    clock = "CPU time" if args.cpu_time else "wall clock"
    print(f"MLP {' -> '.join(map(str, args.sizes))}, {args.points} points, {args.threads} thread(s), "
          f"cflags {args.cflags}, {clock}, median of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'epilogue':<12} {'C ns/pt':>9} {'x Relu':>7} {'F ns/pt':>9} {'x Relu':>7} {'ort ns/pt':>10}")
    relu = None
    for epilogue in args.epilogue:
        c_ns, f_ns, ort_ns = measure(epilogue, args)
        relu = relu or (c_ns, f_ns)
        print(f"{epilogue:<12} {c_ns:>9.1f} {c_ns / relu[0]:>7.2f} {f_ns:>9.1f} {f_ns / relu[1]:>7.2f} {ort_ns:>10.1f}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
