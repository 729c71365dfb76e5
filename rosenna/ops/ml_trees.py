"""ai.onnx.ml tree ensembles: a node table walked a constant number of steps.

TreeEnsembleRegressor, TreeEnsembleClassifier (opsets 1 and 3) and TreeEnsemble (opset 5), as
skl2onnx, onnxmltools (XGBoost, LightGBM) and hummingbird emit them for random forests and gradient
boosting.

    score[n, k] = aggregate over trees t of leaf_t(X[n])[k]  (+ base_values[k])

SUM adds the leaves, AVERAGE divides the sum by the number of trees, MIN and MAX keep the extreme
leaf. A classifier then applies its post_transform (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO) and
labels each row with the class of the largest score, as onnxruntime does.

Layout: every node of every tree is a row of one table, ``[feature, threshold, true, false,
(nan,) leaf values...]``, with child links as global row numbers; a leaf links to itself. Each tree
is walked from its root for exactly ``depth`` steps (the deepest path of the ensemble), so the loop
has a constant extent, no recursion and no branch: a step is one compare and one select of the next
row, and a walk that reached its leaf early stays there. The leaf's values are then added (or
compared) into the scores.

Every node is put in one comparison form: ``<=`` (BRANCH_LEQ; BRANCH_LT as ``<=`` the next smaller
value of the working type; BRANCH_GT and BRANCH_GTE as the same with the branches swapped), or
``==`` / ``!=`` when every node is BRANCH_EQ / BRANCH_NEQ. Where a NaN feature must go elsewhere
than that form sends it (``nodes_missing_value_tracks_true``, a swapped node), the row holds a
fourth link, taken when the feature is NaN. A BRANCH_MEMBER node (TreeEnsemble: the feature in a
set of values) becomes a chain of ``<=`` nodes, two per member (rosenna.ops.ml_forest).

Refused, with the reason: BRANCH_EQ or BRANCH_NEQ mixed with other modes (BRANCH_MEMBER included), PROBIT,
string class labels, MIN or MAX where a leaf lacks a target, malformed trees (a missing child,
a cycle, a tree without exactly one root).
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.ml_forest import AGGREGATES, TRANSFORMS_5, TreeError, forest_5, legacy_forest
from rosenna.ops.ml_linear import argmax_label, class_labels, post_transform
from rosenna.ops.ml_preprocess import MlOp, add_table, floats, rows_and_features, table

def lower_forest(b, node, graph, forest, rows, features, scores, aggregate):
    """Walk every tree for each row and aggregate its leaf values into ``scores(r, k)`` (Refs)."""
    x = node.inputs[0]
    nodes = table(node, "nodes")
    roots = table(node, "roots")
    width = graph.weights[nodes].shape[1]
    base = 5 if forest.needs_nan_link() else 4
    targets = forest.values.shape[1]
    n, v = Var("node"), Var("v")
    start = {"SUM": 0.0, "AVERAGE": 0.0, "MIN": float("inf"), "MAX": float("-inf")}[aggregate]

    def field(column):
        return Ref(nodes, Idx(const=column), at=Bin("*", n, Num(float(width))))

    def row(r):
        for k in range(targets):
            b.assign(scores(r, k), Num(start))

        def tree(t):
            b.assign(n, Ref(roots, Idx.of(t)))

            def step(_):
                b.assign(v, Ref(x, flat_index([r], (rows,)) * features, at=field(0)))
                go = Select(v, field(1), field(2), field(3), forest.cmp)
                if base == 5:
                    go = Select(v, v, go, field(4), "==")  # NaN: the nan link
                b.assign(n, go)

            b.loop(forest.depth, step)
            for k in range(targets):
                value = field(base + k)
                if aggregate in ("SUM", "AVERAGE"):
                    b.assign(scores(r, k), value, accumulate=True)
                else:
                    s = scores(r, k)
                    b.assign(s, Select(value, s, value, s, "<" if aggregate == "MIN" else ">"))

        b.loop(len(forest.roots), tree)

    b.loop(rows, row)


class _Trees(MlOp):
    """What the three tree ops share: the forest built once per node, its tables, the walk."""

    def forest(self, node, graph):
        cache = node.attrs.get("_forest")
        if cache is None:
            cache = self.build(node, graph)
            node.attrs["_forest"] = cache
        return cache

    def tree_reasons(self, node, graph):
        try:
            forest = self.forest(node, graph)
        except TreeError as exc:
            return [str(exc)]
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        if forest.feature.size and forest.feature.max() >= features:
            return [f"a node tests feature {int(forest.feature.max())} of {features}"]
        if forest.feature.size and forest.feature.min() < 0:
            return ["a node tests a negative feature id"]
        return []

    def canonicalize(self, node, graph):
        forest = self.forest(node, graph)
        add_table(node, graph, "nodes", forest.table())
        add_table(node, graph, "roots", np.asarray(forest.roots, np.float64))


def _aggregate_reasons(forest, aggregate):
    if aggregate not in AGGREGATES:
        return [f"aggregate_function {aggregate!r} is not one of {', '.join(AGGREGATES)}"]
    if aggregate in ("MIN", "MAX") and not forest.has[forest.leaf].all():
        return [f"aggregate_function {aggregate} with a leaf that has no value for some target"]
    return []


def _finish_regression(b, forest, rows, scores, aggregate, base_values):
    targets = forest.values.shape[1]
    trees = len(forest.roots)

    def row(r):
        for k in range(targets):
            s = scores(r, k)
            if aggregate == "AVERAGE" and trees > 1:
                b.assign(s, Bin("/", s, Num(float(trees))))
            if base_values is not None and base_values[k] != 0.0:
                b.assign(s, Num(float(base_values[k])), accumulate=True)

    b.loop(rows, row)


def _base_values(node, targets):
    base = floats(node, "base_values")
    if base is None or base.size == 0:
        return None
    if base.size == 1 and targets == 1:
        return base
    return base if base.size == targets else None


class TreeEnsembleRegressor(_Trees):
    name = "TreeEnsembleRegressor"
    attributes = {"aggregate_function": "SUM", "n_targets": 1, "post_transform": "NONE"}

    def build(self, node, graph):
        return legacy_forest(node, "target", int(self.attr(node, "n_targets")), graph.dtype)

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows, int(self.attr(node, "n_targets")))]

    def check(self, node, graph):
        reasons = self.tree_reasons(node, graph)
        if reasons:
            return reasons
        if self.attr(node, "post_transform") != "NONE":
            reasons.append(f"post_transform {self.attr(node, 'post_transform')} (rosenna computes NONE only)")
        targets = int(self.attr(node, "n_targets"))
        base = floats(node, "base_values")
        if base is not None and base.size not in (0, targets):
            reasons.append(f"{base.size} base_values for {targets} targets")
        return reasons + _aggregate_reasons(self.forest(node, graph), self.attr(node, "aggregate_function"))

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        forest = self.forest(node, graph)
        targets = forest.values.shape[1]
        y = node.outputs[0]

        def scores(r, k):
            return Ref(y, flat_index([r, k], (rows, targets)))

        aggregate = self.attr(node, "aggregate_function")
        lower_forest(b, node, graph, forest, rows, features, scores, aggregate)
        _finish_regression(b, forest, rows, scores, aggregate, _base_values(node, targets))


class TreeEnsemble(_Trees):
    name = "TreeEnsemble"
    attributes = {"aggregate_function": 1, "n_targets": 1, "post_transform": 0}

    def build(self, node, graph):
        return forest_5(node, graph.dtype)

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows, int(self.attr(node, "n_targets")))]

    def _aggregate(self, node):
        index = int(self.attr(node, "aggregate_function"))
        return AGGREGATES[index] if 0 <= index < len(AGGREGATES) else str(index)

    def _transform(self, node):
        index = int(self.attr(node, "post_transform"))
        return TRANSFORMS_5[index] if 0 <= index < len(TRANSFORMS_5) else str(index)

    def check(self, node, graph):
        reasons = self.tree_reasons(node, graph)
        if reasons:
            return reasons
        if self._transform(node) not in ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"):
            reasons.append(f"post_transform {self._transform(node)} (rosenna computes NONE, SOFTMAX, LOGISTIC "
                           "and SOFTMAX_ZERO)")
        return reasons + _aggregate_reasons(self.forest(node, graph), self._aggregate(node))

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        forest = self.forest(node, graph)
        targets = forest.values.shape[1]
        y = node.outputs[0]

        def scores(r, k):
            return Ref(y, flat_index([r, k], (rows, targets)))

        aggregate = self._aggregate(node)
        lower_forest(b, node, graph, forest, rows, features, scores, aggregate)
        _finish_regression(b, forest, rows, scores, aggregate, None)
        kind = self._transform(node)
        if kind != "NONE":
            b.loop(rows, lambda r: post_transform(b, kind, [scores(r, k) for k in range(targets)], targets))


class TreeEnsembleClassifier(_Trees):
    name = "TreeEnsembleClassifier"
    attributes = {"post_transform": "NONE"}

    def _classes(self, node):
        return class_labels(node) or []

    def build(self, node, graph):
        return legacy_forest(node, "class", max(len(self._classes(node)), 1), graph.dtype)

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows,), (rows, len(self._classes(node)))]

    def _binary_form(self, node, graph):
        """onnxruntime's two-class form that rosenna follows, or None: the leaves score one class
        id only (skl2onnx's forests and gradient boosting), a score s (plus one base value).
        "probability" (no weight negative): label 1 when s > 0.5, scores (1 - s, s);
        "margin" (some weight negative): label 1 when s > 0, scores (-s, s), or
        (logistic(-s), logistic(s)) after LOGISTIC."""
        forest = self.forest(node, graph)
        scored = forest.has[forest.leaf].any(axis=0)
        base = floats(node, "base_values")
        kind = self.attr(node, "post_transform")
        if scored.sum() != 1 or (base is not None and base.size > 1):
            return None
        if (forest.values[forest.has] >= 0).all():
            return "probability" if kind == "NONE" else None
        return "margin" if kind in ("NONE", "LOGISTIC") else None

    def check(self, node, graph):
        reasons = self.tree_reasons(node, graph)
        if reasons:
            return reasons
        classes = self._classes(node)
        if class_labels(node) is None:
            return ["string class labels (rosenna produces numbers; convert the classifier with integer labels)"]
        if self.attr(node, "post_transform") not in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
            reasons.append(f"post_transform {self.attr(node, 'post_transform')} (rosenna computes NONE, LOGISTIC, "
                           "SOFTMAX and SOFTMAX_ZERO)")
        base = floats(node, "base_values")
        if len(classes) == 2 and self._binary_form(node, graph) is None:
            reasons.append("a two-class ensemble whose leaves score both classes, or with two base_values, or a "
                           "post_transform other than NONE or LOGISTIC: onnxruntime's outputs of these forms "
                           "are not modelled by rosenna; convert the classifier with skl2onnx or onnxmltools")
        elif len(classes) > 2 and base is not None and base.size not in (0, len(classes)):
            reasons.append(f"{base.size} base_values for {len(classes)} classes")
        if len(classes) < 2:
            reasons.append("fewer than two classes")
        return reasons

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        forest = self.forest(node, graph)
        classes = self._classes(node)
        count = len(classes)
        label_out, z = node.outputs[0], node.outputs[1] if len(node.outputs) > 1 and node.outputs[1] else ""
        kind = self.attr(node, "post_transform")
        held = [Var(f"s{k}") for k in range(count)] if not z else None

        def scores(r, k):
            return Ref(z, flat_index([r, k], (rows, count))) if z else held[k]

        lower_forest(b, node, graph, forest, rows, features, scores, "SUM")
        base = floats(node, "base_values")
        form = self._binary_form(node, graph) if count == 2 else None
        column = int(np.flatnonzero(forest.has[forest.leaf].any(axis=0))[0]) if form else 0

        def row(r):
            s = [scores(r, k) for k in range(count)]
            if form:
                score = Var("score")
                b.assign(score, s[column])
                if base is not None and base.size:
                    b.assign(score, Num(float(base[0])), accumulate=True)
                cut = 0.5 if form == "probability" else 0.0
                if label_out:
                    b.assign(Ref(label_out, flat_index([r], (rows,))),
                             Select(score, Num(cut), Num(float(classes[1])), Num(float(classes[0]))))
                if form == "probability":
                    b.assign(s[1], score)
                    b.assign(s[0], Bin("-", Num(1.0), score))
                elif kind == "LOGISTIC":
                    b.assign(s[1], Fn("sigmoid", (score,)))
                    b.assign(s[0], Fn("sigmoid", (Bin("-", Num(0.0), score),)))
                else:
                    b.assign(s[1], score)
                    b.assign(s[0], Bin("-", Num(0.0), score))
                return
            if base is not None and base.size:
                for k in range(count):
                    b.assign(s[k], Num(float(base[k])), accumulate=True)
            if label_out:
                argmax_label(b, s, classes, Ref(label_out, flat_index([r], (rows,))))
            post_transform(b, kind, s, count)

        b.loop(rows, row)
