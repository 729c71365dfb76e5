"""Fuzz the generated .rwt readers: C under -fsanitize=address,undefined, Fortran under -fcheck=all.

Each reader is built once, into a probe that takes a good file and a list of cases: per case it
loads the good file (status 0), then the case, and prints the status and the sum of the outputs
(zero after any failed init). One probe run reads every case. A case fails the fuzz if a
corrupted file is accepted (status 0), the two languages disagree on its status, a sanitizer
reports, or the weights are not zero after the failure.

tests/test_weights_file.py runs a bounded part of it (under a minute); the full fuzz is

    .venv/bin/python tests/fuzz_rwt.py [--random N] [--seed S]

(its numbers are in docs/weights-format.md).
"""

import argparse
import os
import platform
import random
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from rosenna import abi  # noqa: E402
from rosenna.generate import Options, generate  # noqa: E402

C_PROBE = r"""#include <stdio.h>
#include <string.h>
#include "probe.h"
/* probe_c GOOD LIST: for each path in the file LIST (one a line), init GOOD, then the path. */
int main(int argc, char **argv)
{
    static char path[8192];
    probe_rk x[PROBE_NX], y[PROBE_NY];
    FILE *list;
    int j;
    double sum;
    if (argc != 3 || (list = fopen(argv[2], "r")) == NULL)
        return 2;
    for (j = 0; j < PROBE_NX; ++j)
        x[j] = (probe_rk)(0.5 - 0.25 * j);
    probe_infer(x, y); /* before any init: zero weights */
    for (sum = 0, j = 0; j < PROBE_NY; ++j)
        sum += y[j];
    printf("before %g\n", sum);
    while (fgets(path, sizeof path, list) != NULL) {
        int good, status;
        path[strcspn(path, "\n")] = '\0';
        good = probe_init(argv[1]);
        status = probe_init(path);
        probe_infer(x, y);
        for (sum = 0, j = 0; j < PROBE_NY; ++j)
            sum += y[j];
        printf("%d %d %g\n", good, status, sum);
    }
    fclose(list);
    return 0;
}
"""

F_PROBE = """program probe_f
  use probe_model
  implicit none
  integer :: j, good, status, list, ios
  character(len=8192) :: path, good_path, list_path
  real(probe_rk) :: x(probe_nx), y(probe_ny)
  do j = 1, probe_nx
    x(j) = 0.5_probe_rk - 0.25_probe_rk * (j - 1)
  end do
  call probe_infer(x, y)
  print '(a, 1x, g0)', 'before', sum(y)
  call get_command_argument(1, good_path)
  call get_command_argument(2, list_path)
  open (newunit=list, file=trim(list_path), status='old', action='read')
  do
    read (list, '(a)', iostat=ios) path
    if (ios /= 0) exit
    call probe_init(trim(good_path), good)
    call probe_init(trim(path), status)
    call probe_infer(x, y)
    print '(i0, 1x, i0, 1x, g0)', good, status, sum(y)
  end do
  close (list)
end program probe_f
"""


def build(model_path, work, precision=None):
    """Generate ``model_path`` file-loaded as ``probe`` in ``work`` and build both probes.
    Returns (plan, good bytes, C probe path, Fortran probe path)."""
    plan, _ = generate(model_path, work, Options(name="probe", embed=False, precision=precision))
    with open(os.path.join(work, "probe_c.c"), "w") as handle:
        handle.write(C_PROBE.replace("probe_rk", plan.ctype))
    with open(os.path.join(work, "probe_f.f90"), "w") as handle:
        handle.write(F_PROBE)
    c_exe, f_exe = os.path.join(work, "probe_c"), os.path.join(work, "probe_f")
    subprocess.run(["gcc", "-std=c99", "-g", "-O1", "-fopenmp", "-fsanitize=address,undefined",
                    "-fno-sanitize-recover=all", "-I", work, os.path.join(work, "probe_c.c"),
                    os.path.join(work, "probe.c"), "-o", c_exe, "-lm"], check=True)
    subprocess.run(["gfortran", "-g", "-fopenmp", "-fcheck=all", "-finit-real=nan", "-finit-integer=-7",
                    "-J", work, os.path.join(work, "probe_model.F90"), os.path.join(work, "probe_f.f90"),
                    "-o", f_exe], check=True)
    with open(os.path.join(work, "probe.rwt"), "rb") as handle:
        good = handle.read()
    return plan, good, c_exe, f_exe


def _reseal(body):
    """``body`` (everything before the checksum) with a correct checksum appended."""
    return body + struct.pack("=I", abi.crc32c(body))


def structured_cases(good, plan):
    """(label, bytes or a path marker, expected status): every status a reader can return, the
    odd files of issue 12, and structural damage with a valid checksum (so the structure check,
    not the checksum, must catch it)."""
    body = good[:-4]
    first = plan.weights[0].ident.encode()
    name_at = 56 + 4
    after_name = name_at + len(first)

    def patch(offset, data, seal=True):
        new = body[:offset] + data + body[offset + len(data):]
        return _reseal(new) if seal else new + good[-4:]

    def rename(name):
        return _reseal(body[:56] + struct.pack("=I", len(name)) + name + body[after_name:])

    v1 = body[:12] + struct.pack("=I", 1) + body[16:]  # a version-1 file: no checksum
    cases = [("good", good, 0), ("missing", "@missing", 1), ("directory", "@directory", 1),
             ("a FIFO (never opened: it would block)", "@fifo", 9), ("a device", "@device", 9),
             ("the good path with a trailing blank", "@good ", 0),
             ("magic", patch(0, b"XSNNAWT\0"), 2), ("endian", patch(8, struct.pack(">I", abi.RWT_ENDIAN)), 5),
             ("version 99", patch(12, struct.pack("=I", 99)), 3), ("version 1 file", v1, 3),
             ("dtype", patch(16, struct.pack("=I", 3 - abi.RWT_DTYPES[plan.precision])), 4),
             ("hash", patch(20, b"0" * 32), 6), ("renamed", patch(name_at, b"z" + first[1:]), 7),
             ("name NUL junk", rename(first + b"\0junk"), 7), ("name trailing blank", rename(first + b" "), 7),
             ("name prefix", rename(first[:-1]), 7), ("empty name", rename(b""), 7),
             ("long name", patch(56, struct.pack("=I", 1000)), 8),
             ("huge rank", patch(after_name, struct.pack("=I", 2**31 + 5)), 8),
             ("bad dims", patch(after_name + 4, struct.pack("=I", 3)), 9),
             ("huge dims", patch(after_name + 4, struct.pack("=I", 2**32 - 1)), 9),
             ("count", patch(52, struct.pack("=I", 9)), 9), ("count zero", patch(52, struct.pack("=I", 0)), 9),
             ("trailing byte", good + b"\0", 9), ("trailing tensor", good + good[56:80], 9),
             ("twice the file", good + good, 9),
             ("payload bit", patch(len(body) - 1, bytes([body[-1] ^ 1]), seal=False), 12),
             ("checksum bit", body + bytes([good[-4] ^ 0x80]) + good[-3:], 12),
             ("empty", b"", 9), ("foreign text", b"hello, world\n" * 10, 2),
             ("foreign onnx", b"\x08\x08\x12\x05tests" + bytes(100), 2)]
    for cut in range(len(good)):
        cases.append((f"truncated at {cut}", good[:cut], 9))
    return cases


def bit_flips(good, stride=1):
    """Every ``stride``-th bit of the file flipped: each must be refused (the status is whatever
    the first failing check says; both languages must agree)."""
    return [(f"bit {bit}", good[:bit // 8] + bytes([good[bit // 8] ^ (1 << bit % 8)]) + good[bit // 8 + 1:], None)
            for bit in range(0, len(good) * 8, stride)]


def random_damage(good, count, seed):
    """Random corruptions: overwritten spans, inserted and deleted bytes, random garbage files."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        kind = rng.randrange(4)
        at = rng.randrange(len(good))
        span = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        if kind == 0:
            data = good[:at] + span + good[at + len(span):]
        elif kind == 1:
            data = good[:at] + span + good[at:]
        elif kind == 2:
            data = good[:at] + good[at + rng.randint(1, 16):]
        else:
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 2 * len(good))))
        if data != good:
            out.append((f"random {i} kind {kind}", data, None))
    return out


def run(exe, good_path, paths):
    list_path = os.path.join(os.path.dirname(good_path), "cases.txt")
    with open(list_path, "w", encoding="utf-8") as handle:
        handle.write("".join(p + "\n" for p in paths))
    proc = subprocess.run([exe, good_path, list_path], capture_output=True, text=True)
    problems = []
    if proc.returncode != 0 or "runtime error" in proc.stderr or "Sanitizer" in proc.stderr:
        problems.append(f"{os.path.basename(exe)} failed: {proc.stderr[-2000:]}")
    lines = proc.stdout.split("\n")
    before = float(lines[0].split()[1]) if lines and lines[0].startswith("before") else None
    rows = [line.split() for line in lines[1:] if line.strip()]
    return before, rows, problems


def zeroed(good, plan):
    """``good`` with every weight zero (and a correct checksum): what a model computes with zero
    weights, the reference for "zero before init and after a failed init"."""
    data, at = bytearray(good[:-4]), 56
    itemsize = 8 if plan.precision == "double" else 4
    for _ in plan.weights:
        length = struct.unpack_from("=I", data, at)[0]
        at += 4 + length
        rank = struct.unpack_from("=I", data, at)[0]
        dims = struct.unpack_from(f"={rank}I", data, at + 4)
        at += 4 + 4 * rank
        size = itemsize * int(__import__("numpy").prod(dims, dtype="int64"))
        data[at:at + size] = bytes(size)
        at += size
    return _reseal(bytes(data))


def fuzz(work, cases, plan, good, c_exe, f_exe, chunk=5000):
    """Run every case through both probes, ``chunk`` files at a time (so the full fuzz never holds
    more than that on disk); returns a list of problems (empty: all refused alike)."""
    zero = zeroed(good, plan)
    problems, outputs = _fuzz_chunk(work, [("zero weights", zero, 0)], good, c_exe, f_exe, None)
    if problems:
        return problems
    for start in range(0, len(cases), chunk):
        problems += _fuzz_chunk(work, cases[start:start + chunk], good, c_exe, f_exe, outputs)[0]
    return problems


def _fuzz_chunk(work, cases, good, c_exe, f_exe, zero_outputs):
    """One probe run per language over ``cases``: (problems, {lang: outputs of the last case}).
    ``zero_outputs``: per language, the outputs with zero weights (None: not known yet)."""
    good_path = os.path.join(work, "good.rwt")
    with open(good_path, "wb") as handle:
        handle.write(good)
    os.makedirs(os.path.join(work, "a directory.rwt"), exist_ok=True)
    paths = []
    for i, (_, data, _) in enumerate(cases):
        if data == "@missing":
            paths.append(os.path.join(work, "no such file.rwt"))
        elif data == "@directory":
            paths.append(os.path.join(work, "a directory.rwt"))
        elif data == "@fifo":
            if not os.path.exists(os.path.join(work, "a fifo.rwt")):
                os.mkfifo(os.path.join(work, "a fifo.rwt"))
            paths.append(os.path.join(work, "a fifo.rwt"))
        elif data == "@device":
            paths.append(os.devnull)
        elif data == "@good ":
            paths.append(good_path + " ")
        else:
            path = os.path.join(work, f"case {i:05d} \u00e9.rwt")
            with open(path, "wb") as handle:
                handle.write(data)
            paths.append(path)
    results = {}
    problems = []
    for lang, exe in (("c", c_exe), ("fortran", f_exe)):
        before, rows, errs = run(exe, good_path, paths)
        problems += errs
        if zero_outputs is not None and before != zero_outputs[lang]:
            problems.append(f"{lang}: outputs before any init are {before}, not {zero_outputs[lang]} (zero weights)")
        if len(rows) != len(cases):
            problems.append(f"{lang}: {len(rows)} results for {len(cases)} cases")
            continue
        results[lang] = rows
    for path in paths:
        if os.path.isfile(path):
            os.unlink(path)
    if problems:
        return problems, None
    last = {lang: float(rows[-1][2]) for lang, rows in results.items()}
    zero = zero_outputs or last
    for (label, data, want), c_row, f_row in zip(cases, results["c"], results["fortran"]):
        for lang, row in (("c", c_row), ("fortran", f_row)):
            good_status, status, total = int(row[0]), int(row[1]), float(row[2])
            if good_status != 0:
                problems.append(f"{label}: {lang} refused the good file ({good_status})")
            if want != 0 and status == 0:
                problems.append(f"{label}: {lang} accepted a corrupted file")
            if want is not None and status != want:
                problems.append(f"{label}: {lang} gave {status}, expected {want}")
            if status != 0 and total != zero[lang]:
                problems.append(f"{label}: {lang} outputs {total} after a failed init, not {zero[lang]} (zero weights)")
        if int(c_row[1]) != int(f_row[1]):
            problems.append(f"{label}: C gives {c_row[1]}, Fortran {f_row[1]}")
    return problems, last


def main(argv=None):
    import models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=20000, help="random corruptions per model")
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args(argv)
    total, failures = 0, []
    start = time.time()
    for name, precision in (("gemm_small", "single"), ("two_in_two_out", "double"), ("gemm_big", "single")):
        with tempfile.TemporaryDirectory() as work:
            plan, good, c_exe, f_exe = build(models.write(name, __import__("pathlib").Path(work)), work, precision)
            cases = structured_cases(good, plan) + bit_flips(good) + random_damage(good, args.random, args.seed)
            problems = fuzz(work, cases, plan, good, c_exe, f_exe)
            total += len(cases)
            failures += [f"{name}: {p}" for p in problems]
            print(f"{name} ({precision}, {len(good)} bytes): {len(cases)} files, {len(problems)} problems", flush=True)
    print(f"{total} files through each reader in {time.time() - start:.0f} s on {platform.node()} "
          f"({platform.machine()}, {os.cpu_count()} cores); {len(failures)} problems")
    for problem in failures[:50]:
        print("  " + problem)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
