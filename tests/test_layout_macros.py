"""The header's <NAME>_X_<INPUT>_OFFSET / _SIZE macros and the Fortran module's constants: a solver
slices x and y by name instead of hard-coding the layout `rosenna info` prints. Names are sanitized;
names that collide after sanitizing (or under Fortran's case folding) get index-prefixed keys.
Also: <name>_infer is pure, so a Fortran 2018 `do concurrent` loop may call it."""

import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from rosenna.generate import Options, build_plan, generate
from rosenna.plan import io_keys

pytestmark = pytest.mark.skipif(not shutil.which("gcc") or not shutil.which("gfortran"),
                                reason="needs gcc and gfortran")


def colliding_model(path):
    """Inputs 'a.b' [1,3] and 'a_b' [1,2] (both sanitize to a_b); outputs 'Y' [1,3] = relu(a.b) and
    'y' [1,2] = tanh(a_b) (the same name once Fortran folds case)."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["a.b"], ["Y"]), helper.make_node("Tanh", ["a_b"], ["y"])], "g",
        [helper.make_tensor_value_info("a.b", f, [1, 3]), helper.make_tensor_value_info("a_b", f, [1, 2])],
        [helper.make_tensor_value_info("Y", f, [1, 3]), helper.make_tensor_value_info("y", f, [1, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return str(path)


MAIN_C = """#include <stdio.h>
#include "cm.h"
int main(void) {
    float x[CM_NX], y[CM_NY];
    for (int i = 0; i < CM_X_IN0_A_B_SIZE; i++) x[CM_X_IN0_A_B_OFFSET + i] = -1.0f - i;
    for (int i = 0; i < CM_X_IN1_A_B_SIZE; i++) x[CM_X_IN1_A_B_OFFSET + i] = 0.5f * i;
    cm_infer(x, y);
    for (int i = 0; i < CM_Y_OUT0_Y_SIZE; i++) printf("%.9g\\n", y[CM_Y_OUT0_Y_OFFSET + i]);
    for (int i = 0; i < CM_Y_OUT1_Y_SIZE; i++) printf("%.9g\\n", y[CM_Y_OUT1_Y_OFFSET + i]);
    return 0;
}
"""

# cm_infer in a do concurrent loop: allowed only because it is pure.
MAIN_F = """program main
  use cm_model
  implicit none
  integer, parameter :: n = 4
  real(cm_rk) :: x(cm_nx, n), y(cm_ny, n)
  integer :: i, k
  do i = 1, n
    x(cm_x_in0_a_b_offset + 1:cm_x_in0_a_b_offset + cm_x_in0_a_b_size, i) = &
      [(-1.0_cm_rk - k, k = 0, cm_x_in0_a_b_size - 1)]
    x(cm_x_in1_a_b_offset + 1:cm_x_in1_a_b_offset + cm_x_in1_a_b_size, i) = &
      [(0.5_cm_rk * k, k = 0, cm_x_in1_a_b_size - 1)]
  end do
  do concurrent (i = 1:n)
    call cm_infer(x(:, i), y(:, i))
  end do
  print '(es16.9)', y(cm_y_out0_y_offset + 1:cm_y_out0_y_offset + cm_y_out0_y_size, n)
  print '(es16.9)', y(cm_y_out1_y_offset + 1:cm_y_out1_y_offset + cm_y_out1_y_size, n)
end program main
"""


def test_colliding_names_get_index_prefixed_keys_and_programs_use_them(tmp_path):
    path = colliding_model(tmp_path / "collide.onnx")
    _, plan = build_plan(path, Options(name="cm"))
    assert [k for _, k in io_keys(plan, "x", 40)] == ["in0_a_b", "in1_a_b"]
    assert [k for _, k in io_keys(plan, "y", 40)] == ["out0_y", "out1_y"]
    out = tmp_path / "g"
    generate(path, str(out), Options(name="cm", lang="both"))
    header = (out / "cm.h").read_text()
    assert "#define CM_X_IN1_A_B_OFFSET 3\n#define CM_X_IN1_A_B_SIZE 2" in header
    (tmp_path / "main.c").write_text(MAIN_C)
    (tmp_path / "main.f90").write_text(MAIN_F)
    subprocess.run(["gcc", "-std=c99", "-fopenmp", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", str(out), "main.c",
                    str(out / "cm.c"), "-lm", "-o", "c.out"], cwd=tmp_path, check=True)
    subprocess.run(["gfortran", "-std=f2018", "-fopenmp", "-Wall", "-Werror", "-J", str(tmp_path), str(out / "cm_model.F90"),
                    "main.f90", "-o", "f.out"], cwd=tmp_path, check=True)
    want = np.concatenate([np.maximum(-1.0 - np.arange(3), 0), np.tanh(0.5 * np.arange(2))])
    for exe in ("c.out", "f.out"):
        got = subprocess.run([str(tmp_path / exe)], capture_output=True, text=True, check=True).stdout.split()
        np.testing.assert_allclose([float(v) for v in got], want, rtol=1e-6, atol=1e-7)


def test_plain_names_keep_their_own_keys_within_fortrans_limit(model, tmp_path):
    _, plan = build_plan(model("two_in_two_out"), Options(name="t"))
    assert [k for _, k in io_keys(plan, "x", 40)] == ["a", "b"]
    long_name = "n" * 41  # the longest model name generate accepts
    generate(model("two_in_two_out"), str(tmp_path), Options(name=long_name, lang="fortran"))
    module = (tmp_path / f"{long_name}_model.F90").read_text()
    names = [line.split("::")[1].split("=")[0].strip() for line in module.splitlines()
             if "_offset =" in line or "_size =" in line]
    assert len(names) == 8 and all(len(n) <= 63 for n in names)
    assert f"{long_name}_x_a_offset" in names


def test_file_loaded_infer_is_pure_too(model, tmp_path):
    generate(model("two_in_two_out"), str(tmp_path), Options(name="fl", lang="fortran", embed=False))
    (tmp_path / "dc.f90").write_text(
        "subroutine step(n, x, y)\n  use fl_model\n  integer, intent(in) :: n\n"
        "  real(fl_rk), intent(in) :: x(fl_nx, n)\n  real(fl_rk), intent(out) :: y(fl_ny, n)\n  integer :: i\n"
        "  do concurrent (i = 1:n)\n    call fl_infer(x(:, i), y(:, i))\n  end do\nend subroutine step\n")
    subprocess.run(["gfortran", "-std=f2018", "-fopenmp", "-Wall", "-Werror", "-c", "fl_model.F90", "dc.f90"],
                   cwd=tmp_path, check=True)
