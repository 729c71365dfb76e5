"""Host time of a conv net over a 64x64 field through <name>_infer_one, and of an LSTM cell step
through <name>_infer, against onnxruntime on the same inputs and the same cores.

    .venv/bin/python bench/host_ops.py [--threads N] [--repeats R]

The conv net is tests/op_models.convnet (2 -> 8 -> 8 -> 1 channels, 3x3, 64x64); the LSTM cell is
tests/op_models.lstm_cell (3 inputs, 5 hidden, one step per call, with a Linear head), run over
100,000 cells per timing as a solver would call it (one call per cell, state slices in x and y).
Prints a markdown table; the median of the repeats is reported.
"""

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
import op_models  # noqa: E402
from rosenna import generate as gen  # noqa: E402

C_CONV = """#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "{n}.h"
int main(int argc, char **argv)
{{
    int reps = atoi(argv[1]);
    float *x = malloc(sizeof(float) * {NX}), *y = malloc(sizeof(float) * {NY});
    FILE *f = fopen("x.bin", "rb");
    if (fread(x, sizeof(float), {NX}, f) != {NX}) return 1;
    fclose(f);
    {n}_infer_one(x, y, NULL);
    for (int r = 0; r < reps; ++r) {{
        double t0 = omp_get_wtime();
        {n}_infer_one(x, y, NULL);
        printf("%.9f\\n", omp_get_wtime() - t0);
    }}
    f = fopen("y.bin", "wb");
    fwrite(y, sizeof(float), {NY}, f);
    fclose(f);
    (void)argc;
    return 0;
}}
"""

C_CELL = """#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "{n}.h"
int main(int argc, char **argv)
{{
    int reps = atoi(argv[1]), cells = atoi(argv[2]);
    float *x = malloc(sizeof(float) * {NX} * cells), *y = malloc(sizeof(float) * {NY} * cells);
    FILE *f = fopen("x.bin", "rb");
    if (fread(x, sizeof(float), (size_t){NX} * cells, f) != (size_t){NX} * cells) return 1;
    fclose(f);
    for (int r = 0; r < reps; ++r) {{
        double t0 = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (int i = 0; i < cells; ++i)
            {n}_infer(x + (size_t)i * {NX}, y + (size_t)i * {NY});
        printf("%.9f\\n", omp_get_wtime() - t0);
    }}
    f = fopen("y.bin", "wb");
    fwrite(y, sizeof(float), (size_t){NY} * cells, f);
    fclose(f);
    (void)argc;
    return 0;
}}
"""


def build(model, work, template):
    plan, _ = gen.generate(model, work, gen.Options(lang="c"))
    src = os.path.join(work, "main.c")
    with open(src, "w") as fh:
        fh.write(template.format(n=plan.name, NX=plan.nx, NY=plan.ny))
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-I", work, src, os.path.join(work, f"{plan.name}.c"),
                    "-o", os.path.join(work, "main"), "-lm"], check=True)
    return plan


def run(work, args, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([os.path.join(work, "main"), *map(str, args)], cwd=work, env=env, check=True,
                         capture_output=True, text=True).stdout
    return float(np.median([float(v) for v in out.split()]))


def ort_session(model, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def timed(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--cells", type=int, default=100_000)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        conv = op_models.convnet(os.path.join(tmp, "convnet.onnx"))
        work = os.path.join(tmp, "conv")
        plan = build(conv, work, C_CONV)
        x = rng.uniform(-1, 1, plan.nx).astype(np.float32)
        x.tofile(os.path.join(work, "x.bin"))
        ours = run(work, [args.repeats], args.threads)
        sess = ort_session(conv, args.threads)
        feed = {"field": x.reshape(1, 2, 64, 64)}
        theirs = timed(lambda: sess.run(None, feed), args.repeats)
        err = np.abs(np.fromfile(os.path.join(work, "y.bin"), np.float32) - sess.run(None, feed)[0].reshape(-1)).max()
        rows.append(("conv net 2-8-8-1, 3x3, 64x64 field, one sample", "convnet_infer_one", ours * 1e6,
                     theirs * 1e6, err))

        cell = op_models.lstm_cell(os.path.join(tmp, "cell.onnx"))
        work = os.path.join(tmp, "cell")
        plan = build(cell, work, C_CELL)
        xs = rng.uniform(-1, 1, (args.cells, plan.nx)).astype(np.float32)
        xs.tofile(os.path.join(work, "x.bin"))
        ours = run(work, [args.repeats, args.cells], args.threads)
        sess = ort_session(cell, args.threads)
        slices = {s.name: s for s in plan.inputs}

        def ort_cells():
            # onnxruntime takes the cells as the LSTM batch: one session.run for all of them
            feed = {name: xs[:, s.offset:s.offset + s.size].reshape(s.shape[0], args.cells, -1)
                    for name, s in slices.items()}
            return sess_batch.run(None, feed)

        batch_model = op_models.lstm_cell(os.path.join(tmp, "cell_batch.onnx"))
        import onnx

        m = onnx.load(batch_model)
        for vi in list(m.graph.input) + list(m.graph.output):
            dims = vi.type.tensor_type.shape.dim
            if len(dims) == 3:
                dims[1].dim_value = args.cells
        for init in m.graph.initializer:
            if init.name == "flat":
                init.CopyFrom(onnx.numpy_helper.from_array(np.array([args.cells, 5], np.int64), "flat"))
        m.graph.output[0].type.tensor_type.shape.dim[0].dim_value = args.cells
        onnx.save(m, batch_model)
        sess_batch = ort_session(batch_model, args.threads)
        theirs = timed(ort_cells, args.repeats)
        got = np.fromfile(os.path.join(work, "y.bin"), np.float32).reshape(args.cells, plan.ny)
        want = ort_cells()[0].reshape(-1)
        err = np.abs(got[:, 0] - want).max()
        rows.append((f"LSTM cell step (3 in, 5 hidden, Linear head), {args.cells} cells", "lstm_cell_infer per cell",
                     ours / args.cells * 1e9, theirs / args.cells * 1e9, err))

    cpu = platform.processor() or platform.machine()
    print(f"threads: {args.threads}; cpu: {cpu}; repeats: {args.repeats} (median)")
    print()
    print("| model | rosenna routine | rosenna | onnxruntime | ratio | max abs diff |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    units = ["us", "ns/cell"]
    for (what, routine, ours, theirs, err), unit in zip(rows, units):
        print(f"| {what} | {routine} | {ours:.1f} {unit} | {theirs:.1f} {unit} | {ours / theirs:.2f}x | {err:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
