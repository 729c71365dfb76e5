"""verify's inputs and tolerance: integer and boolean inputs over the values the model uses them
for, --input-range, stored integer inputs, and the tolerance of the precision built."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import frontend
from rosenna.cli import main
from rosenna.compare import PRECISIONS, TOLERANCE, judging_tolerance
from rosenna.generate import Options
from rosenna.verify import run_verify
from rosenna.verify_inputs import input_draws, random_inputs

pytestmark = pytest.mark.host
F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _save(path, nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tests")
    model.ir_version = 8
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(scope="module")
def regimes(tmp_path_factory):
    """y = flag ? (regime == 1 ? tanh(x) : (regime == 2 ? sigmoid(x) : 3x)) : -x: three regimes
    on an int64 input, a boolean switch, one float input."""
    path = tmp_path_factory.mktemp("regimes") / "regimes.onnx"
    consts = [numpy_helper.from_array(np.array(v, np.int64), f"r{v}") for v in (1, 2)]
    consts.append(numpy_helper.from_array(np.array(3.0, np.float32), "three"))
    nodes = [helper.make_node("Equal", ["regime", "r1"], ["is1"]), helper.make_node("Equal", ["regime", "r2"], ["is2"]),
             helper.make_node("Tanh", ["x"], ["a"]), helper.make_node("Sigmoid", ["x"], ["b"]),
             helper.make_node("Mul", ["x", "three"], ["c"]), helper.make_node("Neg", ["x"], ["off"]),
             helper.make_node("Where", ["is2", "b", "c"], ["bc"]), helper.make_node("Where", ["is1", "a", "bc"], ["on"]),
             helper.make_node("Where", ["flag", "on", "off"], ["y"])]
    return _save(path, nodes, [helper.make_tensor_value_info("regime", I64, [1]),
                               helper.make_tensor_value_info("flag", BOOL, [1]),
                               helper.make_tensor_value_info("x", F, [1, 4])],
                 [helper.make_tensor_value_info("y", F, [1, 4])], consts)


def test_regime_switch_runs_every_regime(regimes, capsys):
    """Every regime (0 to 3: the compared values and their neighbours) and both truth values are
    among the cases, and the generated code matches onnxruntime on all of them."""
    v = run_verify(regimes, Options(lang="c"), cases=12, entries=["infer"])
    assert v.passed, [r.message() for r in v.results]
    assert v.reference.cases == 12
    assert set(v.reference.inputs["regime"].ravel()) == {0, 1, 2, 3}
    assert set(v.reference.inputs["flag"].ravel()) == {False, True}
    pairs = set(zip(v.reference.inputs["regime"].ravel(), v.reference.inputs["flag"].ravel()))
    assert len(pairs) == 8  # every regime both on and off
    rc = main(["verify", regimes, "--lang", "c", "--entry", "infer", "--cases", "8"])
    out = capsys.readouterr().out
    assert rc == 0 and "input 'regime': the values it is compared with and their neighbours (0, 1, 2, 3)" in out
    assert "input 'flag': both truth values (0, 1)" in out


def test_embedding_indices_take_the_table_size(tmp_path):
    """An int64 input feeding a Gather on a constant table (an embedding: run-time indices) draws
    the table's rows, each in turn."""
    table = numpy_helper.from_array(np.zeros((7, 3), np.float32), "table")
    path = _save(tmp_path / "embed.onnx", [helper.make_node("Gather", ["table", "cat"], ["y"], axis=0)],
                 [helper.make_tensor_value_info("cat", I64, [2])],
                 [helper.make_tensor_value_info("y", F, [2, 3])], [table])
    graph = frontend.import_model(path, {}, {})
    draw = input_draws(graph)["cat"]
    assert draw.categories == tuple(range(7)) and "the 7 indices of Gather" in draw.why
    values = random_inputs(graph, 7, 0)["cat"]
    assert values.dtype == np.int64 and sorted(values[:, 0]) == list(range(7))  # each row once per 7 cases
    assert (values[:, 1] != values[:, 0]).all()


def test_embedding_verifies_on_every_category(tmp_path):
    """An embedding (a Gather on a constant table, indices from an int64 input) feeding a Tanh, end
    to end: verify's cases cover every row of the table, in C and Fortran, per point and in batch."""
    rng = np.random.default_rng(5)
    table = numpy_helper.from_array(rng.standard_normal((7, 3)).astype(np.float32), "table")
    path = _save(tmp_path / "embed.onnx", [helper.make_node("Gather", ["table", "cat"], ["e"], axis=0),
                                           helper.make_node("Tanh", ["e"], ["y"])],
                 [helper.make_tensor_value_info("cat", I64, [1])],
                 [helper.make_tensor_value_info("y", F, [1, 3])], [table])
    v = run_verify(path, Options(lang="both"), cases=14, entries=["infer", "infer_batch"])
    assert v.passed, [r.message() for r in v.results]
    assert sorted(set(v.reference.inputs["cat"].ravel())) == list(range(7))
    assert {r.lang for r in v.results} == {"c", "fortran"}


def test_input_range_and_its_refusals(regimes, capsys):
    v = run_verify(regimes, Options(lang="c"), cases=40, entries=["infer"],
                   input_ranges={"x": (-3.0, 3.0), "regime": (2, 3)})
    assert v.passed, [r.message() for r in v.results]
    x = v.reference.inputs["x"]
    assert x.min() >= -3 and x.max() < 3 and x.min() < -1 and x.max() > 1
    assert set(v.reference.inputs["regime"].ravel()) == {2, 3}
    for bad, said in (("x=1:0", "finite LO < HI"), ("x=a:b", "NAME=LO:HI"), ("nope=0:1", "no run-time input"),
                      ("regime=0.2:0.8", "holds no int64 value")):
        rc = main(["verify", regimes, "--lang", "c", "--input-range", bad])
        err = capsys.readouterr().err
        assert rc == 2 and said in err and len(err.strip().splitlines()) == 1, (bad, err)


def test_stored_integer_and_boolean_inputs(regimes, tmp_path, capsys):
    sess = ort.InferenceSession(regimes, providers=["CPUExecutionProvider"])
    regime = np.array([[0], [1], [2], [1], [3]], np.int64)
    flag = np.array([[True], [True], [True], [False], [True]])
    x = np.random.default_rng(2).uniform(-1, 1, (5, 1, 4)).astype(np.float32)
    y = np.stack([sess.run(None, {"regime": regime[i], "flag": flag[i], "x": x[i]})[0] for i in range(5)])
    np.savez(tmp_path / "good.npz", regime=regime, flag=flag, x=x, y=y)
    rc = main(["verify", regimes, "--lang", "c", "--entry", "infer", "--reference", str(tmp_path / "good.npz")])
    out, err = capsys.readouterr()
    assert rc == 0 and "(5 cases)" in out, out + err
    np.savez(tmp_path / "floats.npz", regime=regime.astype(np.float32), flag=flag, x=x, y=y)
    rc = main(["verify", regimes, "--lang", "c", "--reference", str(tmp_path / "floats.npz")])
    err = capsys.readouterr().err
    assert rc == 2 and "input 'regime' holds float32 values; the model takes int64: store integers" in err


def test_tolerance_follows_the_precision_built(model, capsys):
    """A float64 model built in single precision is judged at float32's tolerance, and says so; a
    float32 model built in double keeps float32's (its reference computes in float32)."""
    rc = main(["verify", model("gemm_big_f64"), "--precision", "single", "--lang", "c", "--entry", "infer"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "tolerance: atol 1e-06 + rtol 1e-05*|want| (float32's: built in single precision from a float64 model)" in out
    assert judging_tolerance("single", np.float64)[0] == TOLERANCE["float32"]
    assert judging_tolerance("double", np.float64)[0] == TOLERANCE["float64"]
    assert judging_tolerance("double", np.float32)[0] == TOLERANCE["float32"]
    # The narrow precisions: from the type's epsilon, looser with depth, never tighter than float32's.
    half, deeper = judging_tolerance("half", np.float32, 4)[0], judging_tolerance("half", np.float32, 8)[0]
    assert deeper.rtol == 2 * half.rtol and half.rtol == 4 * 8 * PRECISIONS["half"].eps
    assert judging_tolerance("bfloat16", np.float32, 1)[0].rtol > half.rtol / 4
