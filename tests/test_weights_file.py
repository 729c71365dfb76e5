"""The .rwt weights file: every status code 1-9 reachable from C and from Fortran, under
-fsanitize=address,undefined (C) and -fcheck=all (Fortran); never a crash or out-of-bounds read."""

import struct
import subprocess

import pytest

from rosenna import abi
from rosenna.generate import Options, generate

C_PROBE = r"""#include <stdio.h>
#include "probe.h"
int main(int argc, char **argv)
{
    float x[PROBE_NX] = {0.5f, -0.25f}, y[PROBE_NY];
    for (int i = 1; i < argc; ++i) {
        int status = probe_init(argv[i]);
        probe_infer(x, y);
        printf("%d %g\n", status, y[0] + y[1] + y[2]);
    }
    return 0;
}
"""

F_PROBE = """program probe_f
  use probe_model
  implicit none
  integer :: i, status
  character(len=4096) :: path
  real(probe_rk) :: x(probe_nx), y(probe_ny)
  x = [0.5_probe_rk, -0.25_probe_rk]
  do i = 1, command_argument_count()
    call get_command_argument(i, path)
    call probe_init(trim(path), status)
    call probe_infer(x, y)
    print '(i0, 1x, g0)', status, sum(y)
  end do
end program probe_f
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    """gemm_small, file-loaded, with a C probe (ASan+UBSan) and a Fortran probe (-fcheck=all)."""
    import models

    work = tmp_path_factory.mktemp("rwt")
    path = models.write("gemm_small", work)
    plan, _ = generate(path, str(work), Options(name="probe", embed=False))
    (work / "probe_c.c").write_text(C_PROBE)
    (work / "probe_f.f90").write_text(F_PROBE)
    subprocess.run(["gcc", "-std=c99", "-g", "-fopenmp", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                    "-I", str(work), str(work / "probe_c.c"), str(work / "probe.c"), "-o", str(work / "probe_c"), "-lm"],
                   check=True)
    subprocess.run(["gfortran", "-g", "-fopenmp", "-fcheck=all", "-J", str(work), str(work / "probe_model.F90"),
                    str(work / "probe_f.f90"), "-o", str(work / "probe_f")], check=True)
    return work, plan, (work / "probe.rwt").read_bytes()


def corrupt_cases(good, plan):
    """(label, bytes or None for a missing file, expected status)."""
    cases = [("good", good, 0), ("missing", None, 1)]
    def patch(offset, data):
        return good[:offset] + data + good[offset + len(data):]
    cases.append(("magic", patch(0, b"XSNNAWT\0"), 2))
    cases.append(("endian", patch(8, struct.pack(">I", abi.RWT_ENDIAN)), 5))
    cases.append(("version", patch(12, struct.pack("=I", 99)), 3))
    cases.append(("dtype", patch(16, struct.pack("=I", 2)), 4))
    cases.append(("hash", patch(20, b"0" * 32), 6))
    first_name = 56 + 4
    name = plan.weights[0].ident.encode()
    cases.append(("renamed", patch(first_name, b"z" + name[1:]), 7))
    cases.append(("long name", patch(56, struct.pack("=I", 1000)), 8))
    cases.append(("huge rank", patch(first_name + len(name), struct.pack("=I", 2**31 + 5)), 8))
    cases.append(("bad dims", patch(first_name + len(name) + 4, struct.pack("=I", 3)), 9))
    cases.append(("count", patch(52, struct.pack("=I", 9)), 9))
    cases.append(("trailing tensor", good + good[56:80], 0))
    for cut in range(len(good)):
        cases.append((f"truncated at {cut}", good[:cut], 9))
    return cases


def run_probe(exe, paths):
    proc = subprocess.run([str(exe)] + [str(p) for p in paths], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, proc.stderr[-3000:]
    return [line.split() for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("lang", ["c", "fortran"])
def test_every_status_code(probes, lang):
    work, plan, good = probes
    cases = corrupt_cases(good, plan)
    paths = []
    for i, (_, data, _) in enumerate(cases):
        p = work / f"{lang}_case{i}.rwt"
        if data is not None:
            p.write_bytes(data)
        paths.append(p)
    rows = run_probe(work / ("probe_c" if lang == "c" else "probe_f"), paths)
    assert len(rows) == len(cases)
    got = {label: int(row[0]) for (label, _, _), row in zip(cases, rows)}
    want = {label: code for label, _, code in cases}
    assert got == want
    assert {code for _, _, code in cases} >= set(range(10))
    for (label, _, code), row in zip(cases, rows):
        if code != 0:
            # a failed init leaves zero weights: gemm_small then gives relu(0) = 0 everywhere
            assert float(row[1]) == 0.0, label


def test_trailing_bytes_are_ignored_but_count_is_enforced(probes):
    """Documented: the reader stops after `count` tensors; a wrong count is inconsistent (9)."""
    work, plan, good = probes
    assert abi.read_rwt_header(good)["count"] == len(plan.weights)


def test_header_fields(probes):
    _, plan, good = probes
    head = abi.read_rwt_header(good)
    assert head["magic"] == abi.RWT_MAGIC and head["endian"] == abi.RWT_ENDIAN
    assert head["version"] == abi.RWT_VERSION and head["dtype"] == 1 and head["hash"] == plan.hash
