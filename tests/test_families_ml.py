"""The ai.onnx.ml family (issue 30, item 3) against onnxruntime, in C and Fortran, compiled in one
batch: scikit-learn pipelines through skl2onnx (scalers, normalizers, imputers, linear and SVM
regressors, random forests and gradient boosting, classifiers' probabilities), XGBoost through
onnxmltools, TreeEnsemble of ai.onnx.ml opset 5, and hand-built ensembles that use what converters
rarely do (every branch mode, NaN routing, MIN/MAX/AVERAGE, several targets). Then the refusals:
ZipMap, a Gaussian process (its Scan unrolled), a model onnx's shape inference rejects."""

import os
import subprocess
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rosenna import conformance, ops
from rosenna import generate as gen
from rosenna.errors import ModelError

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.ensemble import (GradientBoostingClassifier, GradientBoostingRegressor,  # noqa: E402
                              RandomForestClassifier, RandomForestRegressor)
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, Normalizer, PolynomialFeatures, StandardScaler  # noqa: E402
from sklearn.svm import SVR, LinearSVR  # noqa: E402

RNG = np.random.default_rng(30)
FEATURES = 6
X_TRAIN = RNG.normal(size=(400, FEATURES)).astype(np.float32)
Y_TRAIN = (2 * X_TRAIN[:, 0] + np.sin(3 * X_TRAIN[:, 1]) + X_TRAIN[:, 2] * X_TRAIN[:, 3]).astype(np.float32)
ROWS = 16  # rows per case: the ml ops loop over them inside one call
OPSETS = {"": 17, "ai.onnx.ml": 3}


def convert(estimator, dtype=np.float32, opsets=OPSETS, zipmap=False):
    from skl2onnx import to_onnx

    options = {id(estimator): {"zipmap": False}} if hasattr(estimator, "predict_proba") and not zipmap else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(estimator, X_TRAIN[:1].astype(dtype), target_opset=opsets, options=options)


def with_rows(proto, rows):
    """The model with its symbolic leading (batch) dimension fixed to ``rows`` on inputs and outputs."""
    for info in list(proto.graph.input) + list(proto.graph.output):
        dims = info.type.tensor_type.shape.dim
        if len(dims) and not dims[0].dim_value:
            dims[0].Clear()
            dims[0].dim_value = rows
    return proto


def inputs(rows=ROWS, nan=False, dtype=np.float32):
    x = RNG.normal(size=(rows, FEATURES)).astype(dtype)
    if nan:
        x[::3, 2] = np.nan
        x[1::4, 0] = np.nan
    return x


def fitted(estimator, y=Y_TRAIN, x=X_TRAIN):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimator.fit(x, y)


LABELS2 = (Y_TRAIN > 0.3).astype(np.int64)
LABELS3 = np.digitize(Y_TRAIN, [-1.0, 1.0]).astype(np.int64) * 2 + 1  # labels 1, 3, 5


def _tree_node(modes, tracks=None, aggregate="SUM", targets=1, base=None, leaf_extra=None):
    """A hand-built TreeEnsembleRegressor of two trees, exercising ``modes`` on its splits."""
    # tree 0: node 0 splits on x0, node 1 on x2 (true side), leaves 2, 3, 4
    # tree 1: node 0 splits on x2, leaves 1, 2; tree 2: one leaf
    nodes = dict(nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1, 2], nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2, 0],
                 nodes_featureids=[0, 2, 0, 0, 0, 2, 0, 0, 0],
                 nodes_values=[0.25, -0.5, 0, 0, 0, 0.0, 0, 0, 0],
                 nodes_modes=[modes[0], modes[1], "LEAF", "LEAF", "LEAF", modes[2], "LEAF", "LEAF", "LEAF"],
                 nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 0, 0])
    if tracks is not None:
        nodes["nodes_missing_value_tracks_true"] = tracks
    leaves = [(0, 2, 1.5), (0, 3, -2.0), (0, 4, 0.75), (1, 1, 10.0), (1, 2, -10.0), (2, 0, 0.125)]
    weights = []
    for k in range(targets):
        weights += [(t, n, k, v * (k + 1)) for t, n, v in leaves]
    weights += leaf_extra or []
    attrs = dict(nodes, target_treeids=[w[0] for w in weights], target_nodeids=[w[1] for w in weights],
                 target_ids=[w[2] for w in weights], target_weights=[w[3] for w in weights], n_targets=targets,
                 aggregate_function=aggregate)
    if base is not None:
        attrs["base_values"] = base
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "trees", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, targets])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    x = RNG.normal(size=(ROWS, 3)).astype(np.float32)
    x[0, 0], x[1, 2], x[2, 2] = 0.25, -0.5, 0.0  # on the thresholds
    x[3, 0], x[4, 2], x[5, 0], x[5, 2] = np.nan, np.nan, np.nan, np.nan
    return model, [x]


def _sklearn_label_encoder():
    """scikit-learn's LabelEncoder of integer classes (skl2onnx: keys_int64s -> values_int64s)."""
    from skl2onnx import to_onnx
    from sklearn.preprocessing import LabelEncoder

    classes = np.array([3, 7, 11, 42, -5])
    return to_onnx(LabelEncoder().fit(classes), classes[:2]), [RNG.choice(classes, ROWS).astype(np.int64)]


def _label_encoder(keys, values, key_type, value_type, opset=2, default=None):
    """One LabelEncoder: keys and values as the ``*_floats`` / ``*_int64s`` attributes (opset 2) or
    tensors (opset 4), fed every key, values beside them and (float keys) NaN."""
    np_type = {TensorProto.FLOAT: np.float32, TensorProto.INT64: np.int64}
    suffix = {TensorProto.FLOAT: "floats", TensorProto.INT64: "int64s"}
    if opset == 4:
        attrs = {"keys_tensor": numpy_helper.from_array(np.array(keys, np_type[key_type]), "keys"),
                 "values_tensor": numpy_helper.from_array(np.array(values, np_type[value_type]), "values")}
        if default is not None:
            attrs["default_tensor"] = numpy_helper.from_array(np.array([default], np_type[value_type]), "default")
    else:
        attrs = {f"keys_{suffix[key_type]}": keys, f"values_{suffix[value_type]}": values}
        if default is not None:
            attrs[f"default_{suffix[value_type][:-1]}"] = default
    node = helper.make_node("LabelEncoder", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "labels", [helper.make_tensor_value_info("x", key_type, [ROWS, 2])],
                              [helper.make_tensor_value_info("y", value_type, [ROWS, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", opset)])
    model.ir_version = 9
    feed = RNG.choice(np.concatenate([np.array(keys, np.float64), [0.5, -7, 100]]), size=(ROWS, 2))
    feed = feed.astype(np_type[key_type])
    if key_type == TensorProto.FLOAT:
        feed[0, 0] = np.nan
    return model, [feed]


def _probit(built, opset=3):
    """The ensemble with post_transform PROBIT and its leaf values scaled into (0, 1)."""
    proto, feeds = built
    node = proto.graph.node[0]
    for attr in node.attribute:
        if attr.name == "post_transform":
            node.attribute.remove(attr)
            break
    node.attribute.append(helper.make_attribute("post_transform", "PROBIT" if opset == 3 else 4))
    for attr in node.attribute:
        if attr.name == "target_weights":
            attr.floats[:] = [0.01 * v for v in attr.floats]
        if attr.name == "leaf_weights":
            attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t) / 70, "leaf_weights"))
    return proto, feeds


def _membership(tracks):
    """A TreeEnsemble (ai.onnx.ml opset 5) of two trees mixing BRANCH_MEMBER (sets with a negative
    member, a zero, one member, unsorted) with BRANCH_LEQ and BRANCH_GT, fed members, other
    integers and NaN; ``tracks``: nodes_missing_value_tracks_true of the member nodes."""
    # tree 0: n0 x0 in {3, -1.5, 0} ? n1 : n2;  n1 x1 <= 0.5 ? L0 : L1;  n2 x2 in {7} ? L2 : L3
    # tree 1: n3 x1 > 0.25 ? n4 : L5;  n4 x0 in {2, 3, 5, 11} ? L4 : L5
    member = np.array([3, -1, 0, np.nan, 7, np.nan, 2, 3, 5, 11, np.nan], np.float32)
    attrs = dict(nodes_featureids=[0, 1, 2, 1, 0], nodes_modes=numpy_helper.from_array(np.array([6, 0, 6, 3, 6], np.uint8)),
                 nodes_splits=numpy_helper.from_array(np.array([0, 0.5, 0, 0.25, 0], np.float32)),
                 nodes_truenodeids=[1, 0, 2, 4, 4], nodes_trueleafs=[0, 1, 1, 0, 1],
                 nodes_falsenodeids=[2, 1, 3, 5, 5], nodes_falseleafs=[0, 1, 1, 1, 1],
                 nodes_missing_value_tracks_true=[tracks, 0, tracks, 0, 0],
                 membership_values=numpy_helper.from_array(member), tree_roots=[0, 3],
                 leaf_targetids=[0, 0, 0, 0, 0, 0],
                 leaf_weights=numpy_helper.from_array(np.array([1, 2, 4, 8, 16, 32], np.float32)),
                 n_targets=1, aggregate_function=1, post_transform=0)
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "member", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 5)])
    model.ir_version = 9
    # category codes, as set-membership splits are used: onnxruntime takes integer members only,
    # and for a feature between integers its answer depends on the set (docs/model-families.md)
    picks = np.array([3, -1, 0, 7, 2, 5, 11, 1, 4, -2, -0.0, np.nan], np.float32)
    x = RNG.choice(picks, size=(ROWS, 3)).astype(np.float32)
    x[:, 1] = RNG.normal(size=ROWS).astype(np.float32)
    x[0, 1] = np.nan
    return model, [x]


def _single(op, attrs, in_shapes, out_shape, feeds, out_type=TensorProto.FLOAT, consts=None):
    names = [f"x{i}" for i in range(len(in_shapes))]
    consts = consts or {}
    node = helper.make_node(op, names + list(consts), ["y"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                           for n, s in zip(names, in_shapes)],
                              [helper.make_tensor_value_info("y", out_type, out_shape)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model, feeds


def _xgboost_classifier():
    xgb = pytest.importorskip("xgboost")
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType

    model = fitted(xgb.XGBClassifier(n_estimators=20, max_depth=4, random_state=0), y=LABELS2)
    return onnxmltools.convert_xgboost(model, initial_types=[("x", FloatTensorType([None, FEATURES]))], target_opset=15)


def _runtime_picks():
    """ArrayFeatureExtractor with the feature indices fed at run time."""
    node = helper.make_node("ArrayFeatureExtractor", ["x", "picks"], ["y"], domain="ai.onnx.ml")
    graph = helper.make_graph([node], "afe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, FEATURES]),
                                              helper.make_tensor_value_info("picks", TensorProto.INT64, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    return model, [inputs(), np.array([4, 0, 4], np.int64)]


def _xgboost():
    xgb = pytest.importorskip("xgboost")
    onnxmltools = pytest.importorskip("onnxmltools")
    from onnxmltools.convert.common.data_types import FloatTensorType

    model = fitted(xgb.XGBRegressor(n_estimators=60, max_depth=6, random_state=0))
    return onnxmltools.convert_xgboost(model, initial_types=[("x", FloatTensorType([None, FEATURES]))], target_opset=15)


MODELS = {
    "scaler_linear": lambda: (convert(fitted(make_pipeline(StandardScaler(), LinearRegression()))), [inputs()]),
    "normalizers": lambda: (convert(fitted(make_pipeline(Normalizer("l2"), MinMaxScaler(), Ridge()))), [inputs()]),
    "normalizer_l1": lambda: (convert(fitted(make_pipeline(Normalizer("l1"), Ridge()))), [inputs()]),
    "normalizer_max": lambda: (convert(fitted(make_pipeline(Normalizer("max"), Ridge()))), [inputs()]),
    "imputer": lambda: (convert(fitted(make_pipeline(SimpleImputer(), StandardScaler(), Ridge()),
                                       x=np.where(RNG.random(X_TRAIN.shape) < 0.1, np.nan, X_TRAIN)
                                       .astype(np.float32))), [inputs(nan=True)]),
    "svr_rbf": lambda: (convert(fitted(make_pipeline(StandardScaler(), SVR(kernel="rbf")))), [inputs()]),
    "svr_poly": lambda: (convert(fitted(SVR(kernel="poly", degree=2, coef0=0.5))), [inputs()]),
    "svr_sigmoid": lambda: (convert(fitted(SVR(kernel="sigmoid", gamma=0.05))), [inputs()]),
    "linear_svr": lambda: (convert(fitted(LinearSVR(random_state=0))), [inputs()]),
    "random_forest": lambda: (convert(fitted(make_pipeline(StandardScaler(), RandomForestRegressor(
        n_estimators=100, max_depth=10, random_state=0)))), [inputs()]),
    "gradient_boosting": lambda: (convert(fitted(GradientBoostingRegressor(n_estimators=100, max_depth=8,
                                                                           random_state=0))), [inputs()]),
    "forest_opset5": lambda: (convert(fitted(RandomForestRegressor(n_estimators=30, max_depth=9, random_state=2)),
                                      opsets={"": 18, "ai.onnx.ml": 5}), [inputs()]),
    "xgboost": lambda: (_xgboost(), [inputs(nan=True)]),
    "xgboost_classifier_2": lambda: (_xgboost_classifier(), [inputs()]),
    "forest_classifier_2": lambda: (convert(fitted(RandomForestClassifier(n_estimators=30, max_depth=8, random_state=0),
                                                   y=LABELS2)), [inputs()]),
    "forest_classifier_3": lambda: (convert(fitted(RandomForestClassifier(n_estimators=30, max_depth=8, random_state=0),
                                                   y=LABELS3)), [inputs()]),
    "boosting_classifier_2": lambda: (convert(fitted(GradientBoostingClassifier(n_estimators=30, max_depth=4),
                                                     y=LABELS2)), [inputs()]),
    "boosting_classifier_3": lambda: (convert(fitted(GradientBoostingClassifier(n_estimators=20, max_depth=4),
                                                     y=LABELS3)), [inputs()]),
    "logistic_2": lambda: (convert(fitted(make_pipeline(StandardScaler(), LogisticRegression()), y=LABELS2)),
                           [inputs()]),
    "logistic_3": lambda: (convert(fitted(LogisticRegression(), y=LABELS3)), [inputs()]),
    "trees_leq_nan_tracks": lambda: _tree_node(["BRANCH_LEQ"] * 3, tracks=[1, 0, 0, 0, 0, 1, 0, 0, 0]),
    "trees_lt_gt_gte": lambda: _tree_node(["BRANCH_LT", "BRANCH_GT", "BRANCH_GTE"], tracks=[0, 1, 0, 0, 0, 0, 0, 0, 0]),
    "trees_probit": lambda: _probit(_tree_node(["BRANCH_LEQ"] * 3, targets=2, base=[0.5, 0.25])),
    "trees_probit_opset5": lambda: _probit(_membership(1), 5),
    "label_encoder_sklearn": lambda: _sklearn_label_encoder(),
    "label_encoder_int_float": lambda: _label_encoder([1, -4, 9], [0.5, 2.25, -8.0], TensorProto.INT64,
                                                      TensorProto.FLOAT, default=7.5),
    "label_encoder_float_int_opset4": lambda: _label_encoder([0.25, -1.5, 3.0], [10, 20, 30], TensorProto.FLOAT,
                                                             TensorProto.INT64, opset=4, default=-9),
    "trees_member": lambda: _membership(0),
    "trees_member_nan_tracks": lambda: _membership(1),
    "trees_eq": lambda: _tree_node(["BRANCH_EQ"] * 3),
    "trees_neq": lambda: _tree_node(["BRANCH_NEQ"] * 3),
    "trees_average_base": lambda: _tree_node(["BRANCH_LEQ"] * 3, aggregate="AVERAGE", base=[0.5]),
    "trees_min_two_targets": lambda: _tree_node(["BRANCH_LEQ"] * 3, aggregate="MIN", targets=2),
    "trees_max_two_targets": lambda: _tree_node(["BRANCH_GT"] * 3, aggregate="MAX", targets=2, base=[1.0, -1.0]),
    "feature_vectorizer": lambda: _single("FeatureVectorizer", {"inputdimensions": [2, 3, 4]},
                                          [[ROWS, 2], [ROWS, 3], [ROWS, 3]], [ROWS, 9],
                                          [inputs()[:, :2], inputs()[:, :3], inputs()[:, :3]]),
    "array_feature_extractor": lambda: _single("ArrayFeatureExtractor", {}, [[ROWS, FEATURES]], [ROWS, 4], [inputs()],
                                               consts={"picks": np.array([5, 0, 3, 3], np.int64)}),
    "array_feature_extractor_runtime": lambda: _runtime_picks(),
    "binarizer": lambda: _single("Binarizer", {"threshold": 0.25}, [[ROWS, 3]], [ROWS, 3], [inputs()[:, :3]]),
    # PolynomialFeatures is ReduceProd over gathered columns: a standard-domain reduction, checked
    # here once the registry has it.
    **({"polynomial_ridge": lambda: (convert(fitted(make_pipeline(PolynomialFeatures(2), Ridge()))), [inputs()])}
       if ops.get("ReduceProd") else {}),
    "imputer_value": lambda: _single("Imputer", {"imputed_value_floats": [9.0, 8.0, 7.0], "replaced_value_float": 0.5},
                                     [[ROWS, 3]], [ROWS, 3], [np.where(RNG.random((ROWS, 3)) < 0.3, 0.5,
                                                                       RNG.normal(size=(ROWS, 3))).astype(np.float32)]),
}


def write_case(root, name, proto, feeds):
    """The case folder conformance.run reads: the model with ROWS rows, inputs, onnxruntime's outputs."""
    proto = with_rows(proto, feeds[0].shape[0])
    path = os.path.join(root, name)
    data = os.path.join(path, "test_data_set_0")
    os.makedirs(data)
    onnx.save(proto, os.path.join(path, "model.onnx"))
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {info.name: array for info, array in zip(sess.get_inputs(), feeds)}
    for j, (info, array) in enumerate(zip(sess.get_inputs(), feeds)):
        with open(os.path.join(data, f"input_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(array, info.name).SerializeToString())
    for j, value in enumerate(sess.run(None, feed)):
        with open(os.path.join(data, f"output_{j}.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(np.asarray(value), f"out{j}").SerializeToString())
    return conformance.Case(name, name, path)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    root = tmp_path_factory.mktemp("ml")
    cases = []
    for name, build in MODELS.items():
        try:
            proto, feeds = build()
        except pytest.skip.Exception:
            continue
        cases.append(write_case(str(root / "cases"), name, proto, feeds))
    return {o.case.name: o for o in conformance.run(cases, str(root / "work"), rtol=1e-5, atol=1e-5)}


@pytest.mark.parametrize("name", list(MODELS))
def test_against_onnxruntime(outcomes, name):
    if name not in outcomes:
        pytest.skip(f"{name}: its converter is not installed")
    o = outcomes[name]
    assert (o.status, o.variant) == ("passed", "as given"), f"{name}: {o.status}: {o.detail}"


def _generate(tmp_path, proto):
    path = str(tmp_path / "m.onnx")
    onnx.save(proto, path)
    return gen.build_plan(path, gen.Options())[1]


def test_a_forest_is_one_table_walked_a_constant_number_of_steps(tmp_path):
    """The ensemble is a weight table and a depth-bounded loop (no per-node code): the generated
    code of 30 trees is as long as that of 2, and the plan runs per point."""
    plan = _generate(tmp_path, with_rows(convert(fitted(RandomForestRegressor(n_estimators=30, max_depth=10,
                                                                              random_state=0))), 1))
    one = _generate(tmp_path, with_rows(convert(fitted(RandomForestRegressor(n_estimators=2, max_depth=10,
                                                                             random_state=0))), 1))
    from rosenna.loopir import Loop, walk

    loops = [s.extent for s in walk(plan.body) if isinstance(s, Loop)]
    assert 30 in loops and 10 in loops  # trees, steps (the deepest path)
    assert len(list(walk(plan.body))) == len(list(walk(one.body)))
    assert plan.path == "point" and plan.runtime_indexed


def test_zipmap_is_refused_with_the_converter_option(tmp_path):
    proto = with_rows(convert(fitted(LogisticRegression(), y=LABELS2), zipmap=True), 1)
    with pytest.raises(ModelError, match=r"ZipMap.*'zipmap': False"):
        _generate(tmp_path, proto)


def test_gaussian_process_scan_unrolls_and_verifies(tmp_path):
    """skl2onnx's Gaussian process (a Scan over the training points, unrolled: its trip count is the
    training set's size) verifies in float64 against onnxruntime. In float32 the exported form is
    ill-conditioned (squared distances as |x|^2 + |y|^2 - 2 x.y cancel): onnxruntime's own float32
    result is 2-4 times verify's float32 tolerance away from the exact prediction, so the float32
    build is judged against the exact one instead: its error no more than onnxruntime's."""
    from sklearn.gaussian_process import GaussianProcessRegressor

    from rosenna.cli import main

    gp = fitted(GaussianProcessRegressor(), x=X_TRAIN[:20], y=Y_TRAIN[:20])
    path = tmp_path / "gp_float64.onnx"
    onnx.save(with_rows(convert(gp, dtype=np.float64), 1), str(path))
    assert main(["verify", str(path), "--lang", "c", "--entry", "infer", "--cases", "16"]) == 0

    proto = with_rows(convert(gp, dtype=np.float32), 1)
    path = tmp_path / "gp_float32.onnx"
    onnx.save(proto, str(path))
    x = np.random.default_rng(7).normal(size=(64, FEATURES)).astype(np.float32)
    exact = gp.predict(x.astype(np.float64))
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = np.array([session.run(None, {session.get_inputs()[0].name: row[None]})[0].ravel()[0] for row in x])
    ours = _batch_outputs(path, tmp_path / "gp32", x)[:, 0]
    worst = np.abs(theirs - exact).max()
    assert worst > 0 and np.abs(ours - exact).max() <= 1.5 * worst, (np.abs(ours - exact).max(), worst)


def _batch_outputs(path, folder, x):
    """The generated C library's ``<name>_infer_batch`` and ``<name>_infer`` on ``x`` (float32, one
    row per point), checked equal to each other, as float64."""
    from rosenna.generate import Options, generate

    plan, _ = generate(str(path), str(folder), Options(lang="c"))
    n = plan.name
    (folder / "run.c").write_text(f"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "{n}.h"
int main(int argc, char **argv)
{{
    const int count = atoi(argv[1]);
    float *x = malloc(sizeof(float) * count * {plan.nx}), *y = malloc(sizeof(float) * count * {plan.ny});
    float *z = malloc(sizeof(float) * count * {plan.ny});
    if (fread(x, sizeof(float) * {plan.nx}, count, stdin) != (size_t)count || {n}_infer_batch(count, x, y, NULL) != 0)
        return 1;
    for (int i = 0; i < count; ++i)
        {n}_infer(x + (long)i * {plan.nx}, z + (long)i * {plan.ny});
    if (memcmp(y, z, sizeof(float) * count * {plan.ny}) != 0)
        return 2;
    fwrite(y, sizeof(float) * {plan.ny}, count, stdout);
    return 0;
}}
""")
    exe = folder / "run"
    subprocess.run(["gcc", "-O2", "-I", str(folder), str(folder / "run.c"), str(folder / f"{n}.c"), "-o", str(exe),
                    "-lm"], check=True)
    out = subprocess.run([str(exe), str(len(x))], input=x.tobytes(), capture_output=True, check=True).stdout
    return np.frombuffer(out, np.float32).reshape(len(x), plan.ny).astype(np.float64)


def test_shape_inference_rejection_names_the_node_and_what_to_try(tmp_path):
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="dense 1")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
                              [numpy_helper.from_array(np.zeros((4, 2), np.float32), "w")])
    with pytest.raises(ModelError, match=r"shape inference rejects the model at node 'dense 1' \(MatMul\).*"
                                         r"another opset.*target_opset"):
        _generate(tmp_path, helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


@pytest.mark.parametrize("change, reason", [
    ({"nodes_modes": ["BRANCH_EQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF"]},
     "mix BRANCH_EQ"),
    ({"nodes_truenodeids": [1, 7, 0, 0, 0, 1, 0, 0, 0]}, "links to node 7, which the tree lacks"),
    ({"nodes_truenodeids": [4, 2, 0, 0, 0, 1, 0, 0, 0]}, "tree 0 has 2 roots"),
    ({"post_transform": "LOGISTIC"}, "computes NONE and PROBIT"),
    ({"nodes_featureids": [0, 5, 0, 0, 0, 2, 0, 0, 0]}, "tests feature 5 of 3"),
])
def test_malformed_or_unsupported_ensembles_are_refused(tmp_path, change, reason):
    proto, _ = _tree_node(["BRANCH_LEQ"] * 3)
    node = proto.graph.node[0]
    for key, value in change.items():
        for attr in list(node.attribute):
            if attr.name == key:
                node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute(key, value))
    with pytest.raises(ModelError, match=reason):
        _generate(tmp_path, proto)
