"""Host tier: generated code built with gcc/gfortran and compared with onnxruntime."""

import pytest

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
    assert "FAIL" in out and "worst at element" in out
