"""Model names that would shadow a system's files or symbols (issue 12, group 5): rosenna.names.

For each class one build shows the harm that the refusal prevents (the table emptied by monkeypatch,
as before the fix), and the names probed harmless build clean."""

import os
import shutil
import subprocess

import pytest

from rosenna import names, outdir
from rosenna.cli import main
from rosenna.generate import MAX_NAME, Options, default_name, generate, mangled

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("pkg-config")), reason="needs gcc, pkg-config")

# one name per class that is in that class only, and what it becomes as a file stem
EXAMPLES = {"header": "math", "library": "m", "namespace": "mtx", "c++": "x__y"}


def test_table_classes_and_one_line_refusals(model, tmp_path, capsys):
    assert [c.kind for c in names.CLASSES] == ["rosenna", "header", "library", "namespace", "c++"]
    for kind, name in EXAMPLES.items():
        assert [c.kind for c in names.CLASSES if c.matches(name)] == [kind], name
        rc = main(["generate", model("gemm_small"), "--name", name, "--out", str(tmp_path)])
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        suggestion = err.strip().rsplit("--name ", 1)[1]
        assert outdir.reserved(suggestion) is None and suggestion == mangled(name), err
    assert not os.listdir(tmp_path)
    for name in ("omp", "OMP", "M", "acc_net", "MPI_solver", "gomp", "cudart", "stdio", "x_", "sem"):
        assert outdir.reserved(name), name
    for name in ("stress", "tokamak", "isotherm", "membrane", "mlp", "int", "do", "class", "iso_c_binding",
                 "cuda_net", "Foo", "x_y"):
        assert outdir.reserved(name) is None, name


def test_every_mangled_name_is_accepted():
    """A file stem in any class becomes a name in none (default_name never yields a refused name)."""
    stems = set(names.SYSTEM_LIBRARIES | names.SYSTEM_HEADERS | names.RESERVED_PREFIXES)
    stems |= {p + "_net" for p in names.RESERVED_PREFIXES} | {"rosenna", "rosenna_rt", "a__b", "x_", "_m", "9m", "o2_'_Y", "a-_-b", "_'_"}
    for stem in stems:
        name = default_name(f"/d/{stem}.onnx")
        assert outdir.reserved(name) is None and name.isidentifier() and len(name) <= MAX_NAME, (stem, name)


def _log_model(path):
    """y = log(x * w) over 3 values, w a weight: a model whose C code calls the C math library."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.array([1.5, 2.0, 0.5], np.float32), "w")
    graph = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["s"]), helper.make_node("Log", ["s"], ["y"])], "log",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return str(path)


def _run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def test_harm_of_each_class_without_the_table(model, tmp_path, monkeypatch):
    """What each class breaks, built for real with the table emptied (rosenna before the fix)."""
    monkeypatch.setattr(names, "CLASSES", ())
    path = _log_model(tmp_path / "log.onnx")  # calls libm's logf (exp and tanh are rosenna_rt.h's own)
    built = {}
    for kind, name in EXAMPLES.items():
        out = tmp_path / kind
        generate(path, str(out), Options(name=name, lang="c", embed=False))  # with <name>_init
        built[kind] = out
    # header: math.h in -I<out> is the model's, so the model's own #include <math.h> finds no logf
    r = _run(["gcc", "-std=c11", "-Werror=implicit-function-declaration", "-I.", "-c", "math.c"], built["header"])
    assert r.returncode != 0 and "logf" in r.stderr, r.stderr
    # library: the .pc's Libs -L<out> -lm ... -lm never reach the C math library
    lib = built["library"]
    assert _run(["make", "-s", "-f", "m.mk"], lib).returncode == 0
    (lib / "main.c").write_text('#include "m.h"\nint main(void) { float x[M_NX] = {0}, y[M_NY];\n'
                                '  return m_infer_batch(1, x, y, 0); }\n')
    env = dict(os.environ, PKG_CONFIG_PATH=str(lib))
    flags = subprocess.run(["pkg-config", "--libs", "m"], env=env, capture_output=True, text=True).stdout.split()
    assert flags[0] == "-L" + str(lib) and "-lm" in flags, flags
    r = _run(["gcc", "-fopenmp", "-I.", "main.c", "-o", "main", *flags], lib)
    assert r.returncode != 0 and "undefined reference to `logf'" in r.stderr, (flags, r.stderr)
    # namespace: mtx_init is C11's <threads.h> routine; a solver including both does not compile
    ns = built["namespace"]
    (ns / "solver.c").write_text('#include <threads.h>\n#include "mtx.h"\nint main(void) { return 0; }\n')
    r = _run(["gcc", "-std=c11", "-I.", "-c", "solver.c"], ns)
    assert r.returncode != 0 and "mtx_init" in r.stderr, r.stderr
    # c++: formally reserved only; g++ accepts it (why the table says so rather than claiming a break)
    cxx = built["c++"]
    (cxx / "u.cpp").write_text('#include "x__y.h"\nint main() { return 0; }\n')
    assert _run(["g++", "-I.", "-c", "u.cpp"], cxx).returncode == 0


def test_names_probed_harmless_build(model, tmp_path):
    """Keywords, intrinsic-module names and a mixed-case name: C, C++ and Fortran compile clean,
    and a Fortran program uses the intrinsic module and the model's module side by side."""
    if not shutil.which("gfortran"):
        pytest.skip("needs gfortran")
    path = model("gemm_small")
    for name in ("int", "do", "class", "iso_c_binding"):
        out = tmp_path / name
        generate(path, str(out), Options(name=name, embed=False))
        assert _run(["gcc", "-std=c11", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fopenmp", "-I.", "-c",
                     f"{name}.c"], out).returncode == 0, name
        (out / "u.cpp").write_text(f'#include "{name}.h"\nint main() {{ return {name.upper()}_NX; }}\n')
        assert _run(["g++", "-Wall", "-I.", "-c", "u.cpp"], out).returncode == 0, name
        (out / "p.f90").write_text(f"program p\n  use, intrinsic :: iso_c_binding, only: c_int\n"
                                   f"  use {name}_model\n  integer(c_int) :: k = {name}_nx\n  print *, k\nend program p\n")
        r = _run(["gfortran", "-std=f2008", "-Wall", "-fopenmp", "-c", f"{name}_model.F90", "p.f90"], out)
        assert r.returncode == 0, (name, r.stderr)


def test_mixed_case_name_mod_file(model, tmp_path):
    """Fortran compilers write module Foo_model as foo_model.mod: the set's file list and the
    recipe's clean name it so (it named Foo_model.mod, which no compiler writes, and clean left it)."""
    if not shutil.which("gfortran"):
        pytest.skip("needs gfortran")
    out = tmp_path / "o"
    generate(model("gemm_small"), str(out), Options(name="Foo", lang="fortran"))
    assert _run(["make", "-s", "-f", "Foo_fortran.mk"], out).returncode == 0
    built = set(os.listdir(out))
    assert "foo_model.mod" in built and built <= set(outdir.set_files("Foo")) | {".rosenna-Foo.json", ".rosenna.lock"} \
        | set(outdir.SHARED_FILES), built
    assert _run(["make", "-s", "-f", "Foo_fortran.mk", "clean"], out).returncode == 0
    assert not [f for f in os.listdir(out) if f.endswith((".mod", ".o", ".a"))]
