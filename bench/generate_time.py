"""Time of `generate` and of compiling the embedded C and Fortran for a ~1M-parameter MLP.

    python bench/generate_time.py [--width 700]

16 -> W -> W -> W -> 8 with ReLU: 2*W*W + 24*W + 3*W + 8 parameters (~1.0M for W = 700), just under
the embed threshold, so the weights are compiled into the source.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import onnx

from rosenna import zoo
from rosenna.generate import Options, generate


def timed(fn):
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=700)
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="rosenna-gen-")
    w = args.width
    model = zoo.mlp("big", [16, w, w, w, 8], ["Relu", "Relu", "Relu", None])
    path = os.path.join(work, "big.onnx")
    onnx.save(model, path)
    t_gen, (plan, files) = timed(lambda: generate(path, work, Options(name="big", embed=True)))
    sizes = {os.path.basename(f): os.path.getsize(f) for f in files}
    t_cc, _ = timed(lambda: subprocess.run(["gcc", "-O2", "-fopenmp", "-c", os.path.join(work, "big.c"),
                                            "-o", os.path.join(work, "big.o")], check=True))
    t_fc, _ = timed(lambda: subprocess.run(["gfortran", "-O2", "-fopenmp", "-J", work, "-c",
                                            os.path.join(work, "big_model.F90"), "-o",
                                            os.path.join(work, "big_model.o")], check=True))
    print(f"parameters: {plan.parameters}")
    print(f"generate (both languages, embedded): {t_gen:.2f} s; big.c {sizes['big.c'] / 1e6:.1f} MB, "
          f"big_model.F90 {sizes['big_model.F90'] / 1e6:.1f} MB")
    print(f"gcc -O2 -fopenmp -c big.c: {t_cc:.1f} s")
    print(f"gfortran -O2 -fopenmp -c big_model.F90: {t_fc:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
