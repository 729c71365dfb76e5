"""The graph IR: values with static shapes, nodes in topological order, constant weights.

A :class:`Graph` is what the frontend builds and every pass rewrites. Names are the model's own
(they may hold any characters); nothing here is ever pasted into generated source: the plan derives
sanitized identifiers.
"""

from dataclasses import dataclass, field

import numpy as np

from onnx import TensorProto, helper

from rosenna.errors import ModelError

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))

#: The largest element count or index the generated code may use: loops and offsets are C ``int``
#: and Fortran default ``integer`` (32 bits on every compiler rosenna supports).
INDEX_MAX = 2**31 - 1


def check_size(count, what, where=""):
    """Raise ModelError when ``count`` elements cannot be indexed by the generated code."""
    if count > INDEX_MAX:
        raise ModelError(f"{where}{what} holds {count} elements; the generated code indexes with 32-bit "
                         f"integers (at most {INDEX_MAX}); make the model smaller or bind smaller --dim values")


def _onnx_dtype(code):
    return np.dtype(helper.tensor_dtype_to_np_dtype(code))


@dataclass(frozen=True)
class FloatFormat:
    """A float format narrower than float32, as ONNX defines it: ``mantissa`` explicit significand
    bits, ``emin`` the exponent of the smallest normal number, ``largest`` the largest finite value;
    ``inf`` whether it encodes infinities (else an overflow is NaN when not saturated);
    ``saturates`` whether Cast's ``saturate`` attribute applies (the float8 types)."""
    mantissa: int
    emin: int
    largest: float
    inf: bool
    saturates: bool


#: The float formats a run-time value may be rounded to (by Cast) and held in the working float
#: type: every one of their values is exact in float32. Inputs and initializers of these types are
#: computed in the working precision; a Cast to one of them rounds to it (see rosenna.ops.layout).
FLOAT_FORMATS = {
    _onnx_dtype(TensorProto.FLOAT16): FloatFormat(10, -14, 65504.0, True, False),
    _onnx_dtype(TensorProto.BFLOAT16): FloatFormat(7, -126, float.fromhex("0x1.fep127"), True, False),
    _onnx_dtype(TensorProto.FLOAT8E4M3FN): FloatFormat(3, -6, 448.0, False, True),
    _onnx_dtype(TensorProto.FLOAT8E4M3FNUZ): FloatFormat(3, -7, 240.0, False, True),
    _onnx_dtype(TensorProto.FLOAT8E5M2): FloatFormat(2, -14, 57344.0, True, True),
    _onnx_dtype(TensorProto.FLOAT8E5M2FNUZ): FloatFormat(2, -15, 57344.0, False, True),
}

#: The 2- and 4-bit integer types, with their ranges: held like the other integers.
SMALL_INT_RANGES = {
    _onnx_dtype(TensorProto.INT4): (-8, 7),
    _onnx_dtype(TensorProto.UINT4): (0, 15),
    _onnx_dtype(TensorProto.INT2): (-2, 1),
    _onnx_dtype(TensorProto.UINT2): (0, 3),
}

#: Narrow float types a graph input, an initializer or a Cast's result may have.
NARROW_DTYPES = tuple(FLOAT_FORMATS)

#: Narrow types rosenna does not hold, and why (the reason its refusals give).
UNHELD_REASONS = {
    _onnx_dtype(TensorProto.FLOAT4E2M1): "float4 E2M1 has no NaN or infinity and ONNX leaves what they become "
                                         "to the implementation",
    _onnx_dtype(TensorProto.FLOAT8E8M0): "float8 E8M0's rounding (round_mode) and special values are not "
                                         "modelled by rosenna",
}


def int_range(dtype):
    """``(lowest, highest)`` of an integer (or bool) dtype, the 2- and 4-bit ones included; None
    for any other dtype."""
    dtype = np.dtype(dtype)
    if dtype in SMALL_INT_RANGES:
        return SMALL_INT_RANGES[dtype]
    if dtype == np.bool_:
        return (0, 1)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return (int(info.min), int(info.max))
    return None


#: Element types a run-time value may have besides the float types: booleans (masks) and integers.
#: The generated code holds them in its float type, exactly while a value fits the significand
#: (2**24 in single precision, 2**53 in double); a caller passes integer inputs as floats.
HELD_DTYPES = tuple(np.dtype(t) for t in (np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                          np.int64, np.uint64)) + tuple(SMALL_INT_RANGES)


def working_dtype(input_dtypes, output_dtypes):
    """The model's float type: that of its float inputs, else of its float outputs; a model with
    neither computes in float64 when an integer input is wider than 16 bits (so its values stay
    exact), in float32 otherwise."""
    for group in (input_dtypes, output_dtypes):
        floats = {np.dtype(d) for d in group if np.dtype(d) in FLOAT_DTYPES}
        if floats:
            return floats
    wide = any(np.dtype(d).kind in "iu" and np.dtype(d).itemsize > 2 for d in input_dtypes)
    return {np.dtype(np.float64 if wide else np.float32)}


#: The ``sources`` of the Cast nodes ``--precision bf16`` / ``fp16`` puts in front of each dense layer
#: (rosenna.passes.low_precision); the strategy's chain analysis knows them by it.
LOW_PRECISION_ROUNDING = "low-precision rounding"


def is_rounding(sources):
    """Whether a node (or planned op) with these ``sources`` is such a rounding."""
    return tuple(sources) == (LOW_PRECISION_ROUNDING,)


@dataclass
class Value:
    """A tensor flowing between nodes. ``shape`` is a tuple of ints once shapes are static."""

    name: str
    shape: tuple
    dtype: np.dtype

    @property
    def size(self):
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape is not None else None


@dataclass
class Node:
    """One operation. ``inputs`` may hold "" for an omitted optional input."""

    op: str
    name: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    domain: str = ""
    #: The model's nodes this one stands for when a pass merged several (empty: just ``name``).
    sources: tuple = ()


@dataclass
class Graph:
    """A model: runtime inputs and outputs, the values between them, weights, nodes."""

    name: str
    inputs: list  # names of runtime inputs, declaration order
    outputs: list  # names of graph outputs, declaration order
    values: dict  # name -> Value (runtime values only)
    weights: dict  # name -> np.ndarray (constants)
    nodes: list
    opset: int
    dtype: np.dtype  # the model's float type: float32 or float64
    producer: str = ""
    #: The constant-folding budget, elements per folded output (0: rosenna.limits.MAX_FOLD_ELEMENTS).
    max_fold_elements: int = 0
    #: The loop nests one op's code may take (0: rosenna.limits.MAX_OP_NESTS).
    max_op_nests: int = 0
    #: The tuning's ``dft_direct_percent``, which DFT nodes run as direct sums (rosenna.ops.dft's
    #: ``DFT.direct``); 0, a graph not built by rosenna.generate: every DFT by its FFT stages.
    dft_direct_percent: int = 0

    def producers(self):
        """Map each value name to the node that writes it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self):
        """Map each value name to the nodes that read it, in graph order."""
        users = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def is_const(self, name):
        return name in self.weights

    def shape_of(self, name):
        if name in self.weights:
            return tuple(self.weights[name].shape)
        return self.values[name].shape

    def new_name(self, base):
        """A value or weight name not yet used in the graph."""
        taken = set(self.values) | set(self.weights)
        name, i = base, 1
        while name in taken:
            name = f"{base}_{i}"
            i += 1
        return name

    def parameter_count(self):
        used = {name for node in self.nodes for name in node.inputs if name in self.weights}
        return int(sum(self.weights[name].size for name in used))


def verify(graph, *, where="", require_shapes=False):
    """Check the structural invariants every pass must keep; raise ModelError naming what broke.

    Args:
        graph: the graph to check.
        where: the pass that just ran, for the message.
        require_shapes: also demand a static shape on every value.
    """
    tag = f" (after {where})" if where else ""
    defined = set(graph.inputs) | set(graph.weights)
    for name in graph.inputs:
        if name not in graph.values:
            raise ModelError(f"internal: graph input {name!r} has no value record{tag}")
    for node in graph.nodes:
        for name in node.inputs:
            if name and name not in defined:
                raise ModelError(
                    f"internal: node {node.name!r} ({node.op}) reads {name!r} before it is written{tag}"
                )
        for name in node.outputs:
            if not name:
                continue
            if name in defined:
                raise ModelError(f"internal: value {name!r} is written twice{tag}")
            if name not in graph.values:
                raise ModelError(f"internal: output {name!r} of node {node.name!r} has no value record{tag}")
            defined.add(name)
    for name in graph.outputs:
        if name not in defined:
            raise ModelError(f"internal: graph output {name!r} is never written{tag}")
    if require_shapes:
        for name, value in graph.values.items():
            if name not in defined:
                continue
            if value.shape is None or any(not isinstance(d, int) or d < 0 for d in value.shape):
                raise ModelError(f"value {name!r} has no static shape{tag}")
            check_size(value.size, f"value {name!r} of shape {value.shape}")
        for name, array in graph.weights.items():
            check_size(array.size, f"weight {name!r} of shape {tuple(array.shape)}")
