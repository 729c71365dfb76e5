"""Generated code compiles clean under strict warnings, C99 and Fortran 2008."""

import subprocess

import pytest

from rosenna.generate import Options, generate

MODELS = [("gemm_small", "single", True), ("gemm_big", "double", False), ("two_in_two_out", "single", False),
          ("evil_names", "double", True), ("matmul_const", "single", True), ("dynamic_reshape", "double", False)]

C_STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]
F_STRICT = ["-std=f2008", "-Wall", "-Werror"]


@pytest.mark.parametrize("name,precision,embed", MODELS)
def test_strict_warnings(model, tmp_path, name, precision, embed):
    plan, _ = generate(model(name), str(tmp_path), Options(name="mdl", precision=precision, embed=embed))
    commands = [
        ["gcc", *C_STRICT, "-fopenmp", "-c", "mdl.c", "-o", "m_omp.o"],
        # An OpenACC-only build ignores the omp pragmas; that is the one warning switched off.
        ["gcc", *C_STRICT, "-Wno-unknown-pragmas", "-fopenacc", "-c", "mdl.c", "-o", "m_acc.o"],
        ["gfortran", *F_STRICT, "-fopenmp", "-c", "mdl_model.F90", "-o", "mf_omp.o"],
        ["gfortran", *F_STRICT, "-fopenacc", "-c", "mdl_model.F90", "-o", "mf_acc.o"],
    ]
    for cmd in commands:
        proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
        assert proc.returncode == 0, " ".join(cmd) + "\n" + proc.stderr[-4000:]
