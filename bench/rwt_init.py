"""What reading a .rwt file costs: <name>_init of a file-loaded Gemm (N x N float32 weights, default
2048: a 16 MB file), in C and in Fortran, including its CRC-32C; and how long generate takes.

    .venv/bin/python bench/rwt_init.py [--n 2048] [--repeat 3]

The numbers in docs/weights-format.md come from this command.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rosenna.generate import Options, generate  # noqa: E402

C_MAIN = r"""#include <stdio.h>
#include <time.h>
#include "big.h"
int main(int argc, char **argv)
{
    struct timespec a, b;
    int status;
    (void)argc;
    clock_gettime(CLOCK_MONOTONIC, &a);
    status = big_init(argv[1]);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%d %.4f\n", status, (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec));
    return status;
}
"""

F_MAIN = """program timing
  use big_model
  implicit none
  integer :: status
  integer(8) :: c0, c1, rate
  character(len=4096) :: path
  call get_command_argument(1, path)
  call system_clock(c0, rate)
  call big_init(trim(path), status)
  call system_clock(c1)
  print '(i0, 1x, f0.4)', status, real(c1 - c0, 8) / real(rate, 8)
  if (status /= 0) error stop 1
end program timing
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    n = args.n
    with tempfile.TemporaryDirectory() as work:
        w = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"])], "big",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
                                  [numpy_helper.from_array(w, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        path = os.path.join(work, "big.onnx")
        onnx.save(model, path)
        start = time.perf_counter()
        generate(path, work, Options(name="big", embed=False))
        print(f"generate: {time.perf_counter() - start:.2f} s")
        rwt = os.path.join(work, "big.rwt")
        print(f"big.rwt: {os.path.getsize(rwt):,} bytes")
        with open(os.path.join(work, "t.c"), "w") as handle:
            handle.write(C_MAIN)
        with open(os.path.join(work, "t.f90"), "w") as handle:
            handle.write(F_MAIN)
        subprocess.run(["gcc", "-O2", "-fopenmp", "-I", work, os.path.join(work, "t.c"), os.path.join(work, "big.c"),
                        "-o", os.path.join(work, "tc"), "-lm"], check=True)
        subprocess.run(["gfortran", "-O2", "-fopenmp", "-J", work, os.path.join(work, "big_model.F90"),
                        os.path.join(work, "t.f90"), "-o", os.path.join(work, "tf")], check=True)
        for lang, exe in (("C", "tc"), ("Fortran", "tf")):
            times = []
            for _ in range(args.repeat):
                out = subprocess.run([os.path.join(work, exe), rwt], capture_output=True, text=True, check=True)
                times.append(float(out.stdout.split()[1]))
            print(f"{lang} init: best {min(times):.3f} s of {args.repeat} (warm page cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
