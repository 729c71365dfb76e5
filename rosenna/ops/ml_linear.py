"""ai.onnx.ml preprocessing and linear models (skl2onnx, onnxmltools).

X is ``[N, C]`` (or ``[C]``: one row); every row is computed alike.

Scaler:              Y[n, c] = (X[n, c] - offset[c]) * scale[c]   (one offset or scale: every c)
Normalizer:          Y[n, :] = X[n, :] / m, m = max X[n, :] (MAX), sum |X[n, :]| (L1) or
                     sqrt(sum X[n, :]^2) (L2); a row whose m is 0 is copied
Imputer:             Y = imputed[c] where X == replaced_value (X is NaN when that is NaN), else X
FeatureVectorizer:   Y[n, :] = the inputs' first ``inputdimensions[i]`` columns, side by side
                     (a narrower input is padded with zeros)
ArrayFeatureExtractor: Y[..., k] = X[..., I[k]] (I constant here; run-time I in rosenna.ops.indexing's
                     form: an index outside the last axis gives NaN)
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

The constant tables (coefficients, support vectors, ...) become weights of the model (appended to
the node's inputs by ``canonicalize``). Deviations: sums run left to right in the working
precision (onnxruntime calls a GEMM); PROBIT post-transforms and string class labels are refused.
"""

import numpy as np

from rosenna.loopir import Bin, Fn, Idx, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints

ML_DOMAIN = "ai.onnx.ml"


def rows_and_features(shape):
    """``(rows, features)`` of an ml op's input: ``[C]`` is one row, ``[N, ..., C]`` N*... rows."""
    shape = tuple(shape)
    if not shape:
        return 1, 1
    return int(np.prod(shape[:-1], dtype=np.int64)), int(shape[-1])


def add_table(node, graph, key, array):
    """Make ``array`` a weight of the graph read by ``node`` (appended to its inputs, so dead-code
    elimination keeps it); its name is recorded in ``node.attrs['_tables'][key]``."""
    tables = node.attrs.setdefault("_tables", {})
    if key in tables:
        return tables[key]
    name = graph.new_name(f"{node.name}_{key}")
    graph.weights[name] = np.ascontiguousarray(array, dtype=np.float64)
    node.inputs.append(name)
    tables[key] = name
    return name


def table(node, key):
    return node.attrs["_tables"][key]


def floats(node, key):
    """A float-list attribute, or its ``*_as_tensor`` form, as a float64 array (None if absent)."""
    for name in (key, key + "_as_tensor"):
        value = node.attrs.get(name)
        if value is not None:
            return np.asarray(value, dtype=np.float64).reshape(-1)
    return None


class MlOp(Op):
    """An op of the ai.onnx.ml domain."""
    domain = ML_DOMAIN


class Scaler(MlOp):
    name = "Scaler"
    attributes = {"offset": None, "scale": None}

    def check(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        for key in ("offset", "scale"):
            values = node.attrs.get(key)
            if values is not None and len(values) not in (1, features):
                return [f"{key} has {len(values)} values for {features} features"]
        return []

    def canonicalize(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        for key, default in (("offset", 0.0), ("scale", 1.0)):
            values = np.asarray(node.attrs.get(key) or [default], dtype=np.float64)
            add_table(node, graph, key, np.broadcast_to(values, (features,)))

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        x, y = node.inputs[0], node.outputs[0]
        offset, scale = table(node, "offset"), table(node, "scale")

        def body(idx):
            r, c = idx
            at = flat_index([r, c], (rows, features))
            b.assign(Ref(y, at), Bin("*", Bin("-", Ref(x, at), Ref(offset, Idx.of(c))), Ref(scale, Idx.of(c))))

        b.nest((rows, features), body)


class Normalizer(MlOp):
    name = "Normalizer"
    attributes = {"norm": "MAX"}

    def check(self, node, graph):
        if self.attr(node, "norm") not in ("MAX", "L1", "L2"):
            return [f"norm {self.attr(node, 'norm')!r} is not MAX, L1 or L2"]
        return []

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        x, y, norm = node.inputs[0], node.outputs[0], self.attr(node, "norm")
        acc = Var("acc")

        def row(r):
            def at(c):
                return flat_index([r, c], (rows, features))

            b.assign(acc, Num(-np.finfo(np.float32).max if norm == "MAX" else 0.0))

            def gather(c):
                v = Ref(x, at(c))
                if norm == "MAX":
                    b.assign(acc, Select(v, acc, v, acc))
                elif norm == "L1":
                    b.assign(acc, Fn("abs", (v,)), accumulate=True)
                else:
                    b.assign(acc, Bin("*", v, v), accumulate=True)

            b.loop(features, gather)
            if norm == "L2":
                b.assign(acc, Fn("sqrt", (acc,)))
            # m == 0: divide by one (the row is copied)
            b.assign(acc, Select(acc, Num(0.0), Num(1.0), acc, "=="))
            b.loop(features, lambda c: b.assign(Ref(y, at(c)), Bin("/", Ref(x, at(c)), acc)))

        b.loop(rows, row)


class Imputer(MlOp):
    name = "Imputer"
    attributes = {"imputed_value_floats": None, "imputed_value_int64s": None, "replaced_value_float": 0.0,
                  "replaced_value_int64": 0}

    def _imputed(self, node):
        values = node.attrs.get("imputed_value_floats")
        if values is None:
            values = node.attrs.get("imputed_value_int64s")
        return None if values is None else np.asarray(values, dtype=np.float64)

    def _replaced(self, node, graph):
        dtype = graph.values[node.inputs[0]].dtype if node.inputs[0] in graph.values else np.dtype(np.float32)
        if dtype is not None and np.dtype(dtype).kind in "iu":
            return float(self.attr(node, "replaced_value_int64"))
        return float(self.attr(node, "replaced_value_float"))

    def check(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        imputed = self._imputed(node)
        if imputed is None or len(imputed) not in (1, features):
            return [f"imputed values must be one value or one per feature ({features})"]
        return []

    def canonicalize(self, node, graph):
        _, features = rows_and_features(graph.shape_of(node.inputs[0]))
        add_table(node, graph, "imputed", np.broadcast_to(self._imputed(node), (features,)))

    def lower(self, node, graph, b):
        rows, features = rows_and_features(graph.shape_of(node.inputs[0]))
        x, y, imputed = node.inputs[0], node.outputs[0], table(node, "imputed")
        replaced = self._replaced(node, graph)

        def body(idx):
            r, c = idx
            v = Ref(x, flat_index([r, c], (rows, features)))
            fill = Ref(imputed, Idx.of(c))
            # NaN as the replaced value: x != x holds for NaN only
            out = Select(v, v, v, fill, "==") if np.isnan(replaced) else Select(v, Num(replaced), fill, v, "==")
            b.assign(Ref(y, flat_index([r, c], (rows, features))), out)

        b.nest((rows, features), body)


class FeatureVectorizer(MlOp):
    name = "FeatureVectorizer"
    attributes = {"inputdimensions": None}

    def _dims(self, node):
        return onnx_ints(self.attr(node, "inputdimensions") or [])

    def _data(self, node):
        count = len(self._dims(node))
        return [n for n in node.inputs[:count] if n]

    def shape(self, node, graph):
        rows, _ = rows_and_features(graph.shape_of(node.inputs[0]))
        return [(rows, sum(self._dims(node)))]

    def check(self, node, graph):
        dims = self._dims(node)
        if len(dims) != len([n for n in node.inputs if n]) - len(node.attrs.get("_tables", {})):
            return [f"inputdimensions has {len(dims)} entries for {len(node.inputs)} inputs"]
        counts = {rows_and_features(graph.shape_of(n))[0] for n in self._data(node)}
        if len(counts) > 1:
            return [f"the inputs have different numbers of rows {sorted(counts)}"]
        return []

    def lower(self, node, graph, b):
        rows, total = self.shape(node, graph)[0]
        y, start = node.outputs[0], 0
        for name, dim in zip(self._data(node), self._dims(node)):
            _, features = rows_and_features(graph.shape_of(name))

            def body(idx, name=name, start=start, features=features):
                r, c = idx
                value = Ref(name, flat_index([r, c], (rows, features))) if features > 1 else \
                    Ref(name, flat_index([r], (rows,)))
                b.assign(Ref(y, flat_index([r, Idx.of(c) + start], (rows, total))), value)

            b.nest((rows, min(dim, features)), body)
            if dim > features:
                b.nest((rows, dim - features), lambda idx, start=start, features=features: b.assign(
                    Ref(y, flat_index([idx[0], Idx.of(idx[1]) + start + features], (rows, total))), Num(0.0)))
            start += dim


class ArrayFeatureExtractor(MlOp):
    name = "ArrayFeatureExtractor"

    def shape(self, node, graph):
        data, picks = graph.shape_of(node.inputs[0]), graph.shape_of(node.inputs[1])
        count = int(np.prod(picks, dtype=np.int64))
        if len(data) == 1:
            return [(1, count)]
        return [tuple(data[:-1]) + (count,)]

    def evaluate(self, node, inputs):
        data, picks = inputs[0], np.asarray(inputs[1]).reshape(-1)
        out = np.take(data, picks, axis=-1)
        return [out.reshape(1, -1) if data.ndim == 1 else out]

    def check(self, node, graph):
        picks = const_input(graph, node, 1)
        extent = graph.shape_of(node.inputs[0])[-1]
        if picks is not None and picks.size and (picks.min() < 0 or picks.max() >= extent):
            return [f"an index is outside [0, {extent})"]
        return []

    def lower(self, node, graph, b):
        from rosenna.ops.indexing import checked_index

        data = graph.shape_of(node.inputs[0])
        rows, features = rows_and_features(data)
        out_shape = self.shape(node, graph)[0]
        count = out_shape[-1]
        x, y = node.inputs[0], node.outputs[0]
        picks = const_input(graph, node, 1)
        if picks is not None:
            picks = onnx_ints(picks)

            for q, p in enumerate(picks):
                b.loop(rows, lambda r, q=q, p=p: b.assign(Ref(y, flat_index([r, q], (rows, count))),
                                                          Ref(x, flat_index([r, p], (rows, features)))))
            return
        index = Var("ix")

        def body(idx):
            r, k = idx
            safe, ok = checked_index(b, Ref(node.inputs[1], Idx.of(k)), features, index, negative=False)
            b.assign(Ref(y, flat_index([r, k], (rows, count))),
                     Select(ok, Num(0.5), Ref(x, flat_index([r], (rows,)) * features, at=safe), Num(float("nan"))))

        b.nest((rows, count), body)


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
