"""Loop, Scan and If unrolled at generation time (rosenna/passes/control.py) and standard ops
expanded into their ONNX function bodies (rosenna/passes/functions.py): models built here, unlike
the node tests (nested bodies, outer-scope reads, reverse scans, a run-time If condition, attribute
references), generated, compiled in one C and one Fortran batch and compared with onnxruntime (or
onnx's reference evaluator where onnxruntime lacks the op); and the refusals, each with its reason."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rosenna import conformance
from rosenna.errors import ModelError
from rosenna.frontend import import_model

F = TensorProto.FLOAT


def _const(name, array):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(array), name))


def loop_model():
    """y = x + 0 + 1 + 2 (carried), the partial sums stacked (scan output), and the body reads
    a weight of the enclosing graph; the body holds an If on the iteration number."""
    then = helper.make_graph([helper.make_node("Mul", ["acc_in", "w"], ["branch"])], "then", [],
                             [helper.make_tensor_value_info("branch", F, [3])])
    other = helper.make_graph([helper.make_node("Identity", ["acc_in"], ["branch"])], "else", [],
                              [helper.make_tensor_value_info("branch", F, [3])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Cast", ["iter"], ["fiter"], to=F),
         helper.make_node("Add", ["acc_in", "fiter"], ["sum"]),
         _const("two", np.asarray(2, np.int64)),
         helper.make_node("Less", ["iter", "two"], ["early"]),
         helper.make_node("If", ["early"], ["scaled"], then_branch=then, else_branch=other),
         helper.make_node("Add", ["sum", "scaled"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["partial"])],
        "body",
        [helper.make_tensor_value_info("iter", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", F, [3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", F, [3]),
         helper.make_tensor_value_info("partial", F, [3])])
    graph = helper.make_graph(
        [_const("trip", np.asarray(4, np.int64)), _const("go", np.asarray(True)),
         helper.make_node("Loop", ["trip", "go", "x"], ["y", "stack"], body=body)],
        "loop", [helper.make_tensor_value_info("x", F, [3])],
        [helper.make_tensor_value_info("y", F, [3]), helper.make_tensor_value_info("stack", F, [4, 3])],
        [numpy_helper.from_array(np.asarray([0.5, -1.0, 2.0], np.float32), "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def scan_model():
    """A running sum over axis 1 of x, read backwards, its states stacked on axis 1 reversed."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "piece"], ["s_out"]), helper.make_node("Tanh", ["s_out"], ["o"])],
        "body", [helper.make_tensor_value_info("s_in", F, [2]), helper.make_tensor_value_info("piece", F, [2])],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("o", F, [2])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["s0", "x"], ["s", "outs"], body=body, num_scan_inputs=1,
                          scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1],
                          scan_output_directions=[1])],
        "scan", [helper.make_tensor_value_info("s0", F, [2]), helper.make_tensor_value_info("x", F, [2, 5])],
        [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("outs", F, [2, 5])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def if_model():
    """A run-time condition (a mask from the data): both branches computed, one selected."""
    then = helper.make_graph([helper.make_node("Exp", ["x"], ["r"])], "then", [],
                             [helper.make_tensor_value_info("r", F, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["r"])], "else", [],
                              [helper.make_tensor_value_info("r", F, [2, 3])])
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
         _const("zero", np.asarray(0.0, np.float32)),
         helper.make_node("Greater", ["total", "zero"], ["positive"]),
         helper.make_node("If", ["positive"], ["y"], then_branch=then, else_branch=other)],
        "if", [helper.make_tensor_value_info("x", F, [2, 3])], [helper.make_tensor_value_info("y", F, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def functions_model():
    """Ops rosenna knows only by their function body, with attribute references and defaults."""
    graph = helper.make_graph(
        [helper.make_node("MeanVarianceNormalization", ["x"], ["m"], axes=[0, 2]),
         helper.make_node("RMSNormalization", ["m", "scale"], ["y"], axis=-1, epsilon=1e-3)],
        "functions", [helper.make_tensor_value_info("x", F, [2, 3, 4])],
        [helper.make_tensor_value_info("y", F, [2, 3, 4])],
        [numpy_helper.from_array(np.linspace(0.5, 2.0, 4).astype(np.float32), "scale")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


MODELS = {"loop": loop_model, "scan": scan_model, "if_negative": if_model, "if_positive": if_model,
          "functions": functions_model}


def _case(root, name, model, inputs):
    folder = os.path.join(root, name)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    onnx.save(model, os.path.join(folder, "model.onnx"))
    feed = {i.name: a for i, a in zip(model.graph.input, inputs)}
    try:  # onnxruntime where it runs the model (the reference evaluator has no reverse Scan)
        import onnxruntime as ort

        outputs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    except Exception:
        outputs = ReferenceEvaluator(model).run(None, feed)
    for kind, arrays in (("input", inputs), ("output", outputs)):
        for j, array in enumerate(arrays):
            with open(os.path.join(folder, "test_data_set_0", f"{kind}_{j}.pb"), "wb") as fh:
                fh.write(numpy_helper.from_array(np.asarray(array)).SerializeToString())
    return conformance.Case(name, name, folder)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("control"))
    rng = np.random.default_rng(7)
    data = {"loop": [rng.uniform(-1, 1, 3)], "scan": [rng.uniform(-1, 1, 2), rng.uniform(-1, 1, (2, 5))],
            "if_negative": [-np.abs(rng.uniform(0.1, 1, (2, 3)))], "if_positive": [rng.uniform(0.1, 1, (2, 3))],
            "functions": [rng.uniform(-2, 2, (2, 3, 4))]}
    cases = [_case(root, name, MODELS[name](), [np.asarray(a, np.float32) for a in data[name]]) for name in MODELS]
    return {o.case.name: o for o in conformance.run(cases, os.path.join(root, "work"), optimize="-O0")}


@pytest.mark.parametrize("name", list(MODELS))
def test_unrolled_model_matches_the_reference(outcomes, name):
    assert outcomes[name].status == "passed", outcomes[name].detail


def test_nothing_of_the_subgraphs_or_functions_is_left(tmp_path):
    for name, build in MODELS.items():
        path = str(tmp_path / f"{name}.onnx")
        onnx.save(build(), path)
        ops = {node.op for node in import_model(path).nodes}
        assert not ops & {"Loop", "Scan", "If", "MeanVarianceNormalization", "RMSNormalization"}, (name, ops)


def test_a_loop_with_a_run_time_trip_count_is_refused_with_the_reason(tmp_path):
    model = loop_model()
    del model.graph.node[0]
    model.graph.input.append(helper.make_tensor_value_info("trip", TensorProto.INT64, []))
    path = str(tmp_path / "dynamic.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelError, match=r"dynamic\.onnx: node .*\(Loop\): the trip count is computed at run time"):
        import_model(path)


def test_an_if_with_branches_of_different_shapes_is_refused(tmp_path):
    model = if_model()
    other = model.graph.node[3].attribute[1].g
    other.node[0].op_type = "Transpose"
    other.output[0].type.tensor_type.shape.dim[0].dim_value = 3
    other.output[0].type.tensor_type.shape.dim[1].dim_value = 2
    path = str(tmp_path / "shapes.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelError, match="do not have one static shape"):
        import_model(path)
