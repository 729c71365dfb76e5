"""Host time of whole-field conv nets through ``<name>_infer_one``, C and Fortran, against
onnxruntime on the same sample and the same number of threads (``intra_op_num_threads``).

    .venv/bin/python bench/host_whole.py [--model unet convnet dwsep] [--threads 2] [--repeats 15]
                                         [--calls 20] [--passive] [--cflags "-O3 -march=native"]
                                         [--tune host_fma=true]

Models (one sample each, float32):

- ``unet``: examples/surrogates/poisson_guess's U-Net (8 channels, 5 levels, 64x64);
- ``convnet``: the GPU gate's conv net, tests/op_models.convnet (2 -> 8 -> 8 -> 1, 3x3, 64x64);
- ``convnet16``: the same with 16 channels (2 -> 16 -> 16 -> 1);
- ``dwsep``: a depthwise-separable net, bench/frontier.py's structure (2 -> 24 channels: 3x3 conv,
  two depthwise 3x3 + pointwise 1x1 blocks, 1x1 to 2 channels, ReLUs) over a 64x64 field;
- ``fno``: bench/families_h200.py's 2-D Fourier neural operator (3 -> 32 channels, 4 Fourier layers
  of 12 x 12 modes, 64x64; 16 DFT nodes), exported by torch's dynamo exporter (needs torch).

Each repeat times ``--calls`` calls back to back; the table gives the median over the repeats of
the time per call, wall clock and the process's CPU time (all threads together, spinning
included) for every path, and each path's wall time as a fraction of onnxruntime's. Every
result is checked against onnxruntime with verify's tolerance (rosenna.compare) before timing.
On a machine shared with other work read the CPU-time columns and the load average printed, and
give ``--passive`` (threads that wait sleep instead of spinning, in both) or ``--threads 1``.
``--tune`` sets tuning knobs as generate's ``--tune`` does.
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
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, HERE)

from rosenna.compare import compare  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402
from rosenna.strategy import Tuning  # noqa: E402

C_DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <omp.h>
#include "net.h"

static double cpu(void) { struct timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

int main(int argc, char **argv)
{
    int reps = atoi(argv[1]), calls = atoi(argv[2]);
    static float x[NET_NX], y[NET_NY];
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), NET_NX, f) != NET_NX) return 1;
    fclose(f);
#ifdef NET_FILE
    if (net_init("net.rwt") != 0) return 2;
#endif
    net_infer_one(x, y, NULL);
    for (int r = 0; r < reps; ++r) {
        double w0 = omp_get_wtime(), c0 = cpu();
        for (int i = 0; i < calls; ++i) net_infer_one(x, y, NULL);
        printf("%.9f %.9f\n", (omp_get_wtime() - w0) / calls, (cpu() - c0) / calls);
    }
    f = fopen("y_c.bin", "wb");
    fwrite(y, sizeof(float), NET_NY, f);
    fclose(f);
    (void)argc;
    return 0;
}
"""

F_DRIVER = """program bench
  use omp_lib
  use net_model
  implicit none
  integer :: reps, calls, r, i, status, u
  character(len=32) :: arg
  real(net_rk) :: x(net_nx), y(net_ny)
  double precision :: w0
  real :: c0, c1
  call get_command_argument(1, arg); read (arg, *) reps
  call get_command_argument(2, arg); read (arg, *) calls
  open (newunit=u, file='x.bin', access='stream', form='unformatted', status='old')
  read (u) x
  close (u)
#ifdef NET_FILE
  call net_init('net.rwt', status)
  if (status /= 0) error stop 2
#endif
  call net_infer_one(x, y, status)
  if (status /= 0) error stop 1
  do r = 1, reps
    w0 = omp_get_wtime()
    call cpu_time(c0)
    do i = 1, calls
      call net_infer_one(x, y, status)
    end do
    call cpu_time(c1)
    print '(f0.9, 1x, f0.9)', (omp_get_wtime() - w0) / calls, dble(c1 - c0) / calls
  end do
  open (newunit=u, file='y_f.bin', access='stream', form='unformatted', status='replace')
  write (u) y
  close (u)
end program bench
"""


def dwsep(path, size=64, channels=24, seed=0):
    """bench/frontier.py's depthwise-separable net, written with onnx.helper (no torch needed)."""
    rng = np.random.default_rng(seed)
    node, inits, nodes = helper.make_node, [], []

    def conv(src, dst, cin, cout, k, group=1, relu=False):
        w = rng.standard_normal((cout, cin // group, k, k)) / np.sqrt(cin // group * k * k)
        b = 0.1 * rng.standard_normal(cout)
        inits.extend([numpy_helper.from_array(w.astype(np.float32), dst + "_w"),
                      numpy_helper.from_array(b.astype(np.float32), dst + "_b")])
        out = dst + "_c" if relu else dst
        nodes.append(node("Conv", [src, dst + "_w", dst + "_b"], [out], pads=[k // 2] * 4, group=group))
        if relu:
            nodes.append(node("Relu", [out], [dst]))
        return dst

    h = conv("x", "stem", 2, channels, 3, relu=True)
    for i in range(2):
        h = conv(h, f"dw{i}", channels, channels, 3, group=channels)
        h = conv(h, f"pw{i}", channels, channels, 1, relu=True)
    conv(h, "y", channels, 2, 1)
    graph = helper.make_graph(nodes, "dwsep", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="rosenna-bench")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def fno(path):
    """families_h200.py's FNO (the model the GPU benchmark times), exported as that script does."""
    import warnings

    import torch
    from families_h200 import FNO, torch_fno

    torch.manual_seed(0)
    model = torch_fno(**{k: FNO[k] for k in ("channels", "modes", "layers", "size", "inputs")}).eval()
    x = torch.rand(1, FNO["inputs"], FNO["size"], FNO["size"]) * 2 - 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx.save(torch.onnx.export(model, (x,), dynamo=True).model_proto, path)
    return path


def model_file(name, work):
    import op_models

    path = os.path.join(work, name + ".onnx")
    if name == "unet":
        with open(os.path.join(ROOT, "examples", "surrogates", "poisson_guess", "pguess.onnx"), "rb") as src:
            open(path, "wb").write(src.read())
        return path
    if name == "convnet":
        return op_models.convnet(path)
    if name == "convnet16":
        return op_models.convnet(path, channels=16)
    if name == "fno":
        return fno(path)
    return dwsep(path)


def onnxruntime_times(path, x, threads, repeats, calls, passive=False):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if passive:  # idle threads sleep instead of spinning, as OMP_WAIT_POLICY=passive does for OpenMP
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    feed = {inp.name: x.reshape([d if isinstance(d, int) else 1 for d in inp.shape])}
    want = sess.run(None, feed)[0].reshape(-1)
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            sess.run(None, feed)
        wall.append((time.perf_counter() - w0) / calls)
        cpu.append((time.process_time() - c0) / calls)
    return want, float(np.median(wall)), float(np.median(cpu))


def measure(name, args):
    work = tempfile.mkdtemp(prefix="rosenna-whole-")
    path = model_file(name, work)
    embed = name != "fno"  # its 10 MB of weights from net.rwt, not compiled in
    plan, _ = generate(path, work, Options(name="net", embed=embed, tuning=Tuning().parse_overrides(args.tune)))
    x = np.random.default_rng(0).uniform(-1, 1, plan.nx).astype(np.float32)
    x.tofile(os.path.join(work, "x.bin"))
    for src, text in (("drv.c", C_DRIVER), ("drv.F90", F_DRIVER)):
        with open(os.path.join(work, src), "w") as fh:
            fh.write(text)
    flags = args.cflags.split() + ["-fopenmp"] + ([] if embed else ["-DNET_FILE"])
    subprocess.run(["gcc", *flags, "-I", work, "drv.c", "net.c", "-o", "drv_c", "-lm"], cwd=work, check=True)
    subprocess.run(["gfortran", *flags, "-J", work, "net_model.F90", "drv.F90", "-o", "drv_f"], cwd=work, check=True)
    want, ort_wall, ort_cpu = onnxruntime_times(path, x, args.threads, args.repeats, args.calls, args.passive)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if args.passive:
        env["OMP_WAIT_POLICY"] = "passive"
    rows = [("onnxruntime", ort_wall, ort_cpu, 0.0)]
    for lang, label in (("c", "C <name>_infer_one"), ("f", "Fortran <name>_infer_one")):
        out = subprocess.run([f"./drv_{lang}", str(args.repeats), str(args.calls)], cwd=work, env=env,
                             capture_output=True, text=True, check=True).stdout.split()
        times = np.array(out, float).reshape(-1, 2)
        got = np.fromfile(os.path.join(work, f"y_{lang}.bin"), np.float32)
        result = compare(got, want, output="y")
        if not result.passed:
            raise SystemExit(f"{name}: {label} differs from onnxruntime: {result.message()}")
        rows.append((label, float(np.median(times[:, 0])), float(np.median(times[:, 1])),
                     float(np.abs(got - want).max())))
    print(f"{name}: {plan.nx} -> {plan.ny} values, {args.threads} threads of {os.cpu_count()} cores, "
          f"{args.cflags}{' --tune ' + ' '.join(args.tune) if args.tune else ''}, median of {args.repeats} x {args.calls} calls{', passive waits' if args.passive else ''}; "
          f"load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"| path | wall us | CPU us | wall x onnxruntime | CPU x onnxruntime | max abs diff |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label, wall, cpu, err in rows:
        print(f"| {label} | {wall * 1e6:.1f} | {cpu * 1e6:.1f} | {wall / ort_wall:.2f} | {cpu / ort_cpu:.2f} | "
              f"{err:.1e} |")
    print(flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", nargs="+", default=["unet", "convnet", "dwsep"], choices=["unet", "convnet", "convnet16", "dwsep", "fno"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--cflags", default="-O3 -march=native")
    ap.add_argument("--tune", nargs="*", default=[], metavar="KEY=VALUE")
    ap.add_argument("--passive", action="store_true",
                    help="threads wait without spinning: OMP_WAIT_POLICY=passive for rosenna, "
                         "session.intra_op.allow_spinning=0 for onnxruntime (for a machine with more threads than "
                         "free cores: a spinning thread then holds the core its partner needs)")
    args = ap.parse_args(argv)
    for name in args.model:
        measure(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
