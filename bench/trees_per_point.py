"""Tree ensembles per point on the host: rosenna's generated C (``<name>_infer_batch``, SIMD blocks,
and a plain loop of ``<name>_infer``) against onnxruntime's session.run over the same points in
one batch, one thread each.

    python bench/trees_per_point.py [--trees 500] [--depth 12] [--points 100000] [--repeats 5]
                                    [--kind forest|boosting] [--cflags "-O3 -march=native"]

The ensemble is a scikit-learn random forest (or gradient boosting) on 8 synthetic features,
converted by skl2onnx (ai.onnx.ml TreeEnsembleRegressor). Prints the ensemble's size, ns per
point (median of the repeats) for each path, and the sums of both outputs over the points (a check
that they agree); writes nothing else. For comparison it also times hummingbird's GEMM strategy
(per tree: split features by one matrix product, leaf reached by a second, padded to the largest
tree) written in numpy, where its matrices fit in 2 GB.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # numpy's BLAS on one thread too, like every other path here

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
from host_batch import C_DRIVER  # noqa: E402  the same driver: batch and per-point loop

from rosenna.generate import Options, generate  # noqa: E402


def ensemble(kind, trees, depth, features=8, samples=20000, seed=0):
    from sklearn.ensemble import GradientBoostingRegressor, RandomForestRegressor
    from skl2onnx import to_onnx

    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (samples, features)).astype(np.float32)
    y = np.sin(3 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.1 * rng.normal(size=samples)
    model = (RandomForestRegressor(n_estimators=trees, max_depth=depth, n_jobs=-1, random_state=0) if kind == "forest"
             else GradientBoostingRegressor(n_estimators=trees, max_depth=depth, random_state=0)).fit(x, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    nodes = sum(len(t.tree_.feature) for t in (model.estimators_ if kind == "forest" else model.estimators_.ravel()))
    return proto, nodes, features, model


def gemm_form(model, kind):
    """The ensemble in hummingbird's GEMM strategy, float32 numpy arrays: per tree, A picks each
    split's feature, B maps split outcomes to leaves (+1 on a left-subtree path, -1 on a right one),
    E counts each leaf's left turns, V holds the leaf values; padded to the largest tree. Returns
    ``predict(x)``, or None when the padded matrices would pass 2 GB."""
    trees = [t.tree_ for t in (model.estimators_ if kind == "forest" else model.estimators_.ravel())]
    splits = max(int((t.children_left >= 0).sum()) for t in trees)
    leaves = max(int((t.children_left < 0).sum()) for t in trees)
    if len(trees) * splits * leaves * 4 > 2 ** 31:
        return None
    count = len(trees)
    a = np.zeros((count, trees[0].n_features, splits), np.float32)
    thr = np.full((count, 1, splits), np.inf, np.float32)
    b = np.zeros((count, splits, leaves), np.float32)
    e = np.full((count, 1, leaves), -1.0, np.float32)
    v = np.zeros((count, leaves), np.float32)
    for k, t in enumerate(trees):
        inner = {n: i for i, n in enumerate(np.flatnonzero(t.children_left >= 0))}
        outer = {n: i for i, n in enumerate(np.flatnonzero(t.children_left < 0))}
        for n, i in inner.items():
            a[k, t.feature[n], i] = 1.0
            thr[k, 0, i] = t.threshold[n]
        stack = [(0, [])]
        while stack:
            n, path = stack.pop()
            if n in outer:
                for i, left in path:
                    b[k, i, outer[n]] = 1.0 if left else -1.0
                e[k, 0, outer[n]] = sum(left for _, left in path)
                v[k, outer[n]] = t.value[n].ravel()[0]
                continue
            stack += [(t.children_left[n], path + [(inner[n], True)]), (t.children_right[n], path + [(inner[n], False)])]
    scale = 1.0 / count if kind == "forest" else float(model.learning_rate)
    base = 0.0 if kind == "forest" else float(np.ravel(model.init_.constant_)[0]) if hasattr(model.init_, "constant_") \
        else 0.0

    def predict(x):
        went_left = (np.matmul(x[None], a) <= thr).astype(np.float32)  # [trees, n, splits]
        reached = np.matmul(went_left, b) == e  # a leaf is reached where its left turns all happened
        return (np.einsum("tnl,tl->n", reached.astype(np.float32), v) * scale + base)[:, None]

    return predict


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=500)
    parser.add_argument("--depth", type=int, default=12)
    parser.add_argument("--points", type=int, default=100000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kind", choices=("forest", "boosting"), default="forest")
    parser.add_argument("--cflags", default="-O3 -march=native")
    args = parser.parse_args()

    import onnxruntime as ort

    proto, nodes, features, model = ensemble(args.kind, args.trees, args.depth)
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "trees.onnx")
        with open(path, "wb") as handle:
            handle.write(proto.SerializeToString())
        generate(path, work, Options(lang="c", name="mdl", embed=False))
        driver = C_DRIVER.replace("int n = atoi(argv[1]), reps = atoi(argv[2]);",
                                  "int n = atoi(argv[1]), reps = atoi(argv[2]);\n    if (mdl_init(\"mdl.rwt\")) return 3;")
        with open(os.path.join(work, "driver.c"), "w") as handle:
            handle.write(driver)
        start = time.perf_counter()
        subprocess.run(f"gcc {args.cflags} -fopenmp -I{work} {work}/driver.c {work}/mdl.c -lm -o {work}/bench",
                       shell=True, check=True, cwd=work)
        compile_s = time.perf_counter() - start
        env = dict(os.environ, OMP_NUM_THREADS="1")
        out = subprocess.run([f"{work}/bench", str(args.points), str(args.repeats)], capture_output=True, text=True,
                             env=env, cwd=work, check=True).stdout.split()
        batch_ns, point_ns, total = float(out[0]), float(out[1]), float(out[2])

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        sess = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        i = np.arange(args.points * features, dtype=np.int64)
        x = ((((i * 2654435761) % 2000).astype(np.float32) / np.float32(1000.0)) - np.float32(1.0)).reshape(
            args.points, features)  # the driver's inputs, rounded as it rounds them
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            want = sess.run(None, {sess.get_inputs()[0].name: x})[0]
            times.append(time.perf_counter() - start)
        want_total = float(np.sum(want, dtype=np.float64))
        ort_ns = sorted(times)[len(times) // 2] * 1e9 / args.points
        gemm = gemm_form(model, args.kind)
        gemm_ns = None
        if gemm is not None:
            chunk = 1000  # rows per GEMM call: the [trees, rows, leaves] products stay in memory
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                got = np.concatenate([gemm(x[i:i + chunk]) for i in range(0, args.points, chunk)])
                times.append(time.perf_counter() - start)
            gemm_ns = sorted(times)[len(times) // 2] * 1e9 / args.points
            gemm_error = float(np.max(np.abs(got - want)))
    print(f"{args.kind}: {args.trees} trees, depth {args.depth}, {nodes} nodes, {features} features; "
          f"{args.points} points, 1 thread, gcc {args.cflags} (compile {compile_s:.1f} s)")
    print(f"  rosenna infer_batch   {batch_ns:10.1f} ns/point  ({batch_ns / ort_ns:.2f}x onnxruntime)")
    print(f"  rosenna infer loop    {point_ns:10.1f} ns/point  ({point_ns / ort_ns:.2f}x onnxruntime)")
    print(f"  onnxruntime run       {ort_ns:10.1f} ns/point")
    if gemm_ns is not None:
        print(f"  GEMM form (numpy)     {gemm_ns:10.1f} ns/point  ({gemm_ns / ort_ns:.2f}x onnxruntime; "
              f"max abs difference {gemm_error:.1e})")
    else:
        print("  GEMM form (numpy)     skipped: its padded matrices would pass 2 GB")
    print(f"  sum of the outputs: rosenna {total:.6g}, onnxruntime {want_total:.6g} "
          f"(relative difference {abs(total - want_total) / max(abs(want_total), 1e-30):.1e})")


if __name__ == "__main__":
    main()
