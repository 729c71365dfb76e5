"""The SIMD variants of <name>_infer (the tuning's ``point_simd_bytes``; a second of 16 lanes on an
AVX-512 target): the header declares them (``omp declare simd`` with x and y linear by one
point), <name>.c defines them under the x86-64 vector ABI's names as the batch path's block code
over the lanes, and a caller's ``omp parallel for simd`` loop over points calls them: GCC's
vectorisation report says the loop is vectorised and the object calls the variant. The loop's
results (lanes and scalar remainder alike) equal <name>_infer_batch's and the scalar routine's bit
for bit, in single and double precision. The speed is a benchmark (bench/host_point_simd.py,
docs/benchmarks-host.md)."""

import os
import platform
import re
import subprocess

import numpy as np
import pytest

from rosenna import generate as gen, toolchain, zoo
from rosenna.emit import c as c_emit
from rosenna.strategy import Tuning

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86-64 vector ABI")

CALLER = r"""#include <stdio.h>
#include <stdlib.h>
#include "net.h"

/* the solver's loop over cells */
void cells(int n, const {t} *x, {t} *y)
{{
#pragma omp parallel for simd{simdlen}
    for (int i = 0; i < n; ++i)
        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);
}}

int main(void)
{{
    enum {{ N = 1003 }};  /* not a multiple of the lanes: the remainder takes the scalar routine */
    static {t} x[N * NET_NX], y[3][N * NET_NY];
    for (long i = 0; i < (long)N * NET_NX; ++i)
        x[i] = ({t})((i * 2654435761u) % 4001) / 1000 - 2;
    cells(N, x, y[0]);
    if (net_infer_batch(N, x, y[1], NULL))
        return 2;
    for (int i = 0; i < N; ++i)
        net_infer(x + (long)i * NET_NX, y[2] + (long)i * NET_NY);
    fwrite(y, sizeof({t}), 3 * N * NET_NY, stdout);
    return 0;
}}
"""


def _avx512():
    try:
        return " avx512f" in open("/proc/cpuinfo").read()
    except OSError:
        return False


#: (precision, the profile's CPU target, the caller's -march, the lanes its loop asks for)
CASES = {"single": (np.float32, "x86_64_v3", "x86-64-v3", 8), "double": (np.float64, "x86_64_v3", "x86-64-v3", 8),
         # AVX-512: the loop at the batch path's width calls the 16-lane variant; GCC 12 vectorises its
         # remainder with the 8-lane one and passes it the wrong point unless epilogues are not vectorised
         "wide": (np.float32, "icelake", "icelake-server", 16)}


@pytest.mark.host
@pytest.mark.parametrize("case", list(CASES))
def test_solver_loop_vectorises_across_points(tmp_path, case):
    dtype, target, march, lanes = CASES[case]
    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"), dtype)
    profile = toolchain.resolve(None, target=target, gpu_arch="sm_80")
    plan, _ = gen.generate(path, str(tmp_path), gen.Options.from_profile(profile, name="net", embed=True))
    header = (tmp_path / "net.h").read_text()
    for width in (8, 16):  # 8: the caller's int index in 32-byte vectors, both precisions; 16 with AVX-512
        declared = f"#pragma omp declare simd simdlen({width}) linear(x:{plan.nx}) linear(y:{plan.ny}) notinbranch"
        assert (declared in header) == (width == 8 or target == "icelake"), declared
    (tmp_path / "caller.c").write_text(CALLER.format(t=plan.ctype, simdlen=f" simdlen({lanes})" if lanes > 8 else ""))
    flags = ["-O3", f"-march={march}", "-fopenmp", "-ffp-contract=off"]
    caller_flags = flags + (["--param", "vect-epilogues-nomask=0"] if lanes > 8 else [])
    report = subprocess.run(["gcc", *caller_flags, "-fopt-info-vec-optimized", "-c", "caller.c"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stderr
    loop_line = CALLER.split("\n").index("        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);") + 1
    assert re.search(rf"caller\.c:{loop_line}:\d+: optimized: loop vectorized", report), report
    calls = subprocess.run(["objdump", "-dr", "caller.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    variant = c_emit.simd_name(plan, "e" if lanes > 8 else "d", lanes)  # AVX-512 / AVX2 (x86-64-v3)
    assert variant in calls, f"the loop calls no {variant}"
    subprocess.run(["gcc", *flags, "-c", "net.c"], cwd=tmp_path, check=True)
    assert variant in subprocess.run(["nm", "net.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    if target == "icelake" and not _avx512():
        pytest.skip("built and checked; running it needs an AVX-512 CPU")
    subprocess.run(["gcc", "-fopenmp", "caller.o", "net.o", "-o", "caller", "-lm"], cwd=tmp_path, check=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one chunk: the remainder after whole vectors is the last points
    out = subprocess.run([str(tmp_path / "caller")], cwd=tmp_path, env=env, capture_output=True, check=True).stdout
    simd, batch, scalar = np.frombuffer(out, dtype).reshape(3, -1)
    for name, other in (("_infer_batch", batch), ("scalar _infer", scalar)):
        worst = int(np.argmax(np.abs(simd - other)))
        assert np.array_equal(simd, other), f"SIMD loop y[{worst}] = {simd[worst]!r}, {name} {other[worst]!r}"


def test_no_variant_when_off_or_whole_field(tmp_path):
    path = zoo.save("gemm_small", str(tmp_path / "m.onnx"))
    gen.generate(path, str(tmp_path), gen.Options(name="net", embed=True, tuning=Tuning().replace(point_simd_bytes=0)))
    assert "declare simd" not in (tmp_path / "net.h").read_text()
    assert "_ZGV" not in (tmp_path / "net.c").read_text() and "NET_SOURCE" not in (tmp_path / "net.c").read_text()
