"""ai.onnx.ml preprocessing (skl2onnx's scalers, normalizers, imputers, feature joins).

X is ``[N, C]`` (or ``[C]``: one row); every row is computed alike.

Scaler:              Y[n, c] = (X[n, c] - offset[c]) * scale[c]   (one offset or scale: every c)
Normalizer:          Y[n, :] = X[n, :] / m, m = max X[n, :] (MAX), sum |X[n, :]| (L1) or
                     sqrt(sum X[n, :]^2) (L2); a row whose m is 0 is copied
Imputer:             Y = imputed[c] where X == replaced_value (X is NaN when that is NaN), else X
Binarizer:           Y = 1 where X > threshold, else 0 (NaN gives NaN; onnxruntime stops with an error)
FeatureVectorizer:   Y[n, :] = the inputs' first ``inputdimensions[i]`` columns, side by side
                     (a narrower input is padded with zeros)
ArrayFeatureExtractor: Y[..., k] = X[..., I[k]]; a run-time I is read per element, an index
                     outside the last axis gives NaN (rosenna.ops.gather_scatter)

Constant tables (offsets, scales, imputed values) become weights of the model, appended to the
node's inputs by ``canonicalize``; the helpers here are shared by every ai.onnx.ml op module.
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


class Binarizer(MlOp):
    name = "Binarizer"
    attributes = {"threshold": 0.0}

    def lower(self, node, graph, b):
        size = int(np.prod(graph.shape_of(node.inputs[0]), dtype=np.int64))
        x, y, cut = node.inputs[0], node.outputs[0], Num(float(self.attr(node, "threshold")))
        b.loop(size, lambda i: b.assign(Ref(y, Idx.of(i)), Select(
            Ref(x, Idx.of(i)), Ref(x, Idx.of(i)), Select(Ref(x, Idx.of(i)), cut, Num(1.0), Num(0.0)), Ref(x, Idx.of(i)),
            "==")))


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
        from rosenna.ops.gather_scatter import checked_index

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
        def body(idx):
            r, k = idx
            safe, ok = checked_index(b, Ref(node.inputs[1], Idx.of(k)), features, "ix", negative=False)
            b.assign(Ref(y, flat_index([r, k], (rows, count))),
                     Select(ok, Num(0.5), Ref(x, flat_index([r], (rows,)) * features, at=safe), Num(float("nan"))))

        b.nest((rows, count), body)
