"""ONNX backend node tests for every op rosenna lowers: C and Fortran, batched compiles.

Cases inside rosenna's limits must pass at the ONNX runner's tolerance; cases outside must be
refused with rosenna's ModelError/UnsupportedOp and a reason; none may give a wrong number, crash
or fail to compile. docs/conformance.md is the same run written out (rosenna conformance).
"""

import functools

import pytest

from rosenna import conformance, ops


@functools.lru_cache(maxsize=None)
def all_cases():
    return conformance.collect()


@pytest.mark.parametrize("op", ops.lowered_ops())
def test_node_cases(op, tmp_path):
    cases = all_cases().get(op, [])
    if not cases:
        pytest.skip(f"onnx ships no single-node test case for {op}")
    # -O0: the drivers call the per-point <name>_infer, which -O1 does not vectorise either; the
    # numbers are the same and the ~1,400 compiles take half the CPU (rosenna conformance: -O1).
    outcomes = conformance.run(cases, str(tmp_path), optimize="-O0")
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
