"""Verify: generate, compile and run the per-point ``<name>_infer`` on the host, and compare it
with onnxruntime on the same random inputs.

Tolerances are keyed on the ONNX model's dtype, not on the generated precision.
"""

import os
import shlex
import tempfile
from dataclasses import dataclass

import numpy as np

from rosenna import generate as gen
from rosenna.compare import RULE, Comparison, compare
from rosenna.toolrun import compiler, run



@dataclass
class Result(Comparison):
    """One output's :class:`~rosenna.compare.Comparison` in one generated language."""

    lang: str = ""


C_HARNESS = """#include <stdio.h>
#include <stdlib.h>
#include "{name}.h"

/* verify harness: argv[1]=cases argv[2]=x.bin argv[3]=y.bin [argv[4]=weights] */
int main(int argc, char **argv)
{{
    int n = atoi(argv[1]);
    {t} *x = malloc(sizeof({t}) * (size_t)n * {NX});
    {t} *y = malloc(sizeof({t}) * (size_t)n * {NY});
    FILE *f = fopen(argv[2], "rb");
    if (!x || !y || !f || fread(x, sizeof({t}), (size_t)n * {NX}, f) != (size_t)n * {NX}) return 3;
    fclose(f);
{init}    for (int i = 0; i < n; ++i)
        {name}_infer(x + (size_t)i * {NX}, y + (size_t)i * {NY});
    f = fopen(argv[3], "wb");
    if (!f || fwrite(y, sizeof({t}), (size_t)n * {NY}, f) != (size_t)n * {NY}) return 3;
    fclose(f);
    free(x);
    free(y);
    (void)argc;
    return 0;
}}
"""

F_HARNESS = """program verify_{name}
  use {name}_model
  implicit none
  integer :: n, i, unit, status
  character(len=4096) :: arg
  real({name}_rk), allocatable :: x(:, :), y(:, :)

  call get_command_argument(1, arg)
  read (arg, *) n
  allocate (x({name}_nx, n), y({name}_ny, n))
  call get_command_argument(2, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='old', action='read')
  read (unit) x
  close (unit)
{init}  do i = 1, n
    call {name}_infer(x(:, i), y(:, i))
  end do
  call get_command_argument(3, arg)
  open (newunit=unit, file=trim(arg), access='stream', form='unformatted', status='replace', action='write')
  write (unit) y
  close (unit)
end program verify_{name}
"""


def random_inputs(graph, cases, seed):
    """``cases`` random samples per graph input, uniform in [-1, 1), in the model's dtype."""
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1.0, 1.0, (cases,) + tuple(graph.shape_of(name))).astype(graph.values[name].dtype)
            for name in graph.inputs}


def reference(model_path, graph, inputs, cases):
    """onnxruntime's outputs, one session run per case (each case is one point)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    outs = {name: [] for name in names}
    for i in range(cases):
        feed = {name: inputs[name][i] for name in graph.inputs}
        for name, value in zip(names, sess.run(None, feed)):
            outs[name].append(np.asarray(value))
    return {name: np.stack(v) for name, v in outs.items()}


def pack(plan, arrays, slices, cases, width):
    dtype = np.float64 if plan.precision == "double" else np.float32
    out = np.zeros((cases, width), dtype)
    for s in slices:
        out[:, s.offset:s.offset + s.size] = arrays[s.name].reshape(cases, s.size)
    return out


def compare_outputs(plan, lang, got, want, model_dtype):
    """One :class:`Result` per output: the generated ``got`` (cases x ny) against ``want``."""
    results = []
    for s in plan.outputs:
        cmp = compare(got[:, s.offset:s.offset + s.size], want[s.name], model_dtype, output=s.name)
        results.append(Result(lang=lang, **vars(cmp)))
    return results


def verify(model_path, options, cases=16, seed=0, keep=None, cflags=None, fflags=None):
    """Run the whole check; return ``(plan, results)``, one :class:`Result` per output and language.

    Compilers: the toolchain profile's host compilers and host-fallback flags when
    ``options.toolchain`` is set, else $CC / $FC (default gcc / gfortran) with -fopenmp.
    """
    profile = options.toolchain
    cc = compiler("CC", "gcc") if profile is None else shlex.split(profile.cc)
    fc = None
    if profile is not None:
        cflags = cflags or profile.flags_host
        fflags = fflags or profile.flags_host
    graph, plan = gen.build_plan(model_path, options)
    workdir = os.path.abspath(keep or tempfile.mkdtemp(prefix="rosenna-verify-"))
    plan, _ = gen.generate(model_path, workdir, options)
    inputs = random_inputs(graph, cases, seed)
    want = reference(model_path, graph, inputs, cases)
    pack(plan, inputs, plan.inputs, cases, plan.nx).tofile(os.path.join(workdir, "x.bin"))
    weights = [] if plan.embed else [os.path.join(workdir, f"{plan.name}.rwt")]
    fmt = {"name": plan.name, "t": plan.ctype, "NX": plan.nx, "NY": plan.ny}
    results = []
    model_dtype = "float64" if graph.dtype == np.float64 else "float32"
    langs = ("c", "fortran") if options.lang == "both" else (options.lang,)
    for lang in langs:
        exe = os.path.join(workdir, f"verify_{lang}")
        if lang == "c":
            init = "" if plan.embed else (
                f"    if ({plan.name}_init(argv[4]) != 0) {{ fprintf(stderr, \"init failed\\n\"); return 4; }}\n")
            with open(os.path.join(workdir, "verify_c.c"), "w") as fh:
                fh.write(C_HARNESS.format(init=init, **fmt))
            cmd = cc + ["-O2"] + shlex.split(cflags or "-fopenmp") + [
                "-I", workdir, os.path.join(workdir, "verify_c.c"), os.path.join(workdir, f"{plan.name}.c"),
                "-o", exe, "-lm"]
        else:
            init = "" if plan.embed else (
                "  call get_command_argument(4, arg)\n"
                f"  call {plan.name}_init(trim(arg), status)\n  if (status /= 0) error stop 4\n")
            with open(os.path.join(workdir, "verify_f.f90"), "w") as fh:
                fh.write(F_HARNESS.format(init=init, **fmt))
            fc = fc or (compiler("FC", "gfortran") if profile is None else shlex.split(profile.fc))
            cmd = fc + ["-O2"] + shlex.split(fflags or "-fopenmp") + [
                "-J", workdir, os.path.join(workdir, f"{plan.name}_model.F90"),
                os.path.join(workdir, "verify_f.f90"), "-o", exe]
        run(cmd, workdir, f"compiling the {lang} verify harness")
        y_path = os.path.join(workdir, f"y_{lang}.bin")
        run([exe, str(cases), os.path.join(workdir, "x.bin"), y_path] + weights, workdir,
            f"running the {lang} verify harness")
        dtype = np.float64 if plan.precision == "double" else np.float32
        got = np.fromfile(y_path, dtype=dtype).reshape(cases, plan.ny)
        results.extend(compare_outputs(plan, lang, got, want, model_dtype))
    return plan, results


def report(results):
    """The verify table, one line per output and language, then the rule that decided PASS."""
    lines = [f"{'output':<24} {'lang':<8} {'max abs err':>12} {'max rel err':>12} {'rtol':>7} {'atol':>7}  result"]
    for r in results:
        lines.append(f"{r.output[:24]:<24} {r.lang:<8} {r.abs_err:>12.3e} {r.rel_err:>12.3e} {r.rtol:>7.0e} "
                     f"{r.atol:>7.0e}  {'PASS' if r.passed else 'FAIL'}")
        if not r.passed:
            lines.append(f"    {r.message(want_label='reference')}")
    lines.append(f"rule: {RULE}")
    return "\n".join(lines)
