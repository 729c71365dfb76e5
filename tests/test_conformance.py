"""ONNX backend node tests for every op rosenna lowers: C and Fortran, batched compiles.

Cases inside rosenna's limits must pass at the ONNX runner's tolerance; cases outside must be
refused with rosenna's ModelError/UnsupportedOp and a reason; none may give a wrong number, crash
or fail to compile. docs/conformance.md is the same run written out (rosenna conformance).
"""

import functools
import os

import pytest

from rosenna import conformance, ops


@functools.lru_cache(maxsize=None)
def all_cases():
    return conformance.collect()


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """``{op: [Outcome]}``: every case of every op in one run (shared translation units, one C and
    one Fortran driver), which the per-op tests below read. -O0: the drivers call the per-point
    <name>_infer, which -O1 does not vectorise either; the numbers are the same and the compiles
    take half the CPU (rosenna conformance: -O1)."""
    cases = [case for op_cases in all_cases().values() for case in op_cases]
    by_op = {}
    for o in conformance.run(cases, str(tmp_path_factory.mktemp("conformance")), optimize="-O0"):
        by_op.setdefault(o.case.op, []).append(o)
    return by_op


@pytest.mark.parametrize("op", ops.lowered_ops())
def test_node_cases(op, outcomes):
    if not all_cases().get(op):
        pytest.skip(f"onnx ships no single-node test case for {op}")
    outcomes = outcomes[op]
    assert len(outcomes) == len(all_cases()[op])
    failed = [f"{o.case.name}: {o.detail}" for o in outcomes if o.status == "failed"]
    assert not failed, "wrong numbers or build failures:\n  " + "\n  ".join(failed)
    for o in outcomes:
        assert o.status in ("passed", "refused")
        if o.status == "refused":
            assert o.detail, f"{o.case.name} refused without a reason"
    assert any(o.status == "passed" for o in outcomes), f"no case of {op} passes"


def test_the_report_lists_every_lowered_op():
    import os

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "conformance.md")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    for op, cases in all_cases().items():
        assert f"| {op} | {len(cases)} |" in text, f"docs/conformance.md is stale for {op}: rerun the generator"


def test_a_compile_error_is_reported_for_its_own_case(tmp_path, monkeypatch):
    """The cases share translation units; one whose generated C and Fortran do not compile fails
    alone, with the compiler's message, and the cases it shared a unit with still pass."""
    cases = [case for op in ("Neg", "Sqrt", "Tanh") for case in all_cases()[op]]
    prepare = conformance._prepare

    def broken_second(case, index, *rest):
        outcome, job = prepare(case, index, *rest)
        if index == 1:
            for source, line in ((f"{job['name']}.c", "int broken_on_purpose = ;\n"),
                                 (f"{job['name']}_model.F90", "broken on purpose\n")):
                with open(tmp_path / source, "a") as fh:
                    fh.write(line)
        return outcome, job

    monkeypatch.setattr(conformance, "_prepare", broken_second)
    outcomes = conformance.run(cases, str(tmp_path), optimize="-O0")
    assert [o.status for o in outcomes] == ["passed", "failed"] + ["passed"] * (len(cases) - 2)
    assert "c: compile failed" in outcomes[1].detail and "fortran: compile failed" in outcomes[1].detail
    assert any(name.startswith("unit") for name in os.listdir(tmp_path))  # the others did share a unit


def test_a_case_defining_a_foreign_macro_gets_a_unit_of_its_own(tmp_path):
    for name, macro in (("k0000", "K0000_NX"), ("k0001", "k0001_scratch"), ("k0002", "ROSENNA_CONST"),
                        ("k0003", "K0003_NY")):
        (tmp_path / f"{name}.c").write_text(f'#include "{name}.h"\n')
        (tmp_path / f"{name}.h").write_text(f"#define {macro} 1\n")
    units = conformance._units(["k0000", "k0001", "k0002", "k0003"], "c", str(tmp_path))
    assert [(obj, part) for obj, part, _ in units] == [("unit0_c.o", ["k0000", "k0001", "k0003"]),
                                                       ("k0002_c.o", ["k0002"])]
    assert (tmp_path / "unit0_c.c").read_text() == '#include "k0000.c"\n#include "k0001.c"\n#include "k0003.c"\n'
