"""Ops that change only how elements are labelled, never their order: buffer aliases.

Identity, Flatten, Reshape, Squeeze, Unsqueeze, Cast between float types, and a Transpose that
moves only size-1 axes produce no code and no copy: the plan gives the output the input's storage.
Any other Transpose is a copy with the index remap ``Y[i_0, .., i_r] = X[j]``, ``j[perm[k]] = i_k``.

Cast between float32 and float64 is an alias because the generated code computes in one precision
(``--precision``). That is exact for a widening Cast, and for a narrowing one in single precision
(the value is a float32 already); a run-time float64 -> float32 Cast in double-precision code would
skip the rounding ONNX specifies, so :func:`cast_rounding_problems` refuses it.
"""

import numpy as np

from rosenna.loopir import Ref, flat_index
from rosenna.ops.base import Op, const_input, onnx_ints
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
    name = "Cast"
    attributes = {"to": None, "saturate": 1}

    def evaluate(self, node, inputs):
        return [inputs[0].astype(numpy_dtype(self.attr(node, "to")))]

    def is_alias(self, node, graph):
        return numpy_dtype(self.attr(node, "to")).kind == "f"

    def check(self, node, graph):
        to = numpy_dtype(self.attr(node, "to"))
        if to not in (np.float32, np.float64):
            return [f"casts a run-time value to {to}; rosenna computes in float32 or float64 only"]
        return []


def cast_rounding_problems(graph, precision):
    """The run-time Casts whose float64 -> float32 rounding code computed in ``precision`` would skip."""
    onnx_float = 1  # TensorProto.FLOAT
    if precision != "double":
        return []
    problems = []
    for node in graph.nodes:
        if node.op != "Cast" or node.domain not in ("", "ai.onnx") or graph.is_const(node.inputs[0]):
            continue
        source = graph.values.get(node.inputs[0])
        narrows = numpy_dtype(node.attrs.get("to") or onnx_float) == np.float32
        if source is not None and source.dtype == np.float64 and narrows:
            problems.append(f"node {node.name!r} (Cast): rounds a run-time float64 value to float32, a rounding the "
                            "double-precision code would skip; generate with --precision single, or drop the Cast")
    return problems


class Dropout(Alias):
    """Inference Dropout is the identity; the optional mask output must be unused."""
    name = "Dropout"
    attributes = {"seed": 0, "ratio": 0.5, "is_test": 1}

    def shape(self, node, graph):
        return [graph.shape_of(node.inputs[0])] * len(node.outputs)

    def evaluate(self, node, inputs):
        return [inputs[0]] + [np.ones(inputs[0].shape, bool)] * (len(node.outputs) - 1)

    def check(self, node, graph):
        problems = []
        if len(node.outputs) > 1 and node.outputs[1] and node.outputs[1] in graph.consumers():
            problems.append("the mask output is used")
        if len(node.inputs) > 2 and node.inputs[2]:  # opset 12: training_mode
            training = const_input(graph, node, 2)
            ratio = const_input(graph, node, 1)
            if training is None or (bool(np.asarray(training).reshape(-1)[0]) and not (
                    ratio is not None and float(np.asarray(ratio).reshape(-1)[0]) == 0.0)):
                problems.append("training_mode is true or computed at run time; rosenna does inference only")
        return problems
