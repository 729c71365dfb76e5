"""Per point on the CPU: a solver's loop calling ``<name>_infer`` per point, scalar, as an ``omp
simd`` loop (the 8-lane SIMD variant the header declares) and as an ``omp simd simdlen(W)`` loop
(W = 16, the wide variant, where the profile's target has AVX-512; else 8), against ``<name>_infer_batch`` and
onnxruntime's session.run over the same points, one thread, in the same run.

    .venv/bin/python bench/host_point_simd.py [--model gemm_big mlp128 silu tanh] [--points 65536]
                                              [--rounds 5] [--cflags "-O3 -march=native -ffp-contract=off"]
                                              [--tune host_fma=off] [--wall]

Models (float32): ``gemm_big`` and ``mlp128`` of rosenna.zoo; ``silu``: 5-64-64-3 with SiLU
(x*sigmoid(x), as PyTorch exports it) after the hidden layers; ``tanh``: 7-96x4-5 (four hidden
layers of 96, Tanh). The process is pinned to core 0 (one thread: OMP_NUM_THREADS=1,
intra_op_num_threads=1). Each round runs every path once, interleaved; the table gives the
median ns per point over the rounds (the process's CPU time, so that other work on a shared
machine counts less; ``--wall``: the wall clock), the SIMD loop's time over the batch path's, the
batch path's over onnxruntime's, and the load average before and after each model's rounds. The
SIMD loops' outputs are compared with the batch path's (equal bit for bit under
-ffp-contract=off, in every ``host_fma`` setting) and with onnxruntime's (verify's tolerance).
``--tune`` sets tuning knobs as generate's ``--tune`` does. The default command takes about 15 s
on an idle core.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from rosenna import zoo  # noqa: E402
from rosenna.compare import compare  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402
from rosenna.strategy import Tuning  # noqa: E402

DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include <time.h>
#include "net.h"

/* CPU time of the process (one thread: what the code costs, whatever else runs), or with -DWALL
   the wall clock */
static double now(void)
{
#ifdef WALL
    return omp_get_wtime();
#else
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
#endif
}

static void scalar_loop(int n, const float *x, float *y)
{
    for (int i = 0; i < n; ++i)
        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);
}

static void simd_loop(int n, const float *x, float *y)
{
#pragma omp parallel for simd
    for (int i = 0; i < n; ++i)
        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);
}

/* the loop at the wide variant's width (WIDE: 16 on an AVX-512 target, else 8 as above) */
static void wide_loop(int n, const float *x, float *y)
{
#pragma omp parallel for simd simdlen(WIDE)
    for (int i = 0; i < n; ++i)
        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);
}

int main(int argc, char **argv)
{
    int n = atoi(argv[1]), rounds = atoi(argv[2]);
    float *x = malloc(sizeof(float) * (size_t)n * NET_NX), *y = malloc(sizeof(float) * (size_t)n * NET_NY);
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), (size_t)n * NET_NX, f) != (size_t)n * NET_NX) return 1;
    fclose(f);
    for (int r = 0; r < rounds; ++r) {
        double t0 = now();
        scalar_loop(n, x, y);
        double t1 = now();
        net_infer_batch(n, x, y, NULL);
        double t2 = now();
        f = fopen("y_batch.bin", "wb"); fwrite(y, sizeof(float), (size_t)n * NET_NY, f); fclose(f);
        double t3 = now();
        simd_loop(n, x, y);
        double t4 = now();
        f = fopen("y_simd.bin", "wb"); fwrite(y, sizeof(float), (size_t)n * NET_NY, f); fclose(f);
        double t5 = now();
        wide_loop(n, x, y);
        double t6 = now();
        printf("%.3f %.3f %.3f %.3f\n", (t1 - t0) * 1e9 / n, (t2 - t1) * 1e9 / n, (t4 - t3) * 1e9 / n,
               (t6 - t5) * 1e9 / n);
        fflush(stdout);
    }
    f = fopen("y_wide.bin", "wb"); fwrite(y, sizeof(float), (size_t)n * NET_NY, f); fclose(f);
    (void)argc;
    return 0;
}
"""


def mlp(path, name, sizes, act, seed):
    """A Gemm MLP with ``act`` ("Tanh" or "SiLU": Sigmoid and Mul) after every hidden layer."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i, (k, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        inits += [numpy_helper.from_array((rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(n)).astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"g{i}"], transB=1))
        prev = f"g{i}"
        if i < len(sizes) - 2:
            if act == "SiLU":
                nodes += [helper.make_node("Sigmoid", [prev], [f"s{i}"]), helper.make_node("Mul", [prev, f"s{i}"], [f"a{i}"])]
            else:
                nodes.append(helper.make_node(act, [prev], [f"a{i}"]))
            prev = f"a{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", sizes[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", sizes[-1]])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="rosenna-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def model_file(name, work):
    path = os.path.join(work, name + ".onnx")
    if name == "silu":
        return mlp(path, name, [5, 64, 64, 3], "SiLU", 4)
    if name == "tanh":
        return mlp(path, name, [7, 96, 96, 96, 96, 5], "Tanh", 5)
    return zoo.save(name, path)


def measure(name, args):
    import onnxruntime as ort

    work = tempfile.mkdtemp(prefix="rosenna-simd-")
    path = model_file(name, work)
    plan, _ = generate(path, work, Options(name="net", embed=True, tuning=Tuning().parse_overrides(args.tune)))
    x = np.random.default_rng(0).uniform(-1, 1, (args.points, plan.nx)).astype(np.float32)
    x.tofile(os.path.join(work, "x.bin"))
    with open(os.path.join(work, "drv.c"), "w") as fh:
        fh.write(DRIVER)
    wide = 16 if "simdlen(16)" in open(os.path.join(work, "net.h")).read() else 8
    # the wide loop's remainder: GCC 12 passes the variant a wrong point in a vectorised epilogue
    clock = ["-DWALL"] if args.wall else []
    subprocess.run(["gcc", *args.cflags.split(), "-fopenmp", f"-DWIDE={wide}", *clock, "--param", "vect-epilogues-nomask=0",
                    "-I", work, "drv.c", "net.c", "-o", "drv", "-lm"], cwd=work, check=True)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x}
    want = sess.run(None, feed)[0].reshape(-1)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    rows = {"scalar": [], "batch": [], "simd": [], "wide": [], "ort": []}
    clock = time.perf_counter if args.wall else time.process_time
    load = os.getloadavg()[0]
    for _ in range(args.rounds):  # one C round, then one onnxruntime run: interleaved
        out = subprocess.run(["./drv", str(args.points), "1"], cwd=work, env=env, capture_output=True, text=True,
                             check=True).stdout.split()
        for key, value in zip(("scalar", "batch", "simd", "wide"), out):
            rows[key].append(float(value))
        t0 = clock()
        sess.run(None, feed)
        rows["ort"].append((clock() - t0) * 1e9 / args.points)
    simd = np.fromfile(os.path.join(work, "y_simd.bin"), np.float32)
    batch = np.fromfile(os.path.join(work, "y_batch.bin"), np.float32)
    wide_y = np.fromfile(os.path.join(work, "y_wide.bin"), np.float32)
    if "-ffp-contract=off" in args.cflags and not (np.array_equal(simd, batch) and np.array_equal(wide_y, batch)):
        raise SystemExit(f"{name}: a SIMD loop differs from _infer_batch")
    result = compare(simd, want, output="y")
    if not result.passed:
        raise SystemExit(f"{name}: differs from onnxruntime: {result.message()}")
    med = {key: float(np.median(values)) for key, values in rows.items()}
    return (f"| {name} | {med['scalar']:.1f} | {med['simd']:.1f} | {med['wide']:.1f} ({wide}) | {med['batch']:.1f} | "
            f"{med['ort']:.1f} | {med['simd'] / med['batch']:.2f} | {med['wide'] / med['batch']:.2f} | "
            f"{med['batch'] / med['ort']:.2f} | {load:.1f} -> {os.getloadavg()[0]:.1f} |")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["gemm_big", "mlp128", "silu", "tanh"])
    ap.add_argument("--points", type=int, default=65536)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cflags", default="-O3 -march=native -ffp-contract=off")
    ap.add_argument("--tune", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--wall", action="store_true", help="time the wall clock instead of the process's CPU time")
    args = ap.parse_args(argv)
    os.sched_setaffinity(0, {0})
    load = os.getloadavg()[0]
    rows = [measure(name, args) for name in args.model]
    print(f"1 thread on core 0, {args.points} points, {args.cflags}{' --tune ' + ' '.join(args.tune) if args.tune else ''}, "
          f"{'wall' if args.wall else 'CPU'} time, median of {args.rounds} interleaved rounds; "
          f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| model | `_infer` loop ns/point | `omp simd` loop | `simdlen(W)` loop (W) | `_infer_batch` | onnxruntime | "
          "SIMD / batch | wide / batch | batch / onnxruntime | load average |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
