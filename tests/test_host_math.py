"""The host exp and tanh of rosenna_rt.h (rosenna/data/rosenna_host_math.h), which the batch path,
the per-point routine and its SIMD variants all call: their accuracy against the exact functions,
NaN in gives NaN out, and a loop over them vectorises."""
import os
import shutil
import subprocess

import pytest

HEADER = os.path.join(os.path.dirname(__file__), "..", "rosenna", "data", "rosenna_host_math.h")

PROGRAM = r"""
#include <math.h>
#include <stdio.h>
#include "rosenna_host_math.h"

static double ulps(double got, double want, float unit_of)
{
    return fabs(got - want) / (nextafterf(fabsf(unit_of), INFINITY) - fabsf(unit_of));
}

void apply(int n, const float *restrict x, float *restrict y)
{
#pragma omp simd
    for (int i = 0; i < n; ++i)
        y[i] = rosenna_tanhf(x[i]) + rosenna_expf(x[i]);
}

int main(void)
{
    double exp_worst = 0, tanh_worst = 0;
    for (long i = 0; i < 2400000; ++i) {  /* a grid over [-20, 20], then both signs of 1e-30 .. 1 */
        float x = i < 2000000 ? -20.0f + 40.0f * (float)i / 2000000.0f
                              : (i % 2 ? -1.0f : 1.0f) * powf(10.0f, -30.0f + 30.0f * (float)(i - 2000000) / 400000.0f);
        double e = exp((double)x), t = tanh((double)x);
        double de = ulps(rosenna_expf(x), e, (float)e), dt = x == 0 ? 0 : ulps(rosenna_tanhf(x), t, (float)t);
        exp_worst = de > exp_worst ? de : exp_worst;
        tanh_worst = dt > tanh_worst ? dt : tanh_worst;
    }
    double dworst = 0;
    for (double x = -30.0; x < 30.0; x += 0.000731) {
        double t = tanh(x), d = fabs(rosenna_tanh(x) - t) / fabs(t);
        dworst = d > dworst ? d : dworst;
    }
    printf("exp %.3f tanh %.3f tanh_double_rel %.3g\n", exp_worst, tanh_worst, dworst);
    printf("nan %d %d %d %d\n", isnan(rosenna_expf(NAN)), isnan(rosenna_tanhf(-NAN)), isnan(rosenna_exp(NAN)),
           isnan(rosenna_tanh(-NAN)));
    float x[3] = {NAN, 0.5f, -NAN}, y[3];
    apply(3, x, y);
    printf("loop %d %d %d\n", isnan(y[0]), isnan(y[1]), isnan(y[2]));
    return 0;
}
"""


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_host_exp_and_tanh(tmp_path):
    shutil.copy(HEADER, tmp_path / "rosenna_host_math.h")
    (tmp_path / "t.c").write_text(PROGRAM)
    build = subprocess.run(["gcc", "-O3", "-march=native", "-ffp-contract=off", "-fopenmp-simd", "-fopt-info-vec",
                            "-I", str(tmp_path), str(tmp_path / "t.c"), "-o", str(tmp_path / "t"), "-lm"],
                           capture_output=True, text=True, check=True)
    loop = [i for i, line in enumerate(PROGRAM.split("\n"), 1) if "y[i] =" in line][0]  # the omp simd loop
    assert f"t.c:{loop}:" in build.stderr and "loop vectorized" in build.stderr, build.stderr
    out = subprocess.run([str(tmp_path / "t")], capture_output=True, text=True, check=True).stdout.split("\n")
    exp_ulp, tanh_ulp, tanh_rel = (float(v) for v in out[0].split()[1::2])
    assert exp_ulp <= 1.05 and tanh_ulp <= 2.6, out[0]  # the header's stated bounds
    assert tanh_rel < 1e-14, out[0]
    assert out[1] == "nan 1 1 1 1" and out[2] == "loop 1 0 1", out[1:3]
