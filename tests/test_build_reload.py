"""Weights that change during a run: C and Fortran programs swap the weights every few steps with
<name>_reload (a file) and <name>_set_weights (a .rwt image in memory), and at every step print
the batch path's outputs and the per-point routine's inside an OpenMP target / OpenACC compute
region (host fallback here: no offload device), built once with -fopenmp and once with -fopenacc.
Each step must equal onnxruntime's outputs of the model whose weights are in force: after a swap
that succeeded the new model's, after one that failed (a corrupted file, another model's file, a
truncated image, a missing file) the old one's, with the status saying why.

The new weights come from `rosenna weights` (retrained models of the same graph); the command
refuses another graph with one line and exit status 2, writing nothing.
"""

import shutil

import numpy as np
import pytest

from build_common import NAME, NY, POINTS, copy_of, folder, mlp, reference, run
from rosenna import abi
from rosenna.cli import main

N = NAME
EVERY = 3  # steps between swaps
STATUS = {key: code for code, key, _ in abi.STATUS_CODES}

MAIN_C = f"""#include <stdio.h>
#include <stdlib.h>
#include "{N}.h"

/* <name>_set_weights from a file's bytes read into memory */
static int from_memory(const char *path)
{{
    FILE *file = fopen(path, "rb");
    long size;
    void *image;
    int status;

    if (file == NULL || fseek(file, 0L, SEEK_END) != 0 || (size = ftell(file)) < 0)
        return -1;
    rewind(file);
    image = malloc((size_t)size + 1);
    if (image == NULL || fread(image, 1, (size_t)size, file) != (size_t)size)
        return -1;
    fclose(file);
    status = {N}_set_weights(image, (size_t)size);
    free(image);
    return status;
}}

/* argv[1]: steps between swaps; argv[2]: the weights at start; argv[3...]: the swaps in order,
   r:PATH (reload) or m:PATH (set_weights from memory). */
int main(int argc, char **argv)
{{
    float x[2 * {N.upper()}_NX] = {{{", ".join(f"{v}f" for v in POINTS.reshape(-1))}}};
    float y[2 * {N.upper()}_NY], z[2 * {N.upper()}_NY];
    int every = atoi(argv[1]), status = {N}_init(argv[2]), next = 3, step, i;

    printf("init %d\\n", status);
    for (step = 0; step < (argc - 2) * every; ++step) {{
        if (step > 0 && step % every == 0) {{
            const char *op = argv[next++];
            status = op[0] == 'm' ? from_memory(op + 2) : {N}_reload(op + 2);
            printf("swap %d %d\\n", step, status);
        }}
        x[0] = 0.5f + 0.125f * (float)step;
        status = {N}_infer_batch(2, x, y, 0);
#pragma omp target teams distribute parallel for map(to: x) map(from: z)
#pragma acc parallel loop copyin(x) copyout(z)
        for (i = 0; i < 2; ++i)
            {N}_infer(x + i * {N.upper()}_NX, z + i * {N.upper()}_NY);
        printf("step %d %d", step, status);
        for (i = 0; i < 2 * {N.upper()}_NY; ++i)
            printf(" %.9g", y[i]);
        for (i = 0; i < 2 * {N.upper()}_NY; ++i)
            printf(" %.9g", z[i]);
        printf("\\n");
    }}
    return 0;
}}
"""

MAIN_F = f"""program main
  use, intrinsic :: iso_fortran_env, only: int8
  use {N}_model
  implicit none
  real({N}_rk) :: x({N}_nx, 2), y({N}_ny, 2), z({N}_ny, 2)
  character(len=4096) :: arg
  integer :: every, status, next, step, i

  call get_command_argument(1, arg)
  read (arg, *) every
  call get_command_argument(2, arg)
  call {N}_init(trim(arg), status)
  print '(a, i0)', 'init ', status
  x = reshape([{", ".join(f"{v}_{N}_rk" for v in POINTS.reshape(-1))}], [{N}_nx, 2])
  next = 3
  do step = 0, (command_argument_count() - 1) * every - 1
    if (step > 0 .and. mod(step, every) == 0) then
      call get_command_argument(next, arg)
      next = next + 1
      if (arg(1:1) == 'm') then
        call from_memory(trim(arg(3:)), status)
      else
        call {N}_reload(trim(arg(3:)), status)
      end if
      print '(a, i0, 1x, i0)', 'swap ', step, status
    end if
    x(1, 1) = 0.5_{N}_rk + 0.125_{N}_rk * real(step, {N}_rk)
    call {N}_infer_batch(2, x, y, status)
    !$omp target teams distribute parallel do map(to: x) map(from: z)
    !$acc parallel loop copyin(x) copyout(z)
    do i = 1, 2
      call {N}_infer(x(:, i), z(:, i))
    end do
    write (*, '(a, i0, 1x, i0, *(1x, es17.9e3))') 'step ', step, status, y, z
  end do

contains

  !> <name>_set_weights from a file's bytes read into memory
  subroutine from_memory(path, status)
    character(len=*), intent(in) :: path
    integer, intent(out) :: status
    integer(int8), allocatable :: image(:)
    integer :: unit, size_bytes, ios

    open (newunit=unit, file=path, access='stream', form='unformatted', status='old', action='read', iostat=ios)
    if (ios /= 0) then
      status = -1
      return
    end if
    inquire (unit=unit, size=size_bytes)
    allocate (image(size_bytes))
    read (unit) image
    close (unit)
    call {N}_set_weights(image, status)
  end subroutine from_memory
end program main
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The generated folder (a copy), the weights files of the swap sequence, and the models whose
    weights each of them holds (None: the swap must fail)."""
    base = folder(tmp_path_factory)
    root = tmp_path_factory.mktemp("reload")
    gen = copy_of(base, root / "gen")
    models = {"w1": base.parent / "model.onnx"}
    for seed in (2, 3):
        models[f"w{seed}"] = root / f"retrained{seed}.onnx"
        mlp(seed, path=models[f"w{seed}"])
        assert main(["weights", str(models[f"w{seed}"]), "-o", str(root / f"w{seed}.rwt"), "--for",
                     str(gen / f"{N}.rwt")]) == 0
    shutil.copy(gen / f"{N}.rwt", root / "w1.rwt")
    good = (root / "w2.rwt").read_bytes()
    corrupt = bytearray(good)
    corrupt[len(corrupt) // 2] ^= 0x40  # one bit of one weight: only the checksum can tell
    (root / "corrupt.rwt").write_bytes(bytes(corrupt))
    (root / "truncated.rwt").write_bytes(good[:-9])
    (root / "empty.rwt").write_bytes(b"")  # no bytes by its size: not opened, READ, as _init says
    other = root / "other"  # another model (5 -> 4 hidden units): another plan hash
    mlp(4, hidden=4, path=root / "other.onnx")
    assert main(["generate", str(root / "other.onnx"), "--name", N,
                 "--out", str(other), "--no-embed", "--lang", "c"]) == 0
    # (op, file, the status the swap returns, the model in force after it)
    swaps = [("r", "w2", "OK", "w2"), ("m", "w3", "OK", "w3"), ("r", "corrupt", "CHECKSUM", "w3"),
             ("r", str(other / f"{N}.rwt"), "HASH", "w3"), ("m", "truncated", None, "w3"),
             ("r", "missing", "OPEN", "w3"), ("r", "empty", "READ", "w3"), ("m", "w1", "OK", "w1")]
    args = [str(EVERY), str(root / "w1.rwt")]
    for op, fname, _, _ in swaps:
        path = fname if fname.startswith("/") else str(root / f"{fname}.rwt")
        args.append(f"{op}:{path}")
    return gen, root, args, swaps, models


def check_run(output, swaps, models, label):
    """Each step's outputs (batch, then per point in the offload region) against onnxruntime's for
    the model in force; each swap's status."""
    lines = output.split("\n")
    assert lines[0].split() == ["init", "0"], (label, lines[0])
    in_force, swap_index = "w1", 0
    steps = 0
    for line in lines[1:]:
        words = line.split()
        if not words:
            continue
        if words[0] == "swap":
            op, fname, status, after = swaps[swap_index]
            got = int(words[2])
            if status is None:
                assert got not in (0, -1), (label, line)
            else:
                assert got == STATUS[status], f"{label}: swap {swap_index} ({fname}) returned {got}, want {status}"
            in_force, swap_index = after, swap_index + 1
            continue
        step, status = int(words[1]), int(words[2])
        assert status == 0, (label, line)
        values = np.array([float(v) for v in words[3:]])
        x = POINTS.copy()
        x[0, 0] = np.float32(0.5) + np.float32(0.125) * np.float32(step)
        want = reference(models[in_force], x).reshape(-1)
        for part, got in (("batch", values[:2 * NY]), ("offload region", values[2 * NY:])):
            np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6,
                                       err_msg=f"{label} {part} step {step}: weights {in_force} in force")
        steps += 1
    assert swap_index == len(swaps) and steps == (len(swaps) + 1) * EVERY, (label, swap_index, steps)


@pytest.mark.parametrize("flag", ["-fopenmp", "-fopenacc"])
def test_c_program_swaps_weights_between_steps(setup, flag):
    gen, root, args, swaps, models = setup
    (gen / "main.c").write_text(MAIN_C)
    exe = f"c{flag}"
    run(["gcc", "-O2", flag, "-I.", "main.c", f"{N}.c", "-lm", "-o", exe], cwd=gen)
    check_run(run([str(gen / exe), *args], cwd=root).stdout, swaps, models, f"C {flag}")


@pytest.mark.skipif(not shutil.which("gfortran"), reason="needs gfortran")
@pytest.mark.parametrize("flag", ["-fopenmp", "-fopenacc"])
def test_fortran_program_swaps_weights_between_steps(setup, flag):
    gen, root, args, swaps, models = setup
    (gen / "main.f90").write_text(MAIN_F)
    exe = f"f{flag}"
    modules = gen / f"mod{flag}"  # one module folder per build: the two may run at once
    modules.mkdir()
    run(["gfortran", "-O2", flag, "-J", str(modules), f"{N}_model.F90", "main.f90", "-o", exe], cwd=gen)
    check_run(run([str(gen / exe), *args], cwd=root).stdout, swaps, models, f"Fortran {flag}")


def test_weights_refuses_another_graph_and_writes_nothing(setup, capsys):
    gen, root, _, _, models = setup
    out = root / "refused.rwt"
    capsys.readouterr()
    assert main(["weights", str(root / "other.onnx"), "-o", str(out), "--for", str(gen / f"{N}.h")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "its graph differs from the generated code's" in err, err
    assert not out.exists() and not list(root.glob(".rosenna-weights-*"))
    assert main(["weights", str(root / "retrained2.onnx"), "-o", str(out), "--for", str(root / "other.onnx")]) == 2
    assert "not a .rwt weights file nor a file rosenna generated" in capsys.readouterr().err
    # the same model again gives the same bytes as generate wrote
    assert main(["weights", str(models["w1"]), "-o", str(out), "--for", str(gen / f"{N}_model.F90")]) == 0
    assert out.read_bytes() == (gen / f"{N}.rwt").read_bytes()
