"""ai.onnx.ml linear models and support vector regression (skl2onnx, onnxmltools).

X is ``[N, C]`` (or ``[C]``: one row); every row is computed alike.

LinearRegressor:     Y[n, t] = sum_c X[n, c] coefficients[t, c] + intercepts[t]
LinearClassifier:    Z[n, e] = sum_c X[n, c] coefficients[e, c] + intercepts[e], then
                     post_transform (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO); Y[n] the label of the
                     first largest score. One score row and two labels is the binary case, as
                     onnxruntime writes it: Z = (1 - s, s) after LOGISTIC, (-s, s) otherwise, and
                     Y = the second label when s > 0.
SVMRegressor:        Y[n] = sum_i coefficients[i] K(X[n], SV[i]) + rho, K linear, poly
                     ((gamma x.v + coef0)^degree), rbf (exp(-gamma |x - v|^2)) or sigmoid
                     (tanh(gamma x.v + coef0)); without support vectors, the linear form
                     sum_c coefficients[c] X[n, c] + rho; ``one_class``: 1 or -1 by the sign.

The coefficients and support vectors become weights of the model. Deviations: sums run left to
right in the working precision (onnxruntime calls a GEMM); PROBIT post-transforms and string class
labels are refused.
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.ml_preprocess import MlOp, add_table, floats, rows_and_features, table
from rosenna.ops.base import onnx_ints


def _linear_rows(b, x, rows, features, coef, intercept, targets, store):
    """``store(r, t, value)`` for every score sum_c X[r, c] coef[t, c] + intercept[t]."""
    acc = Var("acc")

    def body(idx):
        r, t = idx
        b.assign(acc, Ref(intercept, Idx.of(t)))
        b.loop(features, lambda c: b.assign(acc, Bin("*", Ref(x, flat_index([r, c], (rows, features))),
                                                     Ref(coef, flat_index([t, c], (targets, features)))),
                                            accumulate=True))
        store(r, t, acc)

    b.nest((rows, targets), body)


class LinearRegressor(MlOp):
    name = "LinearRegressor"
    attributes = {"coefficients": None, "intercepts": None, "targets": 1, "post_transform": "NONE"}

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows, int(self.attr(node, "targets")))]

    def check(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        targets = int(self.attr(node, "targets"))
        coef = floats(node, "coefficients")
        reasons = []
        if self.attr(node, "post_transform") != "NONE":
            reasons.append(f"post_transform {self.attr(node, 'post_transform')} (rosenna computes NONE only)")
        if coef is None or coef.size != targets * features:
            reasons.append(f"coefficients must hold targets x features = {targets * features} values")
        intercepts = floats(node, "intercepts")
        if intercepts is not None and intercepts.size not in (targets,):
            reasons.append(f"intercepts must hold one value per target ({targets})")
        return reasons

    def canonicalize(self, node, graph):
        targets = int(self.attr(node, "targets"))
        add_table(node, graph, "coefficients", floats(node, "coefficients"))
        intercepts = floats(node, "intercepts")
        add_table(node, graph, "intercepts", np.zeros(targets) if intercepts is None else intercepts)

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        targets = int(self.attr(node, "targets"))
        y = node.outputs[0]
        _linear_rows(b, node.inputs[0], rows, features, table(node, "coefficients"), table(node, "intercepts"),
                     targets, lambda r, t, v: b.assign(Ref(y, flat_index([r, t], (rows, targets))), v))


def post_transform(b, kind, scores, count):
    """Apply a classifier's post_transform in place to ``count`` scores (Refs), as onnxruntime
    does: LOGISTIC per score, SOFTMAX over them, SOFTMAX_ZERO over the non-zero ones (a score within
    1e-7 of zero stays zero)."""
    if kind == "NONE":
        return
    if kind == "LOGISTIC":
        for s in scores:
            b.assign(s, Fn("sigmoid", (s,)))
        return
    top, total = Var("top"), Var("total")
    b.assign(top, scores[0])
    for s in scores[1:]:
        b.assign(top, Select(s, top, s, top))
    b.assign(total, Num(0.0))
    for s in scores:
        e = Fn("exp", (Bin("-", s, top),))
        if kind == "SOFTMAX_ZERO":
            e = Select(Fn("abs", (s,)), Num(1e-7), e, Num(0.0))
        b.assign(s, e)
        b.assign(total, s, accumulate=True)
    for s in scores:
        b.assign(s, Bin("/", s, total))


def argmax_label(b, scores, labels, target):
    """``target`` = the label of the first largest of ``scores`` (the pre-transform scores)."""
    best, label = Var("best"), Var("label")
    b.assign(best, scores[0])
    b.assign(label, Num(float(labels[0])))
    for s, lab in zip(scores[1:], labels[1:]):
        b.assign(label, Select(s, best, Num(float(lab)), label))
        b.assign(best, Select(s, best, s, best))
    b.assign(target, label)


def class_labels(node):
    """The integer class labels, or None when the classifier labels with strings."""
    if node.attrs.get("classlabels_strings"):
        return None
    for key in ("classlabels_ints", "classlabels_int64s"):
        if node.attrs.get(key) is not None:
            return onnx_ints(node.attrs[key])
    return None


TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO")


class LinearClassifier(MlOp):
    name = "LinearClassifier"
    attributes = {"coefficients": None, "intercepts": None, "multi_class": 0, "post_transform": "NONE",
                  "classlabels_ints": None, "classlabels_strings": None}

    def _rows(self, node):
        intercepts = floats(node, "intercepts")
        return 0 if intercepts is None else intercepts.size

    def _width(self, node):
        labels = class_labels(node) or []
        return 2 if self._rows(node) == 1 and len(labels) == 2 else self._rows(node)

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows,), (rows, self._width(node))]

    def check(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        labels, scores = class_labels(node), self._rows(node)
        reasons = []
        if labels is None:
            reasons.append("string class labels (rosenna produces numbers; convert the classifier with integer "
                           "labels)")
        if self.attr(node, "post_transform") not in TRANSFORMS:
            reasons.append(f"post_transform {self.attr(node, 'post_transform')} (rosenna computes "
                           f"{', '.join(TRANSFORMS)})")
        coef = floats(node, "coefficients")
        if not scores or coef is None or coef.size != scores * features:
            reasons.append(f"coefficients must hold classes x features = {scores * features} values")
        if labels is not None and scores > 1 and len(labels) != scores:
            reasons.append(f"{len(labels)} class labels for {scores} score rows")
        return reasons

    def canonicalize(self, node, graph):
        add_table(node, graph, "coefficients", floats(node, "coefficients"))
        add_table(node, graph, "intercepts", floats(node, "intercepts"))

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        count, width = self._rows(node), self._width(node)
        labels = class_labels(node)
        label_out, z = node.outputs[0], node.outputs[1] if len(node.outputs) > 1 else ""
        kind = self.attr(node, "post_transform")
        scores = [Var(f"s{e}") for e in range(count)]

        def row(r):
            for e in range(count):
                acc = scores[e]
                b.assign(acc, Ref(table(node, "intercepts"), Idx(const=e)))
                b.loop(features, lambda c, e=e, acc=acc: b.assign(
                    acc, Bin("*", Ref(node.inputs[0], flat_index([r, c], (rows, features))),
                             Ref(table(node, "coefficients"), Idx.of(c) + e * features)), accumulate=True))
            if label_out:
                target = Ref(label_out, flat_index([r], (rows,)))
                if count == 1:
                    positive, negative = (labels[1], labels[0]) if len(labels) == 2 else (1, 0)
                    b.assign(target, Select(scores[0], Num(0.0), Num(float(positive)), Num(float(negative))))
                else:
                    argmax_label(b, scores, labels, target)
            if not z:
                return
            out = [Ref(z, flat_index([r, e], (rows, width))) for e in range(width)]
            if count == 1 and width == 2:
                s = scores[0]
                if kind == "LOGISTIC":
                    b.assign(out[1], Fn("sigmoid", (s,)))
                    b.assign(out[0], Bin("-", Num(1.0), out[1]))
                else:
                    post_transform(b, kind, [s], 1)
                    b.assign(out[1], s)
                    b.assign(out[0], Bin("-", Num(0.0), s))
                return
            for e in range(count):
                b.assign(out[e], scores[e])
            post_transform(b, kind, out, count)

        b.loop(rows, row)


class SVMRegressor(MlOp):
    name = "SVMRegressor"
    attributes = {"coefficients": None, "kernel_params": None, "kernel_type": "LINEAR", "n_supports": 0,
                  "one_class": 0, "post_transform": "NONE", "rho": None, "support_vectors": None}

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows, 1)]

    def check(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        supports = int(self.attr(node, "n_supports"))
        coef = floats(node, "coefficients")
        reasons = []
        if self.attr(node, "post_transform") != "NONE":
            reasons.append(f"post_transform {self.attr(node, 'post_transform')} (rosenna computes NONE only)")
        if self.attr(node, "kernel_type") not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
            reasons.append(f"kernel_type {self.attr(node, 'kernel_type')!r} is not LINEAR, POLY, RBF or SIGMOID")
        if supports:
            sv = floats(node, "support_vectors")
            if sv is None or sv.size != supports * features or coef is None or coef.size != supports:
                reasons.append(f"{supports} support vectors need {supports * features} support-vector values "
                               f"and {supports} coefficients")
        elif coef is None or coef.size != features:
            reasons.append(f"without support vectors, coefficients must hold one value per feature ({features})")
        return reasons

    def canonicalize(self, node, graph):
        add_table(node, graph, "coefficients", floats(node, "coefficients"))
        if int(self.attr(node, "n_supports")):
            add_table(node, graph, "support_vectors", floats(node, "support_vectors"))

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        supports = int(self.attr(node, "n_supports"))
        params = list(floats(node, "kernel_params") if floats(node, "kernel_params") is not None else []) + [0.0] * 3
        gamma, coef0, degree = params[:3]
        kernel = self.attr(node, "kernel_type")
        rho = floats(node, "rho")
        rho = float(rho[0]) if rho is not None and rho.size else 0.0
        x, y, coef = node.inputs[0], node.outputs[0], table(node, "coefficients")
        acc, k = Var("acc"), Var("k")

        def feature(r, c):
            return Ref(x, flat_index([r, c], (rows, features)))

        def row(r):
            b.assign(acc, Num(0.0))
            if not supports:
                b.loop(features, lambda c: b.assign(acc, Bin("*", feature(r, c), Ref(coef, Idx.of(c))), accumulate=True))
            else:
                sv = table(node, "support_vectors")

                def vector(i):
                    b.assign(k, Num(0.0))

                    def term(c):
                        v = Ref(sv, Idx.of(i) * features + Idx.of(c))
                        if kernel == "RBF":
                            d = Var("d")
                            b.assign(d, Bin("-", feature(r, c), v))
                            b.assign(k, Bin("*", d, d), accumulate=True)
                        else:
                            b.assign(k, Bin("*", feature(r, c), v), accumulate=True)

                    b.loop(features, term)
                    if kernel == "RBF":
                        b.assign(k, Fn("exp", (Bin("*", Num(-gamma), k),)))
                    elif kernel == "POLY":
                        b.assign(k, Fn("pow", (Bin("+", Bin("*", Num(gamma), k), Num(coef0)), Num(degree))))
                    elif kernel == "SIGMOID":
                        b.assign(k, Fn("tanh", (Bin("+", Bin("*", Num(gamma), k), Num(coef0)),)))
                    b.assign(acc, Bin("*", Ref(coef, Idx.of(i)), k), accumulate=True)

                b.loop(supports, vector)
            b.assign(acc, Num(rho), accumulate=True)
            out = Ref(y, flat_index([r], (rows,)))
            if int(self.attr(node, "one_class")):
                b.assign(out, Select(acc, Num(0.0), Num(1.0), Num(-1.0)))
            else:
                b.assign(out, acc)

        b.loop(rows, row)
