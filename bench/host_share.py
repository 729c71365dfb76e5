"""Host threads on a machine they share: the time per call of the whole-field ``<name>_infer_one``
and of ``<name>_infer_batch`` with 2 threads on 2 cores while another process holds one of them (a
busy loop pinned to core 1), against 1 thread: the default build (``host_wait=yield``:
rosenna_team_wait, which sleeps instead of spinning; ``host_pace``: the whole-field call's team
size chosen by the time calls took), the same without the pace (``host_pace=0``), OpenMP's own
barriers (``host_wait=omp host_pace=0``, spinning unless ``OMP_WAIT_POLICY=passive``) and
onnxruntime with 1 and 2 threads. Each run of a driver is one process of ``--calls`` calls, so
the pace starts afresh in each (its first calls time both team sizes): give enough calls.

    .venv/bin/python bench/host_share.py [--model convnet16 mlp128] [--rounds 7] [--calls 20]
                                         [--no-busy] [--cflags "-O3 -march=native"]

Models: ``convnet16``: tests/op_models.convnet with 16 channels (2 -> 16 -> 16 -> 1, 3x3, 64x64,
ReLU, Tanh), one sample per call; ``mlp128`` (or any zoo MLP): ``<name>_infer_batch`` over 65,536
points per call. Every 2-thread run is pinned to cores 0 and 1 (taskset's affinity), every 1-thread
run to core 0, the busy loop to core 1. The paths run interleaved, one repeat of each per round, each round starting one path
later; the table gives the median over
the rounds of the wall time per call and its ratio to the same build's 1-thread time, and the
load average before and after. Results are checked against onnxruntime (rosenna.compare) first.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import host_whole  # noqa: E402
from rosenna import zoo  # noqa: E402
from rosenna.compare import compare  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402
from rosenna.strategy import Tuning  # noqa: E402

CORES = {0, 1}
BATCH_POINTS = 65536

BATCH_DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include "net.h"

int main(int argc, char **argv)
{
    int reps = atoi(argv[1]), calls = atoi(argv[2]), n = atoi(argv[3]);
    float *x = malloc(sizeof(float) * (size_t)n * NET_NX), *y = malloc(sizeof(float) * (size_t)n * NET_NY);
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), (size_t)n * NET_NX, f) != (size_t)n * NET_NX) return 1;
    fclose(f);
    net_infer_batch(n, x, y, NULL);
    for (int r = 0; r < reps; ++r) {
        double w0 = omp_get_wtime();
        for (int i = 0; i < calls; ++i) net_infer_batch(n, x, y, NULL);
        printf("%.9f 0\n", (omp_get_wtime() - w0) / calls);
    }
    f = fopen("y_c.bin", "wb");
    fwrite(y, sizeof(float), (size_t)n * NET_NY, f);
    fclose(f);
    (void)argc;
    return 0;
}
"""


#: The builds compared: the default (yielding barrier, team size by pace), without the pace, and
#: OpenMP's own barriers without it.
BUILDS = {"default": {}, "host_pace=0": {"host_pace": 0},
          "host_wait=omp host_pace=0": {"host_wait": "omp", "host_pace": 0}}


def pin():
    os.sched_setaffinity(0, CORES)


def pin_free():
    """One thread: the core the busy loop leaves free (the 1-thread time the 2 threads are held to)."""
    os.sched_setaffinity(0, {0})


def busy_loop():
    """A process that holds core 1 until killed."""
    return subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {1})\nwhile True: pass"])


def build(name, tune, work):
    """Generate and compile the model with the tuning ``tune`` (e.g. ``{"host_wait": "omp"}``):
    (driver path, plan, x, path of the model)."""
    import op_models

    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, name + ".onnx")
    if name == "convnet16":
        op_models.convnet(path, channels=16)
    else:
        zoo.save(name, path)
    plan, _ = generate(path, work, Options(name="net", embed=True, tuning=Tuning().replace(**tune)))
    whole = plan.path == "whole"
    points = 1 if whole else BATCH_POINTS
    x = np.random.default_rng(0).uniform(-1, 1, points * plan.nx).astype(np.float32)
    x.tofile(os.path.join(work, "x.bin"))
    with open(os.path.join(work, "drv.c"), "w") as fh:
        fh.write(host_whole.C_DRIVER if whole else BATCH_DRIVER)
    subprocess.run(["gcc", *ARGS.cflags.split(), "-fopenmp", "-I", work, "drv.c", "net.c", "-o", "drv", "-lm"],
                   cwd=work, check=True)
    return os.path.join(work, "drv"), plan, x, path, points


def run_driver(drv, threads, calls, points, passive=False):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("OMP_WAIT_POLICY", None)
    if passive:
        env["OMP_WAIT_POLICY"] = "passive"
    out = subprocess.run([drv, "1", str(calls), str(points)], cwd=os.path.dirname(drv), env=env,
                         capture_output=True, text=True, check=True, preexec_fn=pin if threads > 1 else pin_free).stdout.split()
    return float(out[0])


def ort_session(path, threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def measure(name):
    work = tempfile.mkdtemp(prefix="rosenna-share-")
    builds = {key: build(name, tune, os.path.join(work, f"build{i}")) for i, (key, tune) in enumerate(BUILDS.items())}
    _, plan, x, path, points = builds["default"]
    runtimes = {threads: ort_session(path, threads) for threads in (1, 2)}
    inp = runtimes[1].get_inputs()[0]
    feed = {inp.name: x.reshape([points] + [d if isinstance(d, int) else 1 for d in inp.shape[1:]])}
    want = runtimes[1].run(None, feed)[0].reshape(-1)
    for key, (drv, *_rest) in builds.items():
        run_driver(drv, 2, 1, points)
        got = np.fromfile(os.path.join(os.path.dirname(drv), "y_c.bin"), np.float32)
        result = compare(got, want, output="y")
        if not result.passed:
            raise SystemExit(f"{name} ({key}): differs from onnxruntime: {result.message()}")
    paths = []
    for key in BUILDS:
        for threads in (1, 2):
            paths.append((f"rosenna {key}", threads,
                          lambda key=key, threads=threads: run_driver(builds[key][0], threads, ARGS.calls, points)))
    paths.append(("rosenna host_wait=omp host_pace=0, OMP_WAIT_POLICY=passive", 2,
                  lambda: run_driver(builds["host_wait=omp host_pace=0"][0], 2, ARGS.calls, points, passive=True)))
    for threads, sess in runtimes.items():
        def ort(sess=sess, threads=threads):
            os.sched_setaffinity(0, CORES if threads > 1 else {0})
            t0 = time.perf_counter()
            for _ in range(ARGS.calls):
                sess.run(None, feed)
            return (time.perf_counter() - t0) / ARGS.calls
        paths.append(("onnxruntime", threads, ort))
    busy = None if ARGS.no_busy else busy_loop()
    load0 = os.getloadavg()[0]
    try:
        times = [[] for _ in paths]
        for r in range(ARGS.rounds):  # each round starts one path later: none always follows onnxruntime's spinning pool
            for i in [(r + k) % len(paths) for k in range(len(paths))]:
                times[i].append(paths[i][2]())
    finally:
        if busy:
            busy.kill()
            busy.wait()
    medians = [float(np.median(t)) for t in times]
    one = {label: med for (label, threads, _), med in zip(paths, medians) if threads == 1}
    print(f"{name}: {'one sample' if points == 1 else f'{points} points'} per call, cores 0-1"
          f"{', a busy loop on core 1' if busy else ''}, {ARGS.cflags}, median of {ARGS.rounds} interleaved rounds "
          f"x {ARGS.calls} calls; load average {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| path | threads | us per call | x 1 thread |")
    print("| --- | ---: | ---: | ---: |")
    for (label, threads, _), med in zip(paths, medians):
        base = one.get(label) or one.get(label.split(",")[0])
        print(f"| {label} | {threads} | {med * 1e6:.1f} | {med / base:.2f} |")
    print(flush=True)


def main(argv=None):
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["convnet16", "mlp128"])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--cflags", default="-O3 -march=native")
    ap.add_argument("--no-busy", action="store_true", help="no busy loop on core 1")
    ARGS = ap.parse_args(argv)
    pin()
    for name in ARGS.model:
        measure(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
