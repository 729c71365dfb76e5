"""Host threads that share the machine (the tuning's ``host_wait``): the whole-field and batch paths'
threads wait at rosenna_team_wait (rosenna_host_sync.h; the Fortran module's ``team_wait``), which
sleeps after a short poll, never at OpenMP's spinning barriers: every worksharing construct is
``nowait``, the batch blocks are handed out dynamically, and the results of 3 threads on this
machine's cores (more threads than cores, the sleeping path forced) equal one thread's bit for bit.
The time on a loaded machine is a benchmark (bench/host_share.py, docs/benchmarks-host.md)."""

import os
import re
import subprocess

import numpy as np
import pytest

import op_models
from rosenna import generate as gen, zoo
from rosenna.strategy import Tuning

C_MAIN = r"""#include <stdio.h>
#include "net.h"

int main(void)
{
    static float x[4 * NET_NX], y[4 * NET_NY];
    int status = 0;
    FILE *f = fopen("x.bin", "rb");
    if (!f || fread(x, sizeof(float), 4 * NET_NX, f) != 4 * NET_NX) return 3;
    fclose(f);
    for (int call = 0; call < 6; ++call)  /* many calls: a missing wait shows as a race */
        status |= net_infer_batch(4, x, y, NULL);
    f = fopen("y_c.bin", "wb");
    fwrite(y, sizeof(float), 4 * NET_NY, f);
    fclose(f);
    return status;
}
"""

F_MAIN = """program main
  use net_model
  implicit none
  real(net_rk) :: x(net_nx, 4), y(net_ny, 4)
  integer :: unit, status, call
  open (newunit=unit, file='x.bin', access='stream', form='unformatted', status='old')
  read (unit) x
  close (unit)
  do call = 1, 6
    call net_infer_batch(4, x, y, status)
    if (status /= 0) error stop 1
  end do
  open (newunit=unit, file='y_f.bin', access='stream', form='unformatted', status='replace')
  write (unit) y
  close (unit)
end program main
"""


def _generate(out, path, **tuning):
    return gen.generate(path, str(out), gen.Options(name="net", lang="both", embed=True, infer_one=True,
                                                    tuning=Tuning().replace(**tuning)))[0]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A 3-conv net over a 16x16 field through the whole-field path, waits forced to sleep at once."""
    out = tmp_path_factory.mktemp("threads")
    path = op_models.convnet(out / "convnet.onnx", height=16, width=16)
    plan = _generate(out, path, host_wait_spins=0)
    return plan, out


def _host(text):
    return text.split("No offload device")[1]


def test_whole_field_threads_wait_only_at_the_yielding_barrier(whole, tmp_path):
    plan, out = whole
    host = _host((out / "net.c").read_text()).split("return ROSENNA_STATUS_OK")[0]
    constructs = re.findall(r"#pragma omp (?:for|single)[^\n]*", host)
    assert constructs and all(line.endswith(" nowait") for line in constructs), constructs
    waits = host.count("rosenna_team_wait(&team, &team_passed, 0);") + 1  # and the master's before the join
    assert waits >= 2 and host.count("rosenna_team_done(&team, &team_passed, 0);") == 1
    assert host.rstrip().endswith("rosenna_team_end(&team);\n    rosenna_pace_record(&pace, team_size, rosenna_pace_clock() - started);")
    assert "#pragma omp parallel num_threads(team_size)" in host and "rosenna_pace_threads(&pace, 64, 4096)" in host
    fortran = _host((out / "net_model.F90").read_text()).split("end subroutine")[0]
    ends = re.findall(r"!\$omp end (?:do|do simd|single)\b[^\n]*", fortran)
    assert ends and all(line.endswith(" nowait") for line in ends), ends
    assert fortran.count("call team_wait(team, team_passed, 0, .false.)") == waits - 1
    assert fortran.count("call team_wait(team, team_passed, 0, .true.)") == 1
    assert "!$omp parallel num_threads(team_size)" in fortran and "team_size = pace_threads(64, 4096)" in fortran
    # the 'omp' form keeps OpenMP's barriers: one construct without nowait per barrier
    spin = _generate(tmp_path, str(out / "convnet.onnx"), host_wait="omp")
    host = _host((tmp_path / "net.c").read_text())
    assert "rosenna_team" not in host and "team_wait" not in (tmp_path / "net_model.F90").read_text()
    _generate(tmp_path / "fixed", str(out / "convnet.onnx"), host_pace=0)  # the team always full
    assert "rosenna_pace" not in _host((tmp_path / "fixed" / "net.c").read_text())
    assert len([c for c in re.findall(r"#pragma omp (?:for|single)[^\n]*", host) if not c.endswith("nowait")]) == waits - 1
    assert spin.tuned.host_wait == "omp"


def test_batch_blocks_are_handed_out_dynamically(tmp_path):
    path = zoo.save("gemm_big", str(tmp_path / "m.onnx"))
    _generate(tmp_path, path)
    c = (tmp_path / "net.c").read_text()
    assert "#pragma omp for schedule(dynamic) nowait" in c and f"rosenna_team_done(&team, &team_passed, {Tuning().host_wait_spins});" in c
    assert "schedule(static)" not in c.split("Host path of")[1]
    f = (tmp_path / "net_model.F90").read_text()
    assert "!$omp do schedule(dynamic)" in f and "!$omp end do nowait" in f and f"call team_wait(team, team_passed, {Tuning().host_wait_spins}, .true.)" in f


@pytest.mark.host
def test_three_threads_on_two_cores_match_one_thread(whole):
    """3 threads (more than the cores), every wait sleeping at once, 6 calls of 4 samples: C and
    Fortran equal their 1-thread results bit for bit (no sum is split between threads)."""
    plan, out = whole
    x = np.random.default_rng(3).uniform(-1, 1, 4 * plan.nx).astype(np.float32)
    x.tofile(out / "x.bin")
    (out / "main.c").write_text(C_MAIN)
    (out / "main.f90").write_text(F_MAIN)
    flags = ["-O1", "-fopenmp"]
    subprocess.run(["gcc", *flags, "-I", str(out), "main.c", "net.c", "-o", "main_c", "-lm"], cwd=out, check=True)
    subprocess.run(["gfortran", *flags, "-J", str(out), "net_model.F90", "main.f90", "-o", "main_f"], cwd=out, check=True)
    for lang in ("c", "f"):
        got = {}
        for threads in (1, 3):
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            env.pop("OMP_WAIT_POLICY", None)
            subprocess.run([str(out / f"main_{lang}")], cwd=out, check=True, env=env, timeout=120)
            got[threads] = np.fromfile(out / f"y_{lang}.bin", np.float32)
        worst = int(np.argmax(np.abs(got[3] - got[1])))
        assert np.array_equal(got[3], got[1]), f"{lang}: y[{worst}] {got[3][worst]} with 3 threads, {got[1][worst]} with 1"


PACE = r"""#include <stdio.h>
#include "rosenna_rt.h"

/* the team size rosenna_pace picks (period 4, cap 32), given the times its calls took: calls
   0-99 on a busy machine (the team 9 ms, one thread 1 ms; call 50 stalled 20 ms), 100-199 on a
   free one (the team 0.5 ms) */
int main(void)
{
    rosenna_pace pace = ROSENNA_PACE_INIT;

    for (int call = 0; call < 200; ++call) {
        int threads = rosenna_pace_threads(&pace, 4, 32);
        putchar(threads == 1 ? '1' : 'T');
        rosenna_pace_record(&pace, threads, threads > 1 ? (call < 100 ? 9e-3 : 0.5e-3) : call == 50 ? 20e-3 : 1e-3);
    }
    putchar('\n');
    pace = (rosenna_pace)ROSENNA_PACE_INIT; /* a free machine: the team's first call 5 ms (its threads start) */
    for (int call = 0; call < 20; ++call) {
        int threads = rosenna_pace_threads(&pace, 4, 32);
        putchar(threads == 1 ? '1' : 'T');
        rosenna_pace_record(&pace, threads, threads > 1 ? (call == 0 ? 5e-3 : 0.5e-3) : 1e-3);
    }
    putchar('\n');
    return 0;
}
"""


def _pace_expected():
    """The sizes rosenna_pace should pick in PACE's calls: the team, then one thread; the losing
    size tried at calls 4, 8, 16, 32 and then every 32 (the gap doubling up to the cap); one
    stalled call (50) changes nothing (a median of three); the team's first fast trial (128) does
    not outvote its two slow ones, its second (160) does; then one thread tried at 164, 168, 176, 192."""
    team = {0, 4, 8, 16, 32, 64, 96, 128} | (set(range(160, 200)) - {164, 168, 176, 192})
    return "".join("T" if call in team else "1" for call in range(200))


@pytest.mark.host
def test_pace_runs_the_faster_team_size(whole, tmp_path):
    """rosenna_pace (rosenna_rt.h) with 2 threads picks the faster size by the median of its last
    three calls, tries the other at a gap that doubles after each lost trial up to the cap, and
    returns to the team once its trials are faster; a slow first team call (the threads' start)
    costs the team only until its first trial."""
    _, out = whole
    (tmp_path / "pace.c").write_text(PACE)
    subprocess.run(["gcc", "-O1", "-fopenmp", "-Wall", "-Wextra", "-Werror", "-I", str(out), "pace.c", "-o", "pace"],
                   cwd=tmp_path, check=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    got = subprocess.run([str(tmp_path / "pace")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    _same_picks(got[0], "C")
    assert got[1] == "T111" + "TTTT1TTTTTTT1TTT", "a free machine: the team from its first trial on, one thread tried at 8, 16"



def _same_picks(got, lang):
    want = _pace_expected()
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), min(len(got), len(want)))
    assert got == want, f"{lang}: call {first}: {got[first - 3:first + 4]!r}, expected {want[first - 3:first + 4]!r}"


F_PACE = """module pace_only
  use, intrinsic :: iso_fortran_env, only: int64, real64
  !$ use omp_lib
  implicit none
{state}
contains
{pace}
end module pace_only

program main
  use pace_only
  implicit none
  integer :: call, threads
  real(real64) :: seconds
  character(len=200) :: picks

  do call = 0, 199
    threads = pace_threads(4, 32)
    picks(call + 1:call + 1) = merge('1', 'T', threads == 1)
    seconds = merge(merge(9e-3_real64, 0.5e-3_real64, call < 100), merge(20e-3_real64, 1e-3_real64, call == 50), &
                     threads > 1)
    call pace_record(threads, seconds)
  end do
  print '(a)', picks
end program main
"""


@pytest.mark.host
def test_fortran_pace_picks_as_c_does(whole, tmp_path):
    """The Fortran module's pace_threads / pace_record (its state declared as the module declares it)
    pick the same sizes as rosenna_pace in the same calls."""
    from rosenna.emit.whole_fortran import PACE as pace

    _, out = whole
    state = "\n".join(line for line in (out / "net_model.F90").read_text().splitlines()
                      if re.match(r"  (real\(real64\)|integer(\(int64\))?) :: pace_", line))
    assert state.count("pace_") == 4, state
    (tmp_path / "pace.F90").write_text(F_PACE.format(state=state, pace=pace))
    subprocess.run(["gfortran", "-O1", "-fopenmp", "-std=f2008", "-Wall", "-Werror", "pace.F90", "-o", "pace"],
                   cwd=tmp_path, check=True)
    env = dict(os.environ, OMP_NUM_THREADS="2")
    got = subprocess.run([str(tmp_path / "pace")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    _same_picks(got, "Fortran")
