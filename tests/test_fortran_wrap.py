"""Fortran line wrapping (``rosenna.emit.fortran_wrap.wrap``) is correct for every line, and the generated
module compiles for every model name and comment text: a property test over seeded random lines and
a compile test over models whose file stems (1 to 200 characters) and node/producer names mix quotes,
apostrophes, ``!``, ``&``, ``*/`` and non-ASCII characters (issue 12, group 1).

A seeded generator stands in for hypothesis (not a dependency): the cases are the same on every run.
"""

import os
import random
import re
import subprocess

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from rosenna.emit.fortran_wrap import MAX_LINE, wrap
from rosenna.generate import Options, default_name, generate
from rosenna.outdir import conflict

HOSTILE = "'\"!&*/\\ ;:-_.,()[]=%$#@" + "äöüßéø€✓" + "\t"
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"


def _text(rng, length, alphabet=LETTERS + HOSTILE):
    return "".join(rng.choice(alphabet) for _ in range(length))


def _literal(rng):
    quote = rng.choice("'\"")
    body = _text(rng, rng.randint(0, 180), LETTERS + "'\"!& */")
    return quote + body.replace(quote, quote * 2) + quote


def _code(rng):
    parts = []
    for _ in range(rng.randint(1, 30)):
        kind = rng.random()
        if kind < 0.2:
            parts.append(_literal(rng))
        elif kind < 0.3:
            parts.append("x" * rng.randint(60, 200))  # a token longer than a line
        else:
            parts.append(_text(rng, rng.randint(1, 12), LETTERS))
        parts.append(rng.choice([" ", ", ", " // ", "(", ") ", " = "]))
    return "".join(parts).rstrip()


def _collapse(code):
    """Runs of blanks outside character literals collapsed to one (what a continuation may change)."""
    out, quote, blank = [], None, False
    for ch in code:
        if quote is None and ch == " ":
            blank = True
            continue
        if blank and out:
            out.append(" ")
        blank = False
        out.append(ch)
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
    return "".join(out)


def _join(lines, sentinel):
    """Undo free-form continuation: a line ending in ``&`` continues on the next; a next line that
    starts (after its sentinel) with ``&`` continues right after it."""
    code = ""
    for i, line in enumerate(lines):
        text = line.lstrip()
        if sentinel and text.startswith(sentinel):
            text = text[len(sentinel):]
        if i > 0:
            stripped = text.lstrip()
            text = stripped[1:] if stripped.startswith("&") else text
        if i < len(lines) - 1:
            assert text.rstrip().endswith("&"), lines
            text = text.rstrip()[:-1]
        code += text
    return code


def test_wrap_property():
    """Every output line fits; code and character literals survive exactly; the comment's words survive."""
    rng = random.Random(12)
    for case in range(3000):
        indent = " " * rng.choice([0, 2, 4, 6])
        sentinel = rng.choice(["", "", "", "!$omp ", "!$acc "])
        code = _code(rng)
        note = _text(rng, rng.randint(0, 300)).replace("\t", " ") if rng.random() < 0.5 else ""
        line = indent + sentinel + code + (" ! " + note if note else "")
        lines = wrap(line)
        assert all(len(out) <= MAX_LINE for out in lines), (case, line)
        comments = [out for out in lines if out.lstrip().startswith("!") and not out.lstrip().startswith("!$")]
        program = [out for out in lines if out not in comments]
        assert comments == lines[:len(comments)], "comments go above the code"
        if len(line) <= MAX_LINE:
            assert lines == [line]
            continue
        joined = _join(program, sentinel.strip())
        assert _collapse(joined) == _collapse(code), (case, line, lines)
        words = " ".join(c.lstrip()[1:] for c in comments).split()
        assert "".join(words) == "".join(note.split()), (case, line, lines)


def test_comment_lines_wrap_with_their_marker():
    line = "  !> " + " ".join(["word"] * 60)
    lines = wrap(line)
    assert len(lines) > 1 and all(out.startswith("  !> ") and len(out) <= MAX_LINE for out in lines)


def _model(rng, stem, directory):
    """A Gemm+Relu model whose node, value, graph and producer names are hostile text."""
    texts = [_text(rng, rng.randint(1, 120)) for _ in range(6)]
    x, y = "x" + texts[0], "y" + texts[1]
    w = numpy_helper.from_array(np.random.default_rng(len(stem)).standard_normal((3, 2)).astype(np.float32),
                                "w" + texts[2])
    nodes = [helper.make_node("Gemm", [x, w.name], ["h" + texts[3]], name=texts[3]),
             helper.make_node("Relu", ["h" + texts[3]], [y], name=texts[4])]
    graph = helper.make_graph(nodes, texts[5], [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 2])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name=texts[5])
    model.ir_version = 8
    path = os.path.join(directory, stem + ".onnx")
    onnx.save(model, path)
    return path


def _stems(rng):
    """File stems of 1 to 200 characters, the lengths around every limit included."""
    lengths = [1, 2, 24, 25, 26, 27, 40, 41, 42, 62, 63, 64, 100, 131, 132, 133, 199, 200]
    lengths += [rng.randint(1, 200) for _ in range(30)]
    safe = LETTERS + "'!&*-. äöü€✓"  # no path separators or NUL: these are file names
    return [_text(rng, n, safe) for n in lengths]


def test_generated_module_compiles_for_any_name_and_comment(tmp_path):
    """Every stem gives a module that gfortran -std=f2008 -Wall -Werror and gcc -pedantic -Werror
    accept, with lines of at most 132 characters and ASCII-only files; compiled in one batch."""
    rng = random.Random(2026)
    out = tmp_path / "out"
    seen = set()
    for i, stem in enumerate(_stems(rng)):
        name = default_name(stem + ".onnx")
        if any(conflict(name, other) or name == other for other in seen):  # one output directory
            continue
        seen.add(name)
        path = _model(rng, stem, str(tmp_path))
        generate(path, str(out), Options(embed=bool(i % 2)))
    for fname in os.listdir(out):
        if fname.endswith(".rwt") or fname.startswith("."):
            continue
        data = (out / fname).read_bytes()
        assert data.isascii(), fname
        if fname.endswith((".c", ".h", ".cu")):  # model text never closes or opens a C comment
            text = data.decode()
            assert text.count("/*") == text.count("*/") == len(re.findall(r"/\*.*?\*/", text, re.S)), fname
        if fname.endswith(".F90"):
            long = [line for line in data.decode().splitlines() if len(line) > MAX_LINE]
            assert not long, (fname, long[:3])
    fortran = sorted(str(p) for p in out.glob("*.F90"))
    c = sorted(str(p) for p in out.glob("*.c"))
    assert len(fortran) == len(seen) and len(c) == len(seen)
    for cmd in (["gfortran", "-std=f2008", "-Wall", "-Werror", "-fopenmp", "-fopenacc", "-fsyntax-only", "-J", str(tmp_path)] + fortran,
                ["gcc", "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fopenmp", "-fsyntax-only", "-I", str(out)] + c):
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-4000:]


def test_long_stem_of_issue_12(model, tmp_path):
    """The reproduction: a 29-character stem made wrap() split the status comment (apostrophe)."""
    path = tmp_path / "combustion_surrogate_model_v2.onnx"
    path.write_bytes(open(model("gemm_small"), "rb").read())
    generate(str(path), str(tmp_path), Options(lang="fortran"))
    proc = subprocess.run(["gfortran", "-std=f2008", "-Wall", "-Werror", "-fsyntax-only",
                           "combustion_surrogate_model_v2_model.F90"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_reader_compiles_with_openmp_and_openacc_together(model, tmp_path):
    """A file-loaded module built with -fopenmp -fopenacc at once: gfortran 12 rejected the weights
    update's `!$acc&` continuation after the `!$omp&` one; each array now gets its own directive."""
    generate(model("gemm_big"), str(tmp_path), Options(lang="fortran", embed=False))
    source = "gemm_big_model.F90"
    text = (tmp_path / source).read_text()
    assert not re.search(r"^\s*!\$(omp|acc)&", text, re.M), "a continued directive is back"
    proc = subprocess.run(["gfortran", "-std=f2008", "-Wall", "-Werror", "-fopenmp", "-fopenacc", "-fsyntax-only",
                           source], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
