"""Tree ensembles read into one layout: a node table with global child links.

``legacy_forest`` reads TreeEnsembleRegressor / TreeEnsembleClassifier attributes (ai.onnx.ml
opsets 1 and 3), ``forest_5`` those of TreeEnsemble (opset 5); both give a :class:`Forest`, checked
(every child present, one root per tree, no cycle) and with every node in one comparison form
(rosenna.ops.ml_trees describes the layout and the forms).
"""

from dataclasses import dataclass

import numpy as np

from rosenna.ops.base import onnx_ints
from rosenna.ops.ml_preprocess import floats

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
        raise TreeError("BRANCH_MEMBER (set membership) nodes are read by TreeEnsemble (ai.onnx.ml opset 5) "
                        "only, with their membership_values")
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
    rows = _Rows(features + [0] * leaves, names, list(splits) + [0.0] * leaves, list(true), list(false),
                 list(tracks) + [0] * leaves)
    nan_links = _expand_members(rows, floats(node, "membership_values"), dtype)
    extra = len(rows.names) - total
    leaf = np.concatenate([leaf, np.zeros(extra, bool)])
    weights, has = np.vstack([weights, np.zeros((extra, targets))]), np.vstack([has, np.zeros((extra, targets), bool)])
    cmp, thr, t, f, nan = _normalize(rows.names, rows.thresholds, np.asarray(rows.true), np.asarray(rows.false),
                                     rows.tracks, dtype)
    for row, link in nan_links.items():
        nan[row] = link
    roots = onnx_ints(node.attrs.get("tree_roots", []))
    if not roots or any(not 0 <= r < count for r in roots):
        raise TreeError(f"tree_roots must index the {count} nodes")
    # a one-leaf tree is a node whose branches name the same leaf
    return Forest(np.array(rows.features), np.where(leaf, 0.0, thr), t, f, nan, weights, has, leaf, roots,
                  cmp, _depth(t, f, leaf, roots))


@dataclass
class _Rows:
    """The node rows of a TreeEnsemble as lists, while BRANCH_MEMBER nodes are expanded."""
    features: list
    names: list
    thresholds: list
    true: list
    false: list
    tracks: list

    def add(self, feature, name, threshold, true, false):
        self.features.append(feature)
        self.names.append(name)
        self.thresholds.append(threshold)
        self.true.append(true)
        self.false.append(false)
        self.tracks.append(0)
        return len(self.names) - 1


def _expand_members(rows, members, dtype):
    """Each BRANCH_MEMBER node, x in {s1 < s2 < ...}, rewritten as a chain of two ``<=`` tests per
    member: x <= s1 (else the next member's test), then x < s1 (x == s1: the true branch; else the
    false branch, the smaller members were passed). Its own row becomes the first test; the others
    are appended. The sets are ``membership_values`` cut at each NaN, in node order (ONNX's rule).
    Returns ``{row: link}`` of the rows whose NaN link is not the one ``tracks`` gives."""
    member_rows = [i for i, name in enumerate(rows.names) if name == "BRANCH_MEMBER"]
    if not member_rows:
        return {}
    values = np.asarray([] if members is None else members, np.float64)
    cuts = np.flatnonzero(np.isnan(values))
    if len(cuts) != len(member_rows):
        raise TreeError(f"{len(member_rows)} BRANCH_MEMBER nodes and {len(cuts)} sets in membership_values "
                        "(each set ends with a NaN)")
    nan_links, start = {}, 0
    for row, cut in zip(member_rows, cuts):
        members = sorted(set(np.asarray(values[start:cut], dtype).astype(np.float64).tolist()))
        start = cut + 1
        feature, true, false = rows.features[row], rows.true[row], rows.false[row]
        nan_link = true if rows.tracks[row] else false
        if not members:  # an empty set: always the false branch
            rows.names[row], rows.thresholds[row], rows.true[row], rows.tracks[row] = "BRANCH_LEQ", 0.0, false, 0
            nan_links[row] = nan_link
            continue
        following = false
        for k in range(len(members) - 1, -1, -1):
            equal = rows.add(feature, "BRANCH_LT", members[k], false, true)  # x < s: not s
            if k == 0:
                rows.names[row], rows.thresholds[row] = "BRANCH_LEQ", members[k]
                rows.true[row], rows.false[row], rows.tracks[row] = equal, following, 0
                test = row
            else:
                test = rows.add(feature, "BRANCH_LEQ", members[k], equal, following)
            nan_links[test] = nan_links[equal] = nan_link
            following = test
    return nan_links
