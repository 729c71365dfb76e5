"""bench/rosenna_bench.cuh, the H200 bench drivers' shared header: its tolerance is rosenna/compare.py's
rule (checked element by element against compare() with a C++ compiler), and every driver that
includes it compiles (nvcc, where found; nothing runs: no GPU here)."""

import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from rosenna.compare import compare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
sys.path[:0] = [BENCH] + [os.path.join(BENCH, "studies", d) for d in ("field18", "igemm18")]
import bench_header  # noqa: E402

#: Reads n, then n (got, want) pairs of REAL in binary from argv[1]; prints within() per pair as 0/1,
#: then outside()'s count, then the Timing of summary() over {4, 1, 3, 2}.
CHECK = r"""
#include <cstdio>
#include "rosenna_bench.cuh"
int main(int, char **argv) {
    FILE *f = fopen(argv[1], "rb");
    long n;
    if (!f || fread(&n, sizeof n, 1, f) != 1) return 2;
    std::vector<REAL> got(n), want(n);
    if (fread(got.data(), sizeof(REAL), n, f) != (size_t)n || fread(want.data(), sizeof(REAL), n, f) != (size_t)n) return 2;
    for (long i = 0; i < n; ++i) putchar('0' + rosenna_bench::within(got[i], want[i]));
    const rosenna_bench::Timing t = rosenna_bench::summary({4, 1, 3, 2});
    printf(" %ld %g %g %g\n", rosenna_bench::outside(got.data(), want.data(), n), t.median, t.min, t.max);
}
"""


def test_tolerance_block_is_compare_py():
    with open(bench_header.HEADER) as fh:
        assert fh.read() == bench_header.text(), "run `python3 bench/bench_header.py` (rosenna/compare.py changed)"
    assert "#define ROSENNA_BENCH_F32_RTOL 1e-05\n" in bench_header.block()


def _pairs(dtype):
    tol = 1e-5 if dtype == np.float32 else 1e-9
    one = [1.0 + 0.9 * tol, 1.0 + 1.2 * tol, -1.0 - 0.9 * tol, -1.0 - 1.2 * tol]
    got = one + [np.nan, np.nan, 1.0, np.inf, np.inf, -np.inf, np.inf, 0.0, 1e-13, 5e-7, 2e-6, -3.0]
    want = [1.0, 1.0, -1.0, -1.0] + [np.nan, 1.0, np.nan, np.inf, -np.inf, -np.inf, 1e30, 0.0, 0.0, 0.0, 0.0, -3.0]
    return np.array(got, dtype=dtype), np.array(want, dtype=dtype)


@pytest.mark.skipif(not shutil.which("g++"), reason="needs g++")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_within_is_verify_rule_element_by_element(tmp_path, dtype):
    got, want = _pairs(dtype)
    expected = "".join("1" if compare(got[i:i + 1], want[i:i + 1], np.dtype(dtype).name).passed else "0"
                       for i in range(len(got)))
    assert "0" in expected and "1" in expected
    data = tmp_path / "pairs.bin"
    data.write_bytes(np.array([len(got)], dtype=np.int64).tobytes() + got.tobytes() + want.tobytes())
    src = tmp_path / "check.cpp"
    src.write_text(CHECK)
    exe = tmp_path / "check"
    real = "float" if dtype == np.float32 else "double"
    subprocess.run(["g++", "-std=c++17", f"-DREAL={real}", "-I", BENCH, str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe), str(data)], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == expected
    assert int(out[1]) == expected.count("0")
    assert out[2:] == ["3", "1", "4"]  # the upper middle of an even count, as every driver reported it


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_every_driver_compiles_with_the_header(tmp_path):
    import field_variants
    import igemm_study

    decls = 'extern "C" int m_a_infer_batch(int n, const float *x, float *y, void *stream);'
    model = tmp_path / "model"
    model.mkdir()
    (model / "m.h").write_text(decls.replace("m_a_", "m_") + "\n#define M_NX 3\n#define M_NY 2\n"
                               "__device__ void m_infer(const float *x, float *y);\n"
                               "__device__ void m_infer_warp(const float *x, float *y);\n")
    (model / "v.h").write_text('extern "C" int v_infer_batch(int, const double *, double *, void *);\n')
    (model / "r.h").write_text('extern "C" int r_infer_batch(int, const double *, double *, void *);\n')
    jobs = []
    for name, module in (("variants", field_variants), ("igemm", igemm_study)):
        d = tmp_path / name
        d.mkdir()
        (d / "driver.cu").write_text(module.DRIVER % {"decls": decls, "table": '    {"m", "a", 1, 3, 2, m_a_infer_batch},'})
        bench_header.install(str(d))
        jobs.append([str(d / "driver.cu")])
    jobs += [["-DNAME=m", '-DHDR="m.h"', "-DFRONTIER_NX=3", "-DFRONTIER_NY=2", "-I", str(model),
              os.path.join(BENCH, "frontier.cu")],
             ["-rdc=true", "-DNAME=m", '-DHDR="m.h"', "-Dm_NX_M=M_NX", "-Dm_NY_M=M_NY", "-I", str(model),
              os.path.join(BENCH, "gen_bench.cu")],
             ["-DV=v", "-DR=r", '-DVH="v.h"', '-DRH="r.h"', "-DNX=4", "-DNY=2", "-I", str(model), "-I", BENCH,
              os.path.join(BENCH, "studies", "f64-dmma", "driver.cu")],
             ["-DUPLOAD", "-DNAME=m", '-DHDR="m.h"', '-DVARIANT="v"', "-I", str(model), "-I", BENCH,
              os.path.join(BENCH, "studies", "tc17", "driver.cu")]]

    def nvcc(job):
        obj = tmp_path / f"{len(job)}-{os.path.basename(job[-1])}.o"
        return subprocess.run(["nvcc", "-O0", "-gencode=arch=compute_90,code=compute_90", "-c", *job, "-o", str(obj)],
                              capture_output=True, text=True)

    with ThreadPoolExecutor(2) as pool:
        for job, done in zip(jobs, pool.map(nvcc, jobs)):
            assert done.returncode == 0, f"{job[-1]}: {done.stderr[-2000:]}"
