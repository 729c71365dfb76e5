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
fourth link, taken when the feature is NaN.

Refused, with the reason: BRANCH_MEMBER, BRANCH_EQ or BRANCH_NEQ mixed with other modes, PROBIT,
string class labels, MIN or MAX where a leaf lacks a target, malformed trees (a missing child,
a cycle, a tree without exactly one root).
"""

from dataclasses import dataclass

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import onnx_ints
from rosenna.ops.ml_linear import MlOp, add_table, argmax_label, class_labels, floats, post_transform, \
    rows_and_features, table

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
TRANSFORMS_5 = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


class TreeError(ValueError):
    """A tree ensemble rosenna cannot lower; the message is the reason."""


@dataclass
class Forest:
    """The ensemble in rosenna's layout (see the module docstring); rows are global node numbers."""
    feature: np.ndarray
    threshold: np.ndarray
    true: np.ndarray
    false: np.ndarray
    nan: np.ndarray  # where a NaN feature goes
    values: np.ndarray  # [rows, targets] leaf values (0 in split nodes)
    has: np.ndarray  # [rows, targets] whether the leaf carries a value of the target
    leaf: np.ndarray
    roots: list
    cmp: str
    depth: int

    def needs_nan_link(self):
        plain = np.where(self.leaf, np.arange(len(self.leaf)), self.false if self.cmp != "!=" else self.true)
        return bool(np.any(self.nan != plain))

    def table(self):
        """``[rows, 4 (+1) + targets]``: feature, threshold, true, false, (nan,) values."""
        cols = [self.feature, self.threshold, self.true, self.false]
        if self.needs_nan_link():
            cols.append(self.nan)
        return np.column_stack([np.asarray(c, np.float64) for c in cols] + [self.values])


def _normalize(modes, thresholds, true, false, tracks, dtype):
    """One comparison form for every node (module docstring): ``(cmp, threshold, true, false, nan)``."""
    modes = list(modes)
    kinds = set(m for m in modes if m != "LEAF")
    if "BRANCH_MEMBER" in kinds:
        raise TreeError("BRANCH_MEMBER (set membership) nodes are not supported; export the model with "
                        "numeric splits")
    unknown = kinds - set(MODES)
    if unknown:
        raise TreeError(f"unknown node mode {sorted(unknown)[0]!r}")
    if kinds & {"BRANCH_EQ", "BRANCH_NEQ"} and len(kinds) > 1:
        raise TreeError(f"node modes {sorted(kinds)} mix BRANCH_EQ or BRANCH_NEQ with others")
    cmp = {"BRANCH_EQ": "==", "BRANCH_NEQ": "!="}.get(next(iter(kinds)) if len(kinds) == 1 else "", "<=")
    thr = np.asarray(thresholds, dtype=dtype).copy()
    t, f = np.asarray(true).copy(), np.asarray(false).copy()
    nan_dest = np.where(np.asarray(tracks, bool) | np.array([m == "BRANCH_NEQ" for m in modes]), t, f)
    lower = np.nextafter(thr, np.array(-np.inf, dtype))
    for i, mode in enumerate(modes):
        if mode in ("BRANCH_LT", "BRANCH_GTE"):
            thr[i] = lower[i]
        if mode in ("BRANCH_GT", "BRANCH_GTE"):
            t[i], f[i] = f[i], t[i]
    return cmp, thr.astype(np.float64), t, f, nan_dest


def _depth(true, false, leaf, roots):
    """The number of steps of the deepest root-to-leaf path; TreeError on a cycle."""
    count = len(leaf)
    depth = 0
    for root in roots:
        level, frontier = 0, [root]
        while True:
            frontier = [c for n in frontier if not leaf[n] for c in (true[n], false[n])]
            if not frontier:
                break
            level += 1
            if level > count:
                raise TreeError("a tree has a cycle")
        depth = max(depth, level)
    return depth


def legacy_forest(node, prefix, targets, dtype):
    """The Forest of a TreeEnsembleRegressor (``prefix`` "target") or TreeEnsembleClassifier ("class")."""
    trees = onnx_ints(node.attrs.get("nodes_treeids", []))
    ids = onnx_ints(node.attrs.get("nodes_nodeids", []))
    count = len(trees)
    if not count:
        raise TreeError("the ensemble has no nodes")
    features = onnx_ints(node.attrs.get("nodes_featureids", [0] * count))
    modes = list(node.attrs.get("nodes_modes", []))
    values = floats(node, "nodes_values")
    values = np.zeros(count) if values is None else values
    tn = onnx_ints(node.attrs.get("nodes_truenodeids", [0] * count))
    fn = onnx_ints(node.attrs.get("nodes_falsenodeids", [0] * count))
    tracks = onnx_ints(node.attrs.get("nodes_missing_value_tracks_true") or [0] * count)
    if not all(len(a) == count for a in (ids, features, modes, values, tn, fn, tracks)):
        raise TreeError("the nodes_* attributes have different lengths")
    row = {}
    for i, key in enumerate(zip(trees, ids)):
        if key in row:
            raise TreeError(f"tree {key[0]} has two nodes numbered {key[1]}")
        row[key] = i
    leaf = np.array([m == "LEAF" for m in modes])
    true, false = np.arange(count), np.arange(count)
    for i in range(count):
        if leaf[i]:
            continue
        for links, child in ((true, tn[i]), (false, fn[i])):
            if (trees[i], child) not in row:
                raise TreeError(f"node {ids[i]} of tree {trees[i]} links to node {child}, which the tree lacks")
            links[i] = row[(trees[i], child)]
    children = set(true[~leaf]) | set(false[~leaf])
    roots = []
    for tree in dict.fromkeys(trees):
        tops = [i for i in range(count) if trees[i] == tree and i not in children]
        if len(tops) != 1:
            raise TreeError(f"tree {tree} has {len(tops)} roots")
        roots.append(tops[0])
    weights = np.zeros((count, targets))
    has = np.zeros((count, targets), bool)
    w_trees = onnx_ints(node.attrs.get(f"{prefix}_treeids", []))
    w_nodes = onnx_ints(node.attrs.get(f"{prefix}_nodeids", []))
    w_ids = onnx_ints(node.attrs.get(f"{prefix}_ids", []))
    w_values = floats(node, f"{prefix}_weights")
    w_values = np.zeros(0) if w_values is None else w_values
    if not len(w_trees) == len(w_nodes) == len(w_ids) == len(w_values):
        raise TreeError(f"the {prefix}_* attributes have different lengths")
    for tree, nid, target, value in zip(w_trees, w_nodes, w_ids, w_values):
        if (tree, nid) not in row or not 0 <= target < targets:
            raise TreeError(f"a {prefix} weight names node {nid} of tree {tree}, target {target}, which do not exist")
        weights[row[(tree, nid)], target] += value
        has[row[(tree, nid)], target] = True
    cmp, thr, t, f, nan = _normalize(["LEAF" if leaf[i] else modes[i] for i in range(count)], values, true, false,
                                     tracks, dtype)
    t, f, nan = (np.where(leaf, np.arange(count), a) for a in (t, f, nan))
    return Forest(np.where(leaf, 0, features), np.where(leaf, 0.0, thr), t, f, nan, weights, has, leaf, roots, cmp,
                  _depth(t, f, leaf, roots))


def forest_5(node, dtype):
    """The Forest of a TreeEnsemble (ai.onnx.ml opset 5): split rows first, then one row per leaf."""
    features = onnx_ints(node.attrs.get("nodes_featureids", []))
    count = len(features)
    leaf_targets = onnx_ints(node.attrs.get("leaf_targetids", []))
    leaf_weights = floats(node, "leaf_weights")
    leaves = len(leaf_targets)
    targets = int(node.attrs.get("n_targets", 1))
    if leaf_weights is None or leaf_weights.size != leaves:
        raise TreeError("leaf_targetids and leaf_weights have different lengths")
    modes = onnx_ints(node.attrs.get("nodes_modes", np.zeros(count)))
    splits = floats(node, "nodes_splits")
    tn, fn = onnx_ints(node.attrs.get("nodes_truenodeids", [])), onnx_ints(node.attrs.get("nodes_falsenodeids", []))
    tl, fl = onnx_ints(node.attrs.get("nodes_trueleafs", [])), onnx_ints(node.attrs.get("nodes_falseleafs", []))
    tracks = onnx_ints(node.attrs.get("nodes_missing_value_tracks_true") or [0] * count)
    if splits is None or not all(len(a) == count for a in (modes, splits, tn, fn, tl, fl, tracks)):
        raise TreeError("the nodes_* attributes have different lengths")
    total = count + leaves

    def link(index, is_leaf):
        bound = leaves if is_leaf else count
        if not 0 <= index < bound:
            raise TreeError(f"a node links to {'leaf' if is_leaf else 'node'} {index}, outside [0, {bound})")
        return count + index if is_leaf else index

    true = np.array([link(i, l) for i, l in zip(tn, tl)] + list(range(count, total)), dtype=np.int64)
    false = np.array([link(i, l) for i, l in zip(fn, fl)] + list(range(count, total)), dtype=np.int64)
    leaf = np.arange(total) >= count
    weights = np.zeros((total, targets))
    has = np.zeros((total, targets), bool)
    for j, (target, value) in enumerate(zip(leaf_targets, leaf_weights)):
        if not 0 <= target < targets:
            raise TreeError(f"leaf {j} names target {target}, outside [0, {targets})")
        weights[count + j, target] += value
        has[count + j, target] = True
    names = [MODES[m] if 0 <= m < len(MODES) else str(m) for m in modes] + ["LEAF"] * leaves
    cmp, thr, t, f, nan = _normalize(names, list(splits) + [0.0] * leaves, true, false,
                                     list(tracks) + [0] * leaves, dtype)
    roots = onnx_ints(node.attrs.get("tree_roots", []))
    if not roots or any(not 0 <= r < count for r in roots):
        raise TreeError(f"tree_roots must index the {count} nodes")
    # a one-leaf tree is a node whose branches name the same leaf
    return Forest(np.array(features + [0] * leaves), np.where(leaf, 0.0, thr), t, f, nan, weights, has, leaf, roots,
                  cmp, _depth(t, f, leaf, roots))


def lower_forest(b, node, graph, forest, rows, features, scores, aggregate):
    """Walk every tree for each row and aggregate its leaf values into ``scores(r, k)`` (Refs)."""
    x = node.inputs[0]
    nodes = table(node, "nodes")
    roots = table(node, "roots")
    width = forest.table().shape[1]
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
                go = Select(v, field(1), field(2), field(3), forest.cmp if forest.cmp != "<=" else "<=")
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
