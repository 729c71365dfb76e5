"""The generated folder as an fpm package: a consumer fpm project depends on it by path (with
fpm's OpenMP metapackage), `fpm run` builds the model's Fortran module and C file with the
project's compilers, and the program's outputs through the Fortran module and through the C
library (the module's bind(C) interface) match onnxruntime. fpm comes from the package index
(`pip install fpm`, in the Makefile's test-deps).
"""

import os
import re
import shutil
import sys

import numpy as np
import pytest

from build_common import NAME, clean_env, folder, numbers, reference, run
from test_build_pkgconfig_hip import MAIN_F as C_THROUGH_FORTRAN

N = NAME
FPM = shutil.which("fpm") or shutil.which("fpm", path=os.path.dirname(sys.executable))

MAIN_F = C_THROUGH_FORTRAN.replace(
    "  ! the C archive's batch entry, through the module's interface",
    f"""  ! the Fortran module's own weights and batch routine ...
  call {N}_init(trim(path), status)
  if (status /= {N}_status_ok) error stop 5
  call {N}_infer_batch(2, x, y, status)
  if (status /= {N}_status_ok) error stop 6
  do i = 1, 2
    print '(es16.9)', y(:, i)
  end do
  ! ... and the C library's, through the module's interface""")

MANIFEST = """name = "solver"
[dependencies]
{dep} = {{ path = "{path}" }}
openmp = "*"
"""


@pytest.mark.skipif(FPM is None or not shutil.which("gfortran"), reason="needs fpm (pip install fpm) and gfortran")
def test_fpm_project_depends_on_the_generated_folder(tmp_path_factory, tmp_path):
    gen = folder(tmp_path_factory)
    text = (gen / "fpm.toml").read_text()
    assert 'name = "rosenna_models"' in text and 'source-dir = "."' in text
    app = tmp_path / "solver"
    (app / "app").mkdir(parents=True)
    (app / "fpm.toml").write_text(MANIFEST.format(dep="rosenna_models", path=os.path.relpath(gen, app)))  # fpm takes relative paths
    (app / "app" / "main.f90").write_text(MAIN_F)
    env = clean_env()
    out = run([FPM, "run", "--verbose", "--", str(gen / f"{N}.rwt")], cwd=app, env=env).stdout
    assert f"{N}_model.F90" in out and f"{N}.c" in out  # fpm compiled both from the folder
    want = reference(gen.parent / "model.onnx").reshape(-1)
    got = numbers("\n".join(line for line in out.splitlines() if re.fullmatch(r"\s*-?\d\.\d+E[+-]\d+", line)))
    assert got.shape == (2 * want.size,), out[-2000:]
    np.testing.assert_allclose(got[:want.size], want, rtol=1e-5, atol=1e-6, err_msg="Fortran module")
    np.testing.assert_allclose(got[want.size:], want, rtol=1e-5, atol=1e-6, err_msg="C library")
