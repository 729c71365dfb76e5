"""The per-point routine inside the user's own offload loops (host fallback: no device here):
OpenMP target and OpenACC, C and Fortran, against a plain loop; and C against Fortran."""

import subprocess

import numpy as np
import pytest

from rosenna.generate import Options, generate

N = 997

C_PROG = r"""#include <stdio.h>
#include <string.h>
#include "mdl.h"
#define N %(n)d
static float x[N][MDL_NX], plain[N][MDL_NY], loop[N][MDL_NY];
int main(int argc, char **argv)
{
    for (int i = 0; i < N; ++i)
        for (int k = 0; k < MDL_NX; ++k)
            x[i][k] = (float)((i * 37 + k * 11) %% 200) / 100.0f - 1.0f;
    for (int i = 0; i < N; ++i)
        mdl_infer(x[i], plain[i]);
#if defined(_OPENACC)
#pragma acc parallel loop gang vector copyin(x) copyout(loop)
#else
#pragma omp target teams distribute parallel for map(to: x) map(from: loop)
#endif
    for (int i = 0; i < N; ++i)
        mdl_infer(x[i], loop[i]);
    FILE *f = fopen(argv[1], "wb");
    fwrite(plain, sizeof plain, 1, f);
    fclose(f);
    (void)argc;
    return memcmp(plain, loop, sizeof plain) != 0;
}
"""

F_PROG = """program prog
  use mdl_model
  implicit none
  integer, parameter :: n = %(n)d
  real(mdl_rk) :: x(mdl_nx, n), plain(mdl_ny, n), loop(mdl_ny, n)
  integer :: i, k, unit
  character(len=4096) :: path
  do i = 1, n
    do k = 1, mdl_nx
      x(k, i) = real(mod((i - 1) * 37 + (k - 1) * 11, 200), mdl_rk) / 100 - 1
    end do
  end do
  do i = 1, n
    call mdl_infer(x(:, i), plain(:, i))
  end do
#ifdef _OPENACC
  !$acc parallel loop gang vector copyin(x) copyout(loop)
#else
  !$omp target teams distribute parallel do map(to: x) map(from: loop)
#endif
  do i = 1, n
    call mdl_infer(x(:, i), loop(:, i))
  end do
  call get_command_argument(1, path)
  open (newunit=unit, file=trim(path), access='stream', form='unformatted', status='replace')
  write (unit) plain
  close (unit)
  if (any(plain /= loop)) error stop 1
end program prog
"""


@pytest.fixture(scope="module", params=[True, False], ids=["embedded", "file-loaded"])
def generated(request, tmp_path_factory):
    import models

    work = tmp_path_factory.mktemp("offload")
    path = models.write("gemm_big", work)
    plan, _ = generate(path, str(work), Options(name="mdl", embed=request.param))
    return work, plan


@pytest.mark.parametrize("model_flag", ["-fopenmp", "-fopenacc"])
def test_per_point_in_offload_loops_matches_plain_loop_and_languages_agree(generated, model_flag):
    work, plan = generated
    tag = model_flag.strip("-")
    init_c = "" if plan.embed else 'mdl_init("mdl.rwt");'
    init_f = "" if plan.embed else "  block\n    integer :: s\n    call mdl_init('mdl.rwt', s)\n  end block\n"
    c_src = (C_PROG % {"n": N}).replace("    for (int i = 0; i < N; ++i)\n        for (int k", f"    {init_c}\n    for (int i = 0; i < N; ++i)\n        for (int k", 1)
    f_src = (F_PROG % {"n": N}).replace("  do i = 1, n\n    do k", init_f + "  do i = 1, n\n    do k", 1)
    (work / f"c_{tag}.c").write_text(c_src)
    (work / f"f_{tag}.F90").write_text(f_src)
    # -Wno-unknown-pragmas: an OpenACC-only build ignores the generated code's omp pragmas.
    flags = [model_flag, "-O2", "-Wno-unknown-pragmas"]
    mod_dir = work / f"mod_{tag}"
    mod_dir.mkdir(exist_ok=True)
    subprocess.run(["gcc", *flags, "-I", str(work), str(work / f"c_{tag}.c"), str(work / "mdl.c"), "-o",
                    str(work / f"c_{tag}"), "-lm"], check=True)
    subprocess.run(["gfortran", *flags, "-J", str(mod_dir), str(work / "mdl_model.F90"), str(work / f"f_{tag}.F90"),
                    "-o", str(work / f"f_{tag}")], check=True)
    for lang in ("c", "f"):
        proc = subprocess.run([str(work / f"{lang}_{tag}"), str(work / f"y_{lang}_{tag}.bin")], cwd=work,
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"{lang} {model_flag}: offload loop differs from the plain loop\n{proc.stderr}"
    y_c = np.fromfile(work / f"y_c_{tag}.bin", np.float32).reshape(N, plan.ny)
    y_f = np.fromfile(work / f"y_f_{tag}.bin", np.float32).reshape(N, plan.ny)
    assert np.abs(y_c).max() > 0.01  # a model that computed nothing would pass the comparisons
    np.testing.assert_allclose(y_f, y_c, rtol=1e-6, atol=1e-7)


_UPDATE_CALL = {"-fopenacc": r"GOACC_update \(-1, (\d+),", "-fopenmp": r"GOMP_target_update_ext \(-1, (\d+),"}


@pytest.fixture(scope="module")
def file_loaded(tmp_path_factory):
    import models

    work = tmp_path_factory.mktemp("updates")
    plan, _ = generate(models.write("gemm_big", work), str(work), Options(name="mdl", embed=False))
    return work, plan


@pytest.mark.parametrize("model_flag", ["-fopenmp", "-fopenacc"])
def test_init_updates_every_weight_on_the_device(file_loaded, model_flag):
    """What GCC lowers <name>_init's device updates to: one map entry per weight. GCC 12 lowers
    `acc update device(W)` of a file-scope `acc declare` array to an update of nothing, which left
    the device with zero weights on the H200 while every host test passed; this reads the lowered
    call instead of running on a device."""
    import re

    work, plan = file_loaded  # embedded weights are initialised in the device image: no update
    counts = {}
    for lang, compiler, src in (("c", ["gcc"], "mdl.c"), ("fortran", ["gfortran", "-J", str(work)], "mdl_model.F90")):
        dump = work / f"{lang}{model_flag}.optimized"
        subprocess.run([*compiler, model_flag, "-O2", "-Wno-unknown-pragmas", "-c", str(work / src), "-o",
                        str(work / f"{lang}{model_flag}.o"), f"-fdump-tree-optimized={dump}"], check=True)
        counts[lang] = [int(m) for m in re.findall(_UPDATE_CALL[model_flag], dump.read_text())]
    expected = len(plan.weights)
    # C updates every weight in one call; Fortran one call per weight (a continued directive broke
    # builds with -fopenmp -fopenacc together): every weight mapped once either way.
    assert counts == {"c": [expected], "fortran": [1] * expected}, f"device updates map {counts}, want {expected} each"
