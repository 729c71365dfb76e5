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


#: (precision, the profile's CPU target, the caller's -march, the lanes its loop asks for, --tune)
CASES = {"single": (np.float32, "x86_64_v3", "x86-64-v3", 8, ()), "double": (np.float64, "x86_64_v3", "x86-64-v3", 8, ()),
         # AVX-512: the loop at the batch path's width calls the 16-lane variant; GCC 12 vectorises its
         # remainder with the 8-lane one and passes it the wrong point unless epilogues are not vectorised
         "wide": (np.float32, "icelake", "icelake-server", 16, ()),
         # explicit fma(): the paths still agree bit for bit, and the variant's code fuses; off: it never does
         "fma": (np.float32, "x86_64_v3", "x86-64-v3", 8, ("host_fma=true",)),
         "off": (np.float32, "x86_64_v3", "x86-64-v3", 8, ("host_fma=off",)),
         # AVX-512, the default 8-lane loop: the MLP's variant in 512-bit vectors over its outputs
         # (emit/simd_mlp.py; gemm_big's 20-, 30- and 40-wide layers leave padded columns), fused and not
         "outputs": (np.float32, "icelake", "icelake-server", 8, ()),
         "outputs64": (np.float64, "icelake", "icelake-server", 8, ()),
         "outputs-off": (np.float32, "icelake", "icelake-server", 8, ("host_fma=off",))}


@pytest.mark.host
@pytest.mark.parametrize("case", list(CASES))
def test_solver_loop_vectorises_across_points(tmp_path, case):
    dtype, target, march, lanes, tune = CASES[case]
    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"), dtype)
    profile = toolchain.resolve(None, target=target, gpu_arch="sm_80")
    plan, _ = gen.generate(path, str(tmp_path), gen.Options.from_profile(profile, tune, name="net", embed=True))
    header = (tmp_path / "net.h").read_text()
    assert ("net_hpacked" in (tmp_path / "net.c").read_text()) == (target == "icelake"), "the 512-bit MLP form"
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
    variant = c_emit.simd_name(plan, "e" if target == "icelake" else "d", lanes)  # AVX-512 / AVX2 (x86-64-v3)
    assert variant in calls, f"the loop calls no {variant}"
    subprocess.run(["gcc", *flags, "-c", "net.c"], cwd=tmp_path, check=True)
    assert variant in subprocess.run(["nm", "net.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    code = subprocess.run(["objdump", "-d", "net.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    # host_fma's default "auto" fuses on these FMA targets (x86-64-v3, icelake-server); "off" never
    assert (re.search(r"\bvfmadd\w*p[sd]\s+%[yz]mm", code) is not None) == (tune != ("host_fma=off",)), \
        f"FMA instructions with {tune or 'the default host_fma=auto'}"
    if target == "icelake" and not _avx512():
        pytest.skip("built and checked; running it needs an AVX-512 CPU")
    subprocess.run(["gcc", "-fopenmp", "caller.o", "net.o", "-o", "caller", "-lm"], cwd=tmp_path, check=True)
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one chunk: the remainder after whole vectors is the last points
    out = subprocess.run([str(tmp_path / "caller")], cwd=tmp_path, env=env, capture_output=True, check=True).stdout
    simd, batch, scalar = np.frombuffer(out, dtype).reshape(3, -1)
    for name, other in (("_infer_batch", batch), ("scalar _infer", scalar)):
        worst = int(np.argmax(np.abs(simd - other)))
        assert np.array_equal(simd, other), f"SIMD loop y[{worst}] = {simd[worst]!r}, {name} {other[worst]!r}"


POLICY_CALLER = CALLER.replace("static {t} x[N * NET_NX], y[3][N * NET_NY];", "static {t} x[N * NET_NX], y[4][N * NET_NY];").replace(
    "    fwrite(y, sizeof({t}), 3 * N * NET_NY, stdout);",
    """    for (int i = 0; i < N; ++i)  /* the whole-field host branch, one point a sample */
        if (net_infer_one(x + (long)i * NET_NX, y[3] + (long)i * NET_NY, NULL))
            return 3;
    fwrite(y, sizeof({t}), 4 * N * NET_NY, stdout);""")

#: (host_fma, the compiler's flags besides -O3 -fopenmp -ffp-contract=off, whether the target has FMA)
POLICY_BUILDS = {"auto, FMA build": ("auto", ["-march=x86-64-v3"], True),
                 "auto, AVX2 without FMA": ("auto", ["-march=x86-64-v3", "-mno-fma"], False),
                 "auto, x86-64": ("auto", ["-march=x86-64"], False),  # GCC 12 calls no variant here
                 "auto, -DROSENNA_FMA=0": ("auto", ["-march=x86-64-v3", "-DROSENNA_FMA=0"], False),
                 "on": ("on", ["-march=x86-64-v3"], True),
                 "off": ("off", ["-march=x86-64-v3"], False)}


@pytest.mark.host
def test_fma_policy_keeps_every_c_path_equal(tmp_path):
    """host_fma auto | on | off: in every build the SIMD loop, the batch path, the scalar routine and
    the whole-field host branch (<name>_infer_one) give the same bits; "auto" gives "on"'s bits
    where the compiler says FMA is fast (x86-64-v3) and "off"'s (the bit-reproducible ones) on a
    target without FMA (x86-64, x86-64-v3 -mno-fma) or with -DROSENNA_FMA=0; fused and unfused
    results differ."""
    from concurrent.futures import ThreadPoolExecutor

    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"))
    profile = toolchain.resolve(None, target="x86_64_v3", gpu_arch="sm_80")
    plans = {}
    for setting in ("auto", "on", "off"):
        out = tmp_path / setting
        plans[setting], _ = gen.generate(path, str(out), gen.Options.from_profile(
            profile, [f"host_fma={setting}"], name="net", embed=True, infer_one=True))
        (out / "caller.c").write_text(POLICY_CALLER.format(t="float", simdlen=""))
    source = (tmp_path / "auto" / "net.c").read_text()
    assert "ROSENNA_MADDF(" in source and "fmaf(" not in source and "fmaf(" in (tmp_path / "on" / "net.c").read_text()
    assert "ROSENNA_MADDF(" in source.split("int net_infer_one(")[1], "the whole-field host branch fuses too"

    def build(name):
        setting, march, _ = POLICY_BUILDS[name]
        work = tmp_path / setting
        exe = f"caller_{hash(name) & 0xffff}"
        flags = ["-O3", *march, "-fopenmp", "-ffp-contract=off"]
        for src in ("net.c", "caller.c"):
            subprocess.run(["gcc", *flags, "-c", src, "-o", f"{exe}_{src[:-2]}.o"], cwd=work, check=True)
        code = subprocess.run(["objdump", "-d", f"{exe}_net.o"], cwd=work, capture_output=True, text=True, check=True).stdout
        calls = subprocess.run(["objdump", "-dr", f"{exe}_caller.o"], cwd=work, capture_output=True, text=True,
                               check=True).stdout
        subprocess.run(["gcc", "-fopenmp", f"{exe}_caller.o", f"{exe}_net.o", "-o", exe, "-lm"], cwd=work, check=True)
        env = dict(os.environ, OMP_NUM_THREADS="1")
        out = subprocess.run([str(work / exe)], cwd=work, env=env, capture_output=True, check=True).stdout
        return code, calls, np.frombuffer(out, np.float32).reshape(4, -1)

    with ThreadPoolExecutor(2) as pool:
        results = dict(zip(POLICY_BUILDS, pool.map(build, POLICY_BUILDS)))
    for name, (code, calls, (simd, batch, scalar, one)) in results.items():
        fused = POLICY_BUILDS[name][2]
        assert (re.search(r"\bvfmadd\w*ps\s+%[xyz]mm", code) is not None) == fused, f"{name}: FMA instructions {fused}"
        if "-march=x86-64-v3" in POLICY_BUILDS[name][1]:
            assert c_emit.simd_name(plans["auto"], "d", 8) in calls, f"{name}: the loop calls no AVX2 variant"
        for label, other in (("_infer_batch", batch), ("scalar _infer", scalar), ("_infer_one", one)):
            worst = int(np.argmax(np.abs(simd - other)))
            assert np.array_equal(simd, other), f"{name}: SIMD loop y[{worst}] = {simd[worst]!r}, {label} {other[worst]!r}"
    same = lambda a, b: results[a][2].tobytes() == results[b][2].tobytes()  # noqa: E731
    assert same("auto, FMA build", "on"), "auto fuses where FMA is fast"
    assert all(same(name, "off") for name in ("auto, AVX2 without FMA", "auto, x86-64", "auto, -DROSENNA_FMA=0")), \
        "auto does not fuse elsewhere"
    assert not same("on", "off"), "fused and unfused dot products gave the same bits: the test shows nothing"


@pytest.mark.host
@pytest.mark.skipif(not _avx512(), reason="runs AVX-512 code")
def test_file_loaded_mlp_fills_the_512_bit_copy(tmp_path):
    """A file-loaded MLP on an AVX-512 target: <name>_init fills the 8-lane variant's input-major
    copy of the weights (rosenna/emit/simd_mlp.py), and the SIMD loop's results equal the batch
    path's, the scalar routine's and the embedded build's bit for bit."""
    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"))
    profile = toolchain.resolve(None, target="icelake", gpu_arch="sm_80")
    flags = ["-O3", "-march=icelake-server", "-fopenmp", "-ffp-contract=off"]
    got = {}
    for embed in (True, False):
        out = tmp_path / ("embedded" if embed else "file")
        gen.generate(path, str(out), gen.Options.from_profile(profile, name="net", embed=embed))
        source = (out / "net.c").read_text()
        assert "net_hpacked" in source and ("the AVX-512 SIMD variant's copy" in source) == (not embed)
        caller = CALLER.format(t="float", simdlen="")
        if not embed:
            caller = caller.replace("    cells(N, x, y[0]);", '    if (net_init("net.rwt"))\n        return 4;\n    cells(N, x, y[0]);')
        (out / "caller.c").write_text(caller)
        subprocess.run(["gcc", *flags, "caller.c", "net.c", "-o", "caller", "-lm"], cwd=out, check=True)
        raw = subprocess.run([str(out / "caller")], cwd=out, env=dict(os.environ, OMP_NUM_THREADS="1"),
                             capture_output=True, check=True).stdout
        got[embed] = np.frombuffer(raw, np.float32).reshape(3, -1)
        simd, batch, scalar = got[embed]
        assert np.array_equal(simd, batch) and np.array_equal(simd, scalar), f"embed={embed}: the C paths differ"
    assert got[True].tobytes() == got[False].tobytes(), "the file-loaded build differs from the embedded one"


def test_one_layer_512_bit_variant_compiles_without_a_warning(tmp_path):
    """A one-layer MLP (Gemm 5 -> 3) on an AVX-512 target takes the 512-bit 8-lane variant, whose
    code has no hidden layer: it compiles under -Wall -Wextra -Werror (compile only: this CPU need
    not run AVX-512)."""
    from onnx import TensorProto, helper, numpy_helper
    import onnx

    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [numpy_helper.from_array(rng.standard_normal((3, 5)).astype(np.float32), "W"),
         numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")])
    path = str(tmp_path / "one.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    profile = toolchain.resolve(None, target="icelake", gpu_arch="sm_80")
    gen.generate(path, str(tmp_path / "g"), gen.Options.from_profile(profile, name="one"))
    source = (tmp_path / "g" / "one.c").read_text()
    assert "one_infer_lanes8" in source and "_mm512_" in source
    subprocess.run(["gcc", "-O2", "-march=icelake-server", "-fopenmp", "-ffp-contract=off", "-Wall", "-Wextra",
                    "-Werror", "-c", "one.c"], cwd=tmp_path / "g", check=True)


def test_no_variant_when_off_or_whole_field(tmp_path):
    path = zoo.save("gemm_small", str(tmp_path / "m.onnx"))
    gen.generate(path, str(tmp_path), gen.Options(name="net", embed=True, tuning=Tuning().replace(point_simd_bytes=0)))
    assert "declare simd" not in (tmp_path / "net.h").read_text()
    assert "_ZGV" not in (tmp_path / "net.c").read_text() and "NET_SOURCE" not in (tmp_path / "net.c").read_text()


FORTRAN_CALLER = """module cells_m
  use net_model
  implicit none
contains
  !> The solver's loop over cells, inside its parallel region (gfortran 12 vectorises an orphaned
  !> do simd over dummy arrays; a parallel do simd over shared ones it does not).
  subroutine cells(n, x, y)
    integer, intent(in) :: n
    real(net_rk), intent(in) :: x(net_nx, n)
    real(net_rk), intent(out) :: y(net_ny, n)
    integer :: i
    !$omp do simd
    do i = 1, n
      call net_infer_simd(x(:, i), y(:, i))
    end do
  end subroutine cells
end module cells_m

program main
  use, intrinsic :: iso_c_binding, only: c_loc, c_null_ptr
  use net_model
  use cells_m
  implicit none
  integer, parameter :: n = 1003
  real(net_rk), target :: x(net_nx, n), y(net_ny, n, 2)
  integer :: i, e, unit

  do i = 1, n
    do e = 1, net_nx
      x(e, i) = real(mod((int((i - 1) * net_nx + e - 1, 8) * 2654435761_8), 4001_8), net_rk) / 1000 - 2
    end do
  end do
  !$omp parallel
  call cells(n, x, y(:, :, 1))
  !$omp end parallel
  if (net_infer_batch_dev(n, c_loc(x), c_loc(y(1, 1, 2)), c_null_ptr) /= 0) error stop 2
  open (newunit=unit, file='y.bin', access='stream', form='unformatted', status='replace')
  write (unit) y
  close (unit)
end program main
"""


@pytest.mark.host
def test_fortran_simd_loop_calls_the_c_variants(tmp_path):
    """The module's <name>_infer_simd (the C library's <name>_infer with its declare simd): a
    Fortran do simd loop over points calls the C library's SIMD variant, and its results equal
    the C batch path's bit for bit."""
    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"))
    profile = toolchain.resolve(None, target="x86_64_v3", gpu_arch="sm_80")
    plan, _ = gen.generate(path, str(tmp_path), gen.Options.from_profile(profile, name="net", embed=True))
    module = (tmp_path / "net_model.F90").read_text()
    assert "!$omp declare simd simdlen(8) linear(ref(x)) linear(ref(y)) notinbranch" in module
    assert module.count("declare simd") == 1, "the module's own net_infer is not cloned"
    (tmp_path / "caller.f90").write_text(FORTRAN_CALLER)
    flags = ["-O3", "-march=x86-64-v3", "-fopenmp", "-ffp-contract=off"]
    subprocess.run(["gcc", *flags, "-c", "net.c"], cwd=tmp_path, check=True)
    subprocess.run(["gfortran", *flags, "-c", "net_model.F90"], cwd=tmp_path, check=True)
    report = subprocess.run(["gfortran", *flags, "-fopt-info-vec-optimized", "-c", "caller.f90"], cwd=tmp_path,
                            capture_output=True, text=True, check=True).stderr
    loop_line = FORTRAN_CALLER.split("\n").index("      call net_infer_simd(x(:, i), y(:, i))") + 1
    assert re.search(rf"caller\.f90:{loop_line}:\d+: optimized: loop vectorized", report), report
    calls = subprocess.run(["objdump", "-dr", "caller.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    variant = c_emit.simd_name(plan, "d", 8)
    assert variant in calls, f"the loop calls no {variant}"
    subprocess.run(["gfortran", "-fopenmp", "caller.o", "net_model.o", "net.o", "-o", "caller", "-lm"], cwd=tmp_path,
                   check=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    subprocess.run([str(tmp_path / "caller")], cwd=tmp_path, env=env, check=True)
    simd, batch = np.fromfile(tmp_path / "y.bin", np.float32).reshape(2, -1)
    worst = int(np.argmax(np.abs(simd - batch)))
    assert np.array_equal(simd, batch), f"Fortran SIMD loop y[{worst}] = {simd[worst]!r}, C batch {batch[worst]!r}"


#: The omp.h declarations the generated code uses, for a clang without libomp's headers (the
#: device pass is compiled, not linked).
OMP_STUB = """typedef enum omp_allocator_handle_t {
    omp_null_allocator = 0, omp_default_mem_alloc = 1, omp_large_cap_mem_alloc = 2, omp_const_mem_alloc = 3,
    omp_high_bw_mem_alloc = 4, omp_low_lat_mem_alloc = 5, omp_cgroup_mem_alloc = 6, omp_pteam_mem_alloc = 7,
    omp_thread_mem_alloc = 8, omp_allocator_handle_max = 0x7fffffff
} omp_allocator_handle_t;
int omp_get_num_devices(void);
int omp_get_default_device(void);
int omp_get_initial_device(void);
int omp_get_num_threads(void);
int omp_get_thread_num(void);
"""

OFFLOAD_CALLER = r"""#include "net.h"

void on_device(int n, const float *x, float *y)
{
#pragma omp target teams distribute parallel for map(to: x[0:n * NET_NX]) map(from: y[0:n * NET_NY])
    for (int i = 0; i < n; ++i)
        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);
}

void on_host(int n, const float *x, float *y)
{
#pragma omp parallel for simd
    for (int i = 0; i < n; ++i)
        net_infer(x + (long)i * NET_NX, y + (long)i * NET_NY);
}
"""


def _clang():
    import glob
    import shutil

    return next((c for c in [shutil.which(n) for n in ("clang-16", "clang-15", "clang")]
                 + sorted(glob.glob("/usr/lib/llvm-1[5-9]/bin/clang")) if c), None)


@pytest.mark.host
@pytest.mark.skipif(_clang() is None, reason="needs clang (OpenMP offload to nvptx)")
def test_offload_build_keeps_the_variants_on_the_host(tmp_path):
    """An OpenMP-offload build (clang, nvptx device pass compiled, not linked): the library and a
    caller with both a target loop and a host simd loop compile; the device pass sees no declare
    simd and references no variant; the host object defines them."""
    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"))
    profile = toolchain.resolve(None, target="x86_64_v3", gpu_arch="sm_80")
    plan, _ = gen.generate(path, str(tmp_path), gen.Options.from_profile(profile, name="net", embed=True))
    (tmp_path / "caller.c").write_text(OFFLOAD_CALLER)
    clang = _clang()
    resource = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
    include = []
    if not os.path.exists(os.path.join(resource, "include", "omp.h")):
        (tmp_path / "stub").mkdir()
        (tmp_path / "stub" / "omp.h").write_text(OMP_STUB)
        include = ["-I", "stub"]
    flags = [clang, "-O2", "-march=x86-64-v3", "-fopenmp", "-fopenmp-targets=nvptx64-nvidia-cuda", "-Xopenmp-target",
             "-march=sm_80", "-nogpulib", "-Wno-unknown-cuda-version", "-Wno-pass-failed", *include, "-save-temps", "-c"]
    for source in ("net.c", "caller.c"):
        built = subprocess.run([*flags, source], cwd=tmp_path, capture_output=True, text=True)
        assert built.returncode == 0, built.stderr[-3000:]
    for stem in ("net", "caller"):
        device = (tmp_path / f"{stem}-openmp-nvptx64-nvidia-cuda.i").read_text()
        assert "declare simd" not in device and "_ZGV" not in (tmp_path / f"{stem}-openmp-nvptx64-nvidia-cuda.s").read_text()
    assert "declare simd" in (tmp_path / "caller-host-x86_64-pc-linux-gnu.i").read_text()
    host = subprocess.run(["nm", "net.o"], cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert c_emit.simd_name(plan, "d", 8) in host
