"""verify runs every entry point the generated set offers, in one harness per language: a planted
bug in the batch tail, a write past the last point and a whole-field plan's infer_one."""

import dataclasses
import re

import numpy as np
import onnx

import op_models
import pytest

from rosenna import verify as verify_module
from rosenna.cli import main
from rosenna.generate import Options
from rosenna.verify import verify
from rosenna.verify_harness import BATCH_COUNTS, GUARD, guard

pytestmark = pytest.mark.host


def _run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _plant(monkeypatch, old, new):
    """Edit the generated C after verify generates it (a bug the test then expects verify to find)."""
    real = verify_module.gen.generate

    def planted(model_path, out_dir, options):
        plan, written = real(model_path, out_dir, options)
        path = f"{out_dir}/{plan.name}.c"
        with open(path) as fh:
            text = fh.read()
        edited, count = re.subn(old, new, text)
        assert count == 1, f"the pattern {old!r} is not once in the generated C"
        with open(path, "w") as fh:
            fh.write(edited)
        return plan, written

    monkeypatch.setattr(verify_module.gen, "generate", planted)


def test_batch_tail_bug_fails_with_the_call_and_values(model, capsys, monkeypatch):
    """The last point of each partial SIMD block off by one: the full block of 32 passes, every
    partial one fails, and the report names the call, output, worst index, both values and tolerance."""
    _plant(monkeypatch, r"= (yb\[e \* 32 \+ p\]);", r"= \1 + (count < 32 && p == count - 1);")
    rc, out, err = _run(["verify", model("gemm_big"), "--lang", "c", "--entry", "infer_batch", "--cases", "4"],
                        capsys)
    assert rc == 1, out + err
    assert "infer_batch  c" in out and "FAIL" in out and " infer " not in out
    line = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("gemm_big_infer_batch with 1 point:"))
    assert "output 'output': 1 of 1 elements out of tolerance" in line, line
    assert "worst at [0, " in line and "got " in line and "reference " in line and "tolerance " in line
    assert "also failing with 31, 33, 1000 points" in line  # not 32: the full block is right
    assert "with 1, 31, 32, 33, 1000 points per call, 2 threads" in out


def test_write_past_the_last_point_fails(model, capsys, monkeypatch):
    """A block that copies one point too many out writes into the guard after y[n]."""
    _plant(monkeypatch, r"for \(int p = 0; p < count; \+\+p\)\n(\s+for \(int e = 0; e < \w+_NY)",
           r"for (int p = 0; p < count + (count < 32); ++p)\n\1")
    rc, out, err = _run(["verify", model("gemm_big"), "--lang", "c", "--entry", "infer_batch", "--cases", "4"],
                        capsys)
    assert rc == 1, out + err
    assert "gemm_big_infer_batch with 1 point: output 'output': wrote past its last point" in out, out


def test_every_entry_in_both_languages(model, tmp_path):
    """An MLP: infer over the 1000 points, infer_batch at every count, in C and Fortran, from one
    harness per language (the kept folder holds one of each)."""
    plan, results = verify(model("gemm_small"), Options(embed=False), cases=4, keep=str(tmp_path))
    rows = {(r.entry, r.lang) for r in results}
    assert rows == {(e, lang) for e in ("infer", "infer_batch") for lang in ("c", "fortran")}
    assert all(r.passed for r in results), [r.message() for r in results if not r.passed]
    harness = (tmp_path / "verify_c.c").read_text()
    assert [int(n) for n in re.findall(r"_infer_batch\((\d+), xb", harness)] == list(BATCH_COUNTS)
    assert f"{plan.name}_init(argv[4])" in harness  # the file-loaded build
    fortran = (tmp_path / "verify_f.f90").read_text()
    assert fortran.count(f"call {plan.name}_infer_batch(") == len(BATCH_COUNTS)
    assert f"guard = {GUARD}" in fortran and guard(plan) == GUARD
    assert sorted(p.name for p in tmp_path.glob("verify_*") if p.suffix in (".c", ".f90")) == ["verify_c.c",
                                                                                               "verify_f.f90"]


def test_whole_field_runs_infer_one_and_the_batch(tmp_path, capsys):
    """A whole-field plan: infer_one per sample and the batched call (over infer_one). In C: the
    Fortran harness's infer_one call is run by test_entry_choice_and_refusal, and the Fortran
    whole-field module by tests/test_infer_one.py."""
    path = op_models.convnet(tmp_path / "field.onnx", height=40, width=40, channels=4)
    rc, out, err = _run(["verify", str(path), "--cases", "3", "--lang", "c"], capsys)
    assert rc == 0, out + err
    for entry in ("infer", "infer_batch", "infer_one"):
        assert re.search(rf"^out\s+{entry}\s+c\s.*PASS$", out, re.M), (entry, out)
    assert "field_infer_one on 3 points" in out and "field_infer_batch with 1, 3 points" in out


def test_entry_choice_and_refusal(model, capsys):
    rc, out, err = _run(["verify", model("gemm_small"), "--entry", "infer_one"], capsys)
    assert rc == 2 and "has no gemm_small_infer_one" in err and "--infer-one" in err
    assert len(err.strip().splitlines()) == 1
    rc, out, err = _run(["verify", model("gemm_small"), "--lang", "fortran", "--entry", "infer_one",
                         "--infer-one", "--cases", "3"], capsys)
    assert rc == 0, out + err
    assert re.search(r"infer_one\s+fortran\s.*PASS", out) and "infer_batch" not in out


def test_batch_counts_follow_the_host_block(model):
    """1, B-1, B, B+1 and 1000 for a host block of B points (16 in double precision); a plan of
    large points gets a shorter last call."""
    from rosenna import generate as gen
    from rosenna.strategy.point import host_block
    from rosenna.verify_harness import batch_counts

    _, single = gen.build_plan(model("gemm_big"), Options())
    _, double = gen.build_plan(model("gemm_big"), Options(precision="double"))
    assert batch_counts(single) == BATCH_COUNTS and host_block(single, single.tuned) == 32
    assert batch_counts(double) == (1, 15, 16, 17, 1000) and host_block(double, double.tuned) == 16
    wide = dataclasses.replace(double, nx=40_000)  # 40,000 inputs a point: 4M elements hold 104 points
    assert batch_counts(wide)[-1] == (1 << 22) // (wide.nx + wide.ny + sum(wide.scratch))



def test_the_absolute_tolerance_grows_with_the_longest_sum(tmp_path):
    """Sums of up to 64 terms keep float32's atol; a Linear(1100, n) gets sqrt(1100/64) of it, said in why."""
    from onnx import TensorProto, helper, numpy_helper

    from rosenna import frontend
    from rosenna.compare import judging_tolerance
    from rosenna.verify import reduction_length

    short, why = judging_tolerance("single", np.float32, 1, 64)
    assert short.atol == 1e-6 and "sums of" not in why
    wide, why = judging_tolerance("single", np.float32, 1, 1100)
    assert abs(wide.atol - 1e-6 * np.sqrt(1100 / 64)) < 1e-12 and "for sums of 1100 terms" in why
    w = numpy_helper.from_array(np.zeros((3, 1100), np.float32), "w")
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1100])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "wide.onnx"))
    assert reduction_length(frontend.import_model(str(tmp_path / "wide.onnx"))) == 1100
