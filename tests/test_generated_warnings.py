"""The generated C and Fortran of every zoo and examples/ model compile with no warning at all
under gcc ``-Wall -Wextra -pedantic`` and gfortran ``-Wall`` (as the generated build files build
them: with OpenMP; with OpenACC for two of the models), embedded and file-loaded, in single and
double precision.

One batch: every file is generated first, then compiled by one ``make -j2`` at ``-O2`` (the
optimiser's warnings, ``-Wmaybe-uninitialized`` and the like, need it); the Poisson guess conv net
(6,000 lines of C, 14,000 of Fortran) through the compilers' front ends alone (``-fsyntax-only``:
unused and unset variables, conversions, standard conformance; at -O2 it alone would take 25 s),
which keeps the batch near five seconds on two cores. The warnings are counted, not just the exit
status (``-Werror`` would stop at the first).
"""

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rosenna import zoo
from rosenna.generate import Options, generate

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
C_FLAGS = "-std=c99 -Wall -Wextra -pedantic"
F_FLAGS = "-std=f2008 -Wall"
#: (model, name, precision, embedded, optimisation): each zoo and examples model, the sample bounded
#: by alternating the options over the models rather than taking every combination.
CASES = [("gemm_small", "zs", "single", True, "-O2"), ("gemm_small", "zsd", "double", False, "-O2"),
         ("gemm_big", "zb", "double", True, "-O2"), ("gemm_big", "zbf", "single", False, "-O2"),
         ("mlp128", "zm", "single", False, "-O2"), ("mlp128", "zme", "single", True, "-O2"),
         ("cns_closure/sgs.onnx", "sgs", "single", False, "-O2"), ("cns_closure/sgs.onnx", "sgsd", "double", True, "-O2"),
         ("surrogates/adr_rate.onnx", "adr", "single", True, "-O2"),
         ("surrogates/adr_rate.onnx", "adrf", "double", False, "-O2"),
         ("surrogates/poisson_guess/pguess.onnx", "pg", "single", False, "-fsyntax-only")]


def _makefile(cases):
    rules, targets = [], []
    for _, name, _, _, opt in cases:
        for obj, src, cmd in ((f"{name}_omp.o", f"{name}/{name}.c", f"gcc {C_FLAGS} {opt} -fopenmp"),
                              # an OpenACC-only build ignores the omp pragmas: that one warning is off
                              (f"{name}_acc.o", f"{name}/{name}.c",
                               f"gcc {C_FLAGS} {opt} -Wno-unknown-pragmas -fopenacc"),
                              (f"{name}_fomp.o", f"{name}/{name}_model.F90", f"gfortran {F_FLAGS} {opt} -fopenmp -J{name}"),
                              (f"{name}_facc.o", f"{name}/{name}_model.F90", f"gfortran {F_FLAGS} {opt} -fopenacc -J{name}")):
            if "_acc" in obj or "_facc" in obj:
                if name not in ("zs", "sgsd"):
                    continue  # OpenACC: two small models
            targets.append(obj)
            rules.append(f"{obj}: {src}\n\t{cmd} -c $< -o $@ 2>{obj}.log || (cat {obj}.log; exit 1)\n")
    return f"all: {' '.join(targets)}\n\n" + "\n".join(rules), targets


@pytest.mark.parametrize("cases", [CASES], ids=["zoo+examples"])
def test_generated_code_compiles_without_a_warning(tmp_path, cases):
    for model, name, precision, embed, _ in cases:
        if model in zoo.MODELS:
            path = zoo.save(model, str(tmp_path / f"{name}.onnx"), np.float64 if precision == "double" else np.float32)
        else:
            path = str(EXAMPLES / model)
        generate(path, str(tmp_path / name), Options(name=name, precision=precision, embed=embed))
    text, targets = _makefile(cases)
    (tmp_path / "Makefile").write_text(text)
    env = dict(os.environ)
    env.pop("MAKEFLAGS", None)
    proc = subprocess.run(["make", "-j2", "-k"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warned = {obj: (tmp_path / f"{obj}.log").read_text() for obj in targets}
    warned = {obj: log for obj, log in warned.items() if "arning" in log}
    assert not warned, "\n".join(f"{obj}:\n{log[:1500]}" for obj, log in warned.items())
