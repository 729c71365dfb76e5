"""Three representatives of bench/survey_suites.py (the models of roseNNa's, FTorch's and TorchFort's
test suites, re-exported with PyTorch): each verifies or is refused cleanly (issue 12)."""

import os
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") and shutil.which("gfortran")), reason="needs gcc, gfortran")


def test_representatives_verify():
    pytest.importorskip("torch")
    import survey_suites

    rows = survey_suites.survey(only=["lstm_gemm_hid", "multiionet", "fcn_circular"], opsets=(None,), lang="both")
    assert [(r[1], r[2]) for r in rows] == [("lstm_gemm_hid", 10), ("multiionet", 17), ("fcn_circular", 17)]
    assert all(r[4] == "verified" for r in rows), rows


def test_failure_is_told_from_a_clean_refusal(tmp_path):
    """The survey's classification: a model rosenna refuses is 'refused', with its one line."""
    pytest.importorskip("torch")
    import onnx
    from onnx import TensorProto, helper

    import survey_suites

    graph = helper.make_graph([helper.make_node("Unique", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    path = str(tmp_path / "unique.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    outcome, message = survey_suites.verify(path, lang="c")
    assert outcome == "refused" and message.startswith("rosenna verify: error:"), (outcome, message)
