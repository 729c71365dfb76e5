"""Host tier: generated code built with gcc/gfortran and compared with onnxruntime."""

import numpy as np
import pytest

from rosenna.compare import TOLERANCE, Tolerance, compare

from rosenna.cli import main
from rosenna.generate import Options
from rosenna.verify import verify

CASES = [
    ("gemm_small", "single", None), ("gemm_small", "double", False),
    ("gemm_big", "single", False), ("gemm_big", "double", True),
    ("gemm_big_f64", "double", False), ("gemm_big_f64", "single", True),
    ("two_in_two_out", "single", True), ("two_in_two_out", "double", False),
    ("matmul_const", "single", False), ("matmul_const", "double", True),
    ("evil_names", "single", False), ("dynamic_reshape", "single", True),
    ("output_aliases", "single", True), ("output_aliases", "double", False),
]


@pytest.mark.parametrize("name,precision,embed", CASES)
def test_verify_passes(model, tmp_path, name, precision, embed):
    path = model(name)
    plan, results = verify(path, Options(precision=precision, embed=embed), cases=8, keep=str(tmp_path))
    langs = {r.lang for r in results}
    assert langs == {"c", "fortran"}
    if name == "gemm_big_f64" and precision == "single":
        # float64 model computed in single precision: the float64 tolerance cannot hold.
        assert not all(r.passed for r in results)
        return
    assert all(r.passed for r in results), [(r.output, r.lang, r.abs_err, r.got, r.want) for r in results]
    assert plan.embed == (embed if embed is not None else True)
    assert (tmp_path / f"{plan.name}.rwt").exists() == (not plan.embed)


def test_verify_cli_reports_per_output(model, tmp_path, capsys):
    rc = main(["verify", model("two_in_two_out"), "--cases", "4", "--lang", "c", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.count("PASS") == 3  # p, q and the verdict
    assert "max abs err" in out and "1e-05" in out


def test_verify_detects_wrong_code(model, tmp_path, monkeypatch, capsys):
    """A deliberately broken lowering must make verify FAIL, with exit status 1."""
    from rosenna.ops import activation

    monkeypatch.setattr(activation.Tanh, "expr", lambda self, attrs, x: activation.Fn("exp", (x,)))
    rc = main(["verify", model("gemm_big"), "--cases", "4", "--lang", "c", "--keep", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "FAIL" in out and "worst at [" in out and "tolerance" in out


def test_compare_is_elementwise():
    """Each element against its own tolerance: a large error where |want| is large is allowed even
    when a tiny-valued element sets the 'worst' index (verify once compared max |err| against the
    tolerance of a different element and reported FAIL)."""
    want = np.array([1000.0, 0.0, -3.0])
    got = want + np.array([5e-3, 5e-7, 0.0])
    cmp = compare(got, want, "float32", output="y")
    assert cmp.passed and cmp.mismatches == 0, cmp.message()
    rtol, atol = TOLERANCE["float32"].rtol, TOLERANCE["float32"].atol
    assert all(abs(g - w) <= atol + rtol * abs(w) for g, w in zip(got, want))
    bad = compare(want + np.array([2e-2, 0.0, 0.0]), want, "float32", output="y")
    assert not bad.passed and bad.mismatches == 1 and bad.worst_index == (0,)
    assert "output 'y'" in bad.message() and "1e+03" not in bad.message() and "1000.02" in bad.message()


def test_compare_special_values():
    nan, inf = float("nan"), float("inf")
    want = np.array([[nan, inf], [-inf, 1.0]])
    assert compare(want.copy(), want, "float64").passed
    for got in ([[0.0, inf], [-inf, 1.0]], [[nan, -inf], [-inf, 1.0]], [[nan, inf], [-inf, nan]],
                [[nan, inf], [inf, 1.0]], [[nan, 1e308], [-inf, 1.0]]):
        cmp = compare(np.array(got), want, "float64", output="z")
        assert not cmp.passed and cmp.mismatches == 1, got
    worst = compare(np.array([[nan, inf], [-inf, 2.0]]), want, "float64")
    assert worst.worst_index == (1, 1) and worst.got == 2.0 and worst.want == 1.0
    # scalars and an explicit tolerance
    assert compare(np.float32(1.5), np.array(1.5), "float32").passed
    assert compare([1.0], [1.1], tolerance=Tolerance(rtol=0.2, atol=0.0)).passed
    assert not compare([1.0, 2.0], [1.0], "float32").passed
