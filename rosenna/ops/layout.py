"""Ops that change only how elements are labelled, never their order: buffer aliases.

Identity, Flatten, Reshape, Squeeze, Unsqueeze, a Transpose that moves only size-1 axes, and a Cast
that changes no value produce no code and no copy: the plan gives the output the input's storage.
Any other Transpose is a copy with the index remap ``Y[i_0, .., i_r] = X[j]``, ``j[perm[k]] = i_k``.

Cast, with every run-time value held in the generated float type (integers and bool too, see
rosenna.ir.HELD_DTYPES; float16, bfloat16 and the float8 types too, see rosenna.ir.FLOAT_FORMATS):

- an alias where every value of the source type is exact in the target type: to float64, from
  bool, between equal types, an integer widening, a narrow float to a wider float;
- to float32: an alias in a float32 model; in a float64 model it rounds to float32 (to nearest
  even, as ONNX and C do) and holds the rounded value: ``(double)((float)x + 0.0f)`` (see
  emit/lang.py for why the ``+ 0``: a -0 comes out as +0);
- to float16, bfloat16, float8 E4M3FN, E4M3FNUZ, E5M2, E5M2FNUZ: rounds to the format and holds
  the value it would have: with ``e = clamp(floor(log2|x|), emin, 1024)`` (emin the format's
  smallest normal exponent, which makes its subnormals come out right) and ``m`` its mantissa bits,
  ``y = rint(x * 2**(m - e)) * 2**(e - m)`` (round to nearest, ties to even; both scalings exact).
  Then ONNX's overflow rules, on the rounded value as the spec's tables say: ``|y| > largest`` is
  +-inf for float16 and bfloat16 (IEEE); for the float8 types it is +-largest when ``saturate=1``
  (the default; +-inf too), else +-inf for E5M2 and NaN for the others (which have no infinity).
  NaN stays NaN. The FNUZ types have no -0: a -0 result is held as -0.0, which equals +0;
- to an integer type: ``trunc(x)`` (toward zero, as numpy's astype and onnxruntime do; ONNX leaves
  out-of-range values undefined); to int4, uint4, int2, uint2: ``trunc(x)``, and 0 for a value
  outside the type's range, as the ONNX reference implementation (ml_dtypes) gives and the node
  tests expect (onnxruntime clamps instead; ONNX leaves it undefined); to bool: ``x != 0 ? 1 : 0``
  (NaN is true);
- refused: to float4 E2M1 and float8 E8M0 (ONNX leaves their NaN and infinity handling to the
  implementation, or ties it to a rounding mode rosenna does not model), strings, and an integer
  narrowing at run time (ONNX wraps, rosenna does not).

Deviation: in a float32 model (or under ``--precision single``) a Cast to float64 cannot add
precision: it is an alias. Ops other than Cast whose result type is narrow compute in the working
precision and are not rounded back to it (see rosenna.ir.FLOAT_FORMATS).
"""

import numpy as np

from rosenna.ir import FLOAT_DTYPES, FLOAT_FORMATS, HELD_DTYPES, NARROW_DTYPES, SMALL_INT_RANGES, int_range
from rosenna.loopir import Bin, Fn, Num, Ref, Select, Var, flat_index
from rosenna.ops.base import Op, const_input, copy_lowering, onnx_ints
from rosenna.onnx_types import numpy_dtype


class Alias(Op):
    def is_alias(self, node, graph):
        return True


class Identity(Alias):
    name = "Identity"

    def evaluate(self, node, inputs):
        return [inputs[0]]


class Flatten(Alias):
    name = "Flatten"
    attributes = {"axis": 1}

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        axis = self.attr(node, "axis")
        axis = axis + len(shape) if axis < 0 else axis
        return [(int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))]

    def evaluate(self, node, inputs):
        return [inputs[0].reshape(self.shape_from(node, inputs[0].shape))]

    def shape_from(self, node, shape):
        axis = self.attr(node, "axis")
        axis = axis + len(shape) if axis < 0 else axis
        return (int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64)))


class Reshape(Alias):
    name = "Reshape"
    attributes = {"allowzero": 0, "shape": None}

    def _target(self, node, graph_or_none, in_shape, shape_arr):
        target = onnx_ints(shape_arr)
        allowzero = self.attr(node, "allowzero")
        out = [in_shape[i] if (d == 0 and not allowzero) else d for i, d in enumerate(target)]
        if -1 in out:
            known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
            total = int(np.prod(in_shape, dtype=np.int64))
            out[out.index(-1)] = total // known if known else 0
        return tuple(out)

    def _shape_arr(self, node, graph):
        if len(node.inputs) > 1:
            return const_input(graph, node, 1)
        return self.attr(node, "shape")  # opset < 5

    def shape_errors(self, node, graph):
        arr = self._shape_arr(node, graph)
        if arr is None:
            return []  # refused by check(): the target is computed at run time
        target, in_shape = onnx_ints(arr), tuple(graph.shape_of(node.inputs[0]))
        allowzero = self.attr(node, "allowzero")
        if target.count(-1) > 1 or any(d < -1 for d in target):
            return [f"target shape {target}: at most one -1 and no other negative size"]
        if not allowzero and any(d == 0 and i >= len(in_shape) for i, d in enumerate(target)):
            return [f"target shape {target} copies a dimension (0) the input {in_shape} does not have"]
        out = self._target(node, graph, in_shape, arr)
        total = int(np.prod(in_shape, dtype=np.int64))
        if int(np.prod(out, dtype=np.int64)) != total:
            return [f"target shape {target} holds {int(np.prod(out, dtype=np.int64))} elements, the input "
                    f"{in_shape} {total}"]
        return []

    def shape(self, node, graph):
        arr = self._shape_arr(node, graph)
        if arr is None:
            raise ValueError("Reshape target shape is computed at run time")
        return [self._target(node, graph, graph.shape_of(node.inputs[0]), arr)]

    def evaluate(self, node, inputs):
        arr = inputs[1] if len(inputs) > 1 else self.attr(node, "shape")
        return [inputs[0].reshape(self._target(node, None, inputs[0].shape, arr))]

    def check(self, node, graph):
        return [] if self._shape_arr(node, graph) is not None else ["the target shape is computed at run time"]


def _axes(op, node, graph_or_inputs, position=1):
    """Axes from the attribute (old opsets) or the constant input (opset 13 on)."""
    if "axes" in node.attrs:
        return onnx_ints(node.attrs["axes"])
    if isinstance(graph_or_inputs, list):
        arr = graph_or_inputs[position] if len(graph_or_inputs) > position else None
    else:
        arr = const_input(graph_or_inputs, node, position)
    return None if arr is None else onnx_ints(arr)


class Squeeze(Alias):
    name = "Squeeze"
    attributes = {"axes": None}

    @staticmethod
    def squeeze(shape, axes):
        if axes is None:
            return tuple(d for d in shape if d != 1)
        axes = {a % len(shape) for a in axes}
        return tuple(d for i, d in enumerate(shape) if i not in axes)

    def shape(self, node, graph):
        return [self.squeeze(graph.shape_of(node.inputs[0]), _axes(self, node, graph))]

    def evaluate(self, node, inputs):
        return [inputs[0].reshape(self.squeeze(inputs[0].shape, _axes(self, node, inputs)))]


class Unsqueeze(Alias):
    name = "Unsqueeze"
    attributes = {"axes": None}

    @staticmethod
    def unsqueeze(shape, axes):
        rank = len(shape) + len(axes)
        axes = sorted(a % rank for a in axes)
        out, it = [], iter(shape)
        for i in range(rank):
            out.append(1 if i in axes else next(it))
        return tuple(out)

    def shape(self, node, graph):
        return [self.unsqueeze(graph.shape_of(node.inputs[0]), _axes(self, node, graph))]

    def evaluate(self, node, inputs):
        return [inputs[0].reshape(self.unsqueeze(inputs[0].shape, _axes(self, node, inputs)))]

    def check(self, node, graph):
        return [] if _axes(self, node, graph) is not None else ["the axes are computed at run time"]


class Transpose(Op):
    name = "Transpose"
    attributes = {"perm": None}

    def _perm(self, node, rank):
        perm = self.attr(node, "perm")
        return list(range(rank))[::-1] if perm is None else onnx_ints(perm)

    def shape_errors(self, node, graph):
        rank = len(graph.shape_of(node.inputs[0]))
        perm = self._perm(node, rank)
        if sorted(perm) != list(range(rank)):
            return [f"perm {perm} is not a permutation of the {rank} axes of its input"]
        return []

    def shape(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        return [tuple(shape[p] for p in self._perm(node, len(shape)))]

    def evaluate(self, node, inputs):
        return [np.transpose(inputs[0], self._perm(node, inputs[0].ndim))]

    def is_alias(self, node, graph):
        shape = graph.shape_of(node.inputs[0])
        moved = [p for p in self._perm(node, len(shape)) if shape[p] != 1]
        return moved == sorted(moved)

    def lower(self, node, graph, b):
        """A copy: ``Y[i_0, .., i_r] = X[j]`` with ``j[perm[k]] = i_k`` (an index remap)."""
        shape = graph.shape_of(node.inputs[0])
        perm = self._perm(node, len(shape))
        out_shape = self.shape(node, graph)[0]

        def body(idx):
            src = [None] * len(shape)
            for k, axis in enumerate(perm):
                src[axis] = idx[k]
            b.assign(Ref(node.outputs[0], flat_index(idx, out_shape)), Ref(node.inputs[0], flat_index(src, shape)))

        if all(out_shape):
            b.nest(out_shape, body)


class Cast(Alias):
    """Cast: an alias where no value changes, else a rounding copy (see the module docstring)."""
    name = "Cast"
    attributes = {"to": None, "saturate": 1, "round_mode": "up"}

    def evaluate(self, node, inputs):
        return [inputs[0].astype(numpy_dtype(self.attr(node, "to")))]

    def _types(self, node, graph):
        value = graph.values.get(node.inputs[0])
        source = np.dtype(value.dtype) if value is not None and value.dtype is not None else graph.dtype
        return source, self._target(node, graph)

    def _target(self, node, graph):
        return numpy_dtype(self.attr(node, "to"))

    def is_alias(self, node, graph):
        source, to = self._types(node, graph)
        if source == to or _exact_in(source, to):
            return True
        if to == np.float32:
            return graph.dtype == np.float32
        return False

    def check(self, node, graph):
        source, to = self._types(node, graph)
        if to not in FLOAT_DTYPES + HELD_DTYPES + NARROW_DTYPES:
            return [f"casts a run-time value to {to}; rosenna computes in float32 or float64 (integers, bool, "
                    "float16, bfloat16 and the float8 types held in them) only"]
        src_range, to_range = int_range(source), int_range(to)
        if src_range and to_range and to != np.bool_ and not _exact_in(source, to):
            return [f"narrows {source} to {to} at run time (values would wrap); rosenna holds integers as "
                    "floats and does not wrap them"]
        return []

    def lower(self, node, graph, b):
        source, to = self._types(node, graph)
        size = int(np.prod(graph.shape_of(node.inputs[0]), dtype=np.int64))
        x = lambda i: Ref(node.inputs[0], flat_index([i], (size,)))  # noqa: E731
        y = lambda i: Ref(node.outputs[0], flat_index([i], (size,)))  # noqa: E731
        if to in FLOAT_FORMATS:
            saturate = FLOAT_FORMATS[to].saturates and bool(self.attr(node, "saturate"))
            b.loop(size, lambda i: _round_to_format(b, x(i), y(i), FLOAT_FORMATS[to], saturate))
            return
        if to == np.bool_:
            convert = lambda v: Select(v, Num(0.0), Num(1.0), Num(0.0), "!=")  # noqa: E731
        elif to in SMALL_INT_RANGES:
            low, high = SMALL_INT_RANGES[to]
            convert = lambda v: Select(Fn("trunc", (v,)), Num(low), Num(0.0),  # noqa: E731
                                       Select(Fn("trunc", (v,)), Num(high), Num(0.0), Fn("trunc", (v,))), "<")
        elif int_range(to):
            convert = lambda v: Fn("trunc", (v,))  # noqa: E731
        else:  # to float32 in a float64 model: round to float32 and hold the result
            convert = lambda v: Fn("to_single", (v,))  # noqa: E731
        b.loop(size, lambda i: b.assign(y(i), convert(x(i))))


class CastLike(Cast):
    """CastLike: Cast to the element type of its second input (whose values are not read)."""
    name = "CastLike"
    attributes = {"saturate": 1, "round_mode": "up"}
    #: the second input gives only its element type: a constant first input folds (fold.py)
    unread_inputs = (1,)

    def _target(self, node, graph):
        like = node.inputs[1]
        return np.dtype(graph.weights[like].dtype if like in graph.weights else graph.values[like].dtype)

    def evaluate(self, node, inputs):
        return [inputs[0].astype(inputs[1].dtype)]


#: Beyond any exponent a float64 value has: where the Cast lowering clamps floor(log2|x|) of an inf.
_EXPONENT_CAP = 1024


def _round_to_format(b, x, target, fmt, saturate):
    """``target = x`` rounded to the float format ``fmt``, with ONNX's overflow rules (module docstring)."""
    e, y = Var("binade"), Var("rounded")
    b.assign(e, Fn("max", (Fn("min", (Fn("exponent", (x,)), Num(_EXPONENT_CAP))), Num(fmt.emin))))
    b.assign(y, Fn("scale2", (Fn("rint", (Fn("scale2", (x, Bin("-", Num(fmt.mantissa), e))),)),
                              Bin("-", e, Num(fmt.mantissa)))))
    if saturate:
        over = Select(y, Num(0.0), Num(fmt.largest), Num(-fmt.largest), ">")
    elif fmt.inf:
        over = Select(y, Num(0.0), Num(np.inf), Num(-np.inf), ">")
    else:
        over = Num(np.nan)
    b.assign(target, Select(Fn("abs", (y,)), Num(fmt.largest), over, y, ">"))


def _exact_in(source, to):
    """Whether every value of ``source`` is exact in ``to`` (a float type held in float32 is)."""
    source, to = np.dtype(source), np.dtype(to)
    src_range, to_range = int_range(source), int_range(to)
    if source == np.bool_:
        return to_range is not None or to in FLOAT_DTYPES or to in FLOAT_FORMATS
    if src_range and to_range:
        return to_range[0] <= src_range[0] and src_range[1] <= to_range[1] and to != np.bool_
    if to == np.float64:
        return True
    if to == np.float32:
        return source in FLOAT_FORMATS or (src_range is not None and max(map(abs, src_range)) <= 2**24)
    if to in FLOAT_FORMATS:
        fmt = FLOAT_FORMATS[to]
        if source in FLOAT_FORMATS:
            src = FLOAT_FORMATS[source]
            return (src.mantissa <= fmt.mantissa and src.emin >= fmt.emin and src.largest <= fmt.largest
                    and (fmt.inf or not src.inf))
        return src_range is not None and max(map(abs, src_range)) <= min(2 ** (fmt.mantissa + 1), fmt.largest)
    return False


class Dropout(Alias):
    """Inference Dropout: the identity (an alias); a mask output that is used is all ones.

    (Every element is kept; with the mask used the node is a copy and a fill.)"""
    name = "Dropout"
    attributes = {"seed": 0, "ratio": 0.5, "is_test": 1}

    def shape(self, node, graph):
        return [graph.shape_of(node.inputs[0])] * len(node.outputs)

    def evaluate(self, node, inputs):
        return [inputs[0]] + [np.ones(inputs[0].shape, bool)] * (len(node.outputs) - 1)

    def _mask_used(self, node, graph):
        mask = node.outputs[1] if len(node.outputs) > 1 else ""
        return bool(mask) and (mask in graph.consumers() or mask in graph.outputs)

    def is_alias(self, node, graph):
        return not self._mask_used(node, graph)

    def lower(self, node, graph, b):
        size = int(np.prod(graph.shape_of(node.inputs[0]), dtype=np.int64))
        copy_lowering(b, node.inputs[0], node.outputs[0], size)
        b.loop(size, lambda i: b.assign(Ref(node.outputs[1], flat_index([i], (size,))), Num(1.0)))

    def check(self, node, graph):
        problems = []
        if len(node.inputs) > 2 and node.inputs[2]:  # opset 12: training_mode
            training = const_input(graph, node, 2)
            ratio = const_input(graph, node, 1)
            if training is None or (bool(np.asarray(training).reshape(-1)[0]) and not (
                    ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0)):
                problems.append("training_mode is true or computed at run time; rosenna does inference only")
        return problems
