"""ONNX backend node tests: every case onnx defines, C and Fortran, batched compiles.

By default a fast selection runs (conformance.fast_subset: at most two cases and one expanded
case of each op, and the forms of conformance.FAST_FORMS); ``ROSENNA_CONFORMANCE=all`` runs all 1,884. Cases inside rosenna's limits must
pass at the ONNX runner's tolerance; cases outside must be refused with rosenna's ModelError and a
reason in one of the named classes; none may give a wrong number, crash or fail to compile.
docs/conformance.md is the whole run written out (rosenna conformance --write).
"""

import functools
import os
import re

import pytest

from rosenna import conformance, ops

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "conformance.md")


@functools.lru_cache(maxsize=None)
def all_cases():
    return conformance.collect()


def selected():
    found = all_cases()
    return found if os.environ.get("ROSENNA_CONFORMANCE") == "all" else conformance.fast_subset(found)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    """``{op: [Outcome]}``: the selected cases in one run (shared translation units, one C and one
    Fortran driver). -O0: the drivers call the per-point <name>_infer, which -O1 does not vectorise
    either; the numbers are the same and the compiles take half the CPU (rosenna conformance: -O1)."""
    cases = [case for op_cases in selected().values() for case in op_cases]
    by_op = {}
    for o in conformance.run(cases, str(tmp_path_factory.mktemp("conformance")), optimize="-O0"):
        by_op.setdefault(o.case.op, []).append(o)
    return by_op


def test_no_case_fails_and_every_refusal_has_a_reason_and_a_class(outcomes):
    failed = [f"{o.case.name}: {o.detail}" for outs in outcomes.values() for o in outs if o.status == "failed"]
    assert not failed, "wrong numbers or build failures:\n  " + "\n  ".join(failed)
    classes = [name for name, _ in conformance.REFUSAL_CLASSES]
    for o in (o for outs in outcomes.values() for o in outs):
        assert o.status in ("passed", "refused")
        if o.status == "refused":
            assert o.detail, f"{o.case.name} refused without a reason"
            assert conformance.refusal_class(o) in classes


def _reported_statuses():
    """``{case name: status}`` of the cases the report lists as not passed."""
    text = open(DOC, encoding="utf-8").read()
    return dict(re.findall(r"^\| `(test_\w+)` \| (refused|failed) \|", text, re.M))


@pytest.mark.parametrize("op", ops.lowered_ops())
def test_each_lowered_op_agrees_with_the_report(op, outcomes):
    """Every selected case of an op rosenna lowers ends as the whole run wrote it in
    docs/conformance.md (passed there when not listed); and some case of the op passes there."""
    if not outcomes.get(op):
        pytest.skip(f"onnx ships no node test case for {op}")
    reported = _reported_statuses()
    for o in outcomes[op]:
        assert o.status == reported.get(o.case.name, "passed"), f"{o.case.name}: {o.status} now ({o.detail})"
    rows = conformance.parse_rows(open(DOC, encoding="utf-8").read())
    assert rows[op][1] > 0, f"no case of {op} passes"


def test_the_other_selected_cases_agree_with_the_report(outcomes):
    reported = _reported_statuses()
    lowered = set(ops.lowered_ops())
    wrong = [f"{o.case.name}: {o.status} now, {reported.get(o.case.name, 'passed')} in the report ({o.detail})"
             for op, outs in outcomes.items() if op not in lowered for o in outs
             if o.status != reported.get(o.case.name, "passed")]
    assert not wrong, "\n".join(wrong)


def test_an_unknown_op_is_a_usage_error(capsys):
    from rosenna.cli import main

    assert main(["conformance", "--op", "NoSuchOp"]) == 2
    assert "onnx defines no node test case of that op" in capsys.readouterr().err


def test_the_report_covers_the_whole_suite():
    text = open(DOC, encoding="utf-8").read()
    found = all_cases()
    total = sum(map(len, found.values()))
    assert f"defines {total:,} node test cases" in text
    rows = conformance.parse_rows(text)
    assert {op: row[0] for op, row in rows.items()} == {op: len(cases) for op, cases in found.items()}, \
        "docs/conformance.md is stale: rerun rosenna conformance --write docs/conformance.md"
    assert sum(row[4] for row in rows.values()) == 0
    passed = sum(row[1] for row in rows.values())
    assert passed >= 0.75 * total, f"{passed} of {total} cases pass"
    listed = dict(re.findall(r"^\| ([a-z][a-z0-9 -]+[a-z]) \| (\d+) \|", text, re.M))
    assert set(listed) == {name for name, _ in conformance.REFUSAL_CLASSES}
    assert sum(map(int, listed.values())) == sum(row[3] for row in rows.values())


@pytest.mark.parametrize("op, detail, expected", [
    ("NonZero", "node 'n' (NonZero): not an op rosenna supports", "shape decided by data"),
    ("Reshape", "frozen: node 'r' (Reshape): the shape is computed at run time; rosenna needs it constant",
     "shape decided by data"),
    ("StringSplit", "input 'x' has element type object; ...", "strings"),
    ("SequenceInsert", "sequences and optionals: input 's' is a sequence_type, not a tensor",
     "sequences and optionals"),
    ("ai.onnx.preview.training.Adam", "an op of domain 'ai.onnx.preview.training'", "training or random"),
    ("Bernoulli", "node 'b' (Bernoulli): not an op rosenna supports", "training or random"),
    ("QLinearConv", "node 'q' (QLinearConv): not an op rosenna supports", "quantized integer semantics"),
    ("Split", "input 'x' is empty (dimension 0 at axis 0)", "empty tensors"),
    ("Foo", "node 'f' (Foo): not an op rosenna supports", "not lowered yet"),
])
def test_refusal_classes(op, detail, expected):
    outcome = conformance.Outcome(conformance.Case(op, "test_x", "/nonexistent"), "refused", detail)
    assert conformance.refusal_class(outcome) == expected


def test_a_compile_error_is_reported_for_its_own_case(tmp_path, monkeypatch):
    """The cases share translation units; one whose generated C and Fortran do not compile fails
    alone, with the compiler's message, and the cases it shared a unit with still pass."""
    cases = [case for op in ("Neg", "Sqrt", "Tanh") for case in all_cases()[op] if not case.expanded]
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


def test_a_case_that_crashes_fails_alone(tmp_path, monkeypatch):
    """A case whose program dies (here: abort() in its C routine) fails with the driver's exit
    status; the driver goes on with the next case, and those pass."""
    cases = [case for op in ("Neg", "Sqrt", "Tanh") for case in all_cases()[op] if not case.expanded]
    prepare = conformance._prepare

    def crashing_second(case, index, *rest):
        outcome, job = prepare(case, index, *rest)
        if index == 1:
            path = tmp_path / f"{job['name']}.c"
            text = path.read_text()
            head = re.search(rf"void {job['name']}_infer\([^)]*\)\s*{{", text)
            path.write_text("#include <stdlib.h>\n" + text[:head.end()] + " abort();" + text[head.end():])
        return outcome, job

    monkeypatch.setattr(conformance, "_prepare", crashing_second)
    outcomes = conformance.run(cases, str(tmp_path), langs=("c",), optimize="-O0")
    assert [o.status for o in outcomes] == ["passed", "failed"] + ["passed"] * (len(cases) - 2)
    assert "c: driver exited" in outcomes[1].detail


def test_a_case_defining_a_foreign_macro_gets_a_unit_of_its_own(tmp_path):
    for name, macro in (("k0000", "K0000_NX"), ("k0001", "k0001_scratch"), ("k0002", "ROSENNA_CONST"),
                        ("k0003", "K0003_NY")):
        (tmp_path / f"{name}.c").write_text(f'#include "{name}.h"\n')
        (tmp_path / f"{name}.h").write_text(f"#define {macro} 1\n")
    units = conformance._units(["k0000", "k0001", "k0002", "k0003"], "c", str(tmp_path))
    assert [(obj, part) for obj, part, _ in units] == [("unit0_c.o", ["k0000", "k0001", "k0003"]),
                                                       ("k0002_c.o", ["k0002"])]
    assert (tmp_path / "unit0_c.c").read_text() == '#include "k0000.c"\n#include "k0001.c"\n#include "k0003.c"\n'


def test_the_cache_names_the_op_of_every_case():
    """An ``_expanded`` case is counted under the op it expands; other domains are named in full."""
    found = all_cases()
    assert sum(map(len, found.values())) >= 1884
    names = {c.name: op for op, cases in found.items() for c in cases}
    assert names["test_celu_expanded"] == "Celu" and names["test_softmax_axis_0_expanded"] == "Softmax"
    assert names["test_ai_onnx_ml_binarizer"] == "ai.onnx.ml.Binarizer"
    assert all(c.expanded == ("_expanded" in c.name) for cases in found.values() for c in cases)


def test_the_command_writes_a_report_of_a_selection(tmp_path, capsys):
    from rosenna.cli import main

    assert main(["conformance", "--op", "Abs", "--write", str(tmp_path / "missing" / "x.md")]) == 2
    assert "no such directory" in capsys.readouterr().err
    report = tmp_path / "abs.md"
    assert main(["conformance", "--op", "Abs", "--op", "Celu", "--write", str(report)]) == 0
    text = report.read_text()
    assert f"defines {sum(map(len, all_cases().values())):,} node test cases" in text
    assert "This report covers a selection of them, 7 cases" in text
    assert "| Abs | 1 | 1 (0) | 0 | 0 |" in text and "| Celu | 6 | 6 (0) | 0 | 0 |" in text
    assert not (tmp_path / "abs.md.partial").exists()
