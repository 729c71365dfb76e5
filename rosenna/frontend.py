"""ONNX file -> :class:`rosenna.ir.Graph`.

Steps: load (external data separately, so a missing data file gives onnx's reason); refuse opsets
newer than the installed onnx and unknown element types; inline ONNX local functions;
``onnx.checker``; the inputs ``--freeze`` names made initializers (their .npy arrays checked
against the declared type and shape); bind symbolic input dimensions (a symbolic leading dimension is the batch: 1
sample per point; others need ``--dim NAME=VALUE``); ONNX shape inference in strict mode; sizes
within the generated code's 32-bit indices; then the IR: initializers as weights, nodes with python
attribute values.
"""

import os

import numpy as np
import onnx
from onnx import external_data_helper, helper, numpy_helper, shape_inference

from rosenna.errors import ModelError, UsageError
from rosenna.ir import FLOAT_DTYPES, HELD_DTYPES, NARROW_DTYPES, UNHELD_REASONS, Graph, Node, Value, check_size, working_dtype
from rosenna.onnx_types import numpy_dtype


def file_kind(path):
    """What ``path`` is, found without opening it (a FIFO would block, a device never end): None
    for a regular file (or a link to one), else a phrase: "no such file", "a folder", "a FIFO
    (named pipe)", "a character device", ..."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be examined ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return what
    return "not a regular file"


#: ModelProto's fields (number: protobuf wire type) that can open an ONNX file: ir_version,
#: producer_name/version, domain, model_version, doc_string, graph, opset_import, metadata_props,
#: training_info, functions, configuration.
_MODEL_FIELDS = {1: 0, 2: 2, 3: 2, 4: 2, 5: 0, 6: 2, 7: 2, 8: 2, 14: 2, 20: 2, 25: 2, 26: 2}
#: protobuf cannot parse a message of 2 GiB or more (weights beyond that live in external data).
_PROTOBUF_MAX = (1 << 31) - 1


def _sniff(path):
    """Refuse a file that cannot be an ONNX model from its size and first bytes, before the
    protobuf parser reads all of it (a 1 GiB file of zeros once took 1.1 GB to say "not ONNX")."""
    size = os.path.getsize(path)
    if size == 0:
        raise ModelError(f"{path}: not an ONNX model (the file is empty); give a .onnx file")
    if size > _PROTOBUF_MAX:
        raise ModelError(f"{path}: {size} bytes, more than an ONNX file can hold (2 GiB, protobuf's limit); a "
                         "model this large keeps its weights in external data")
    with open(path, "rb") as handle:
        head = handle.read(16)
    tag, shift, i = 0, 0, 0
    while i < len(head) and i < 3:  # the first field's tag, a varint
        tag |= (head[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not head[i - 1] & 0x80:
            break
    field, wire = tag >> 3, tag & 7
    if _MODEL_FIELDS.get(field) != wire:
        shown = head[:8].hex(" ")
        raise ModelError(f"{path}: not an ONNX model (its first bytes {shown} do not begin a ModelProto); "
                         "give a .onnx file")


def load_model(path):
    """Read and check an ONNX file; return the ``ModelProto`` with local functions inlined."""
    kind = file_kind(path)
    if kind is not None:
        raise ModelError(f"{path}: {kind}" + ("" if kind == "no such file" else ", not a file; give a .onnx file"))
    _sniff(path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf raises several types for garbage input
        raise ModelError(f"{path}: not an ONNX model ({type(exc).__name__}); give a .onnx file") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{path}: not an ONNX model (no graph in the file); give a .onnx file")
    try:
        external_data_helper.load_external_data_for_model(model, os.path.dirname(os.path.abspath(path)))
    except Exception as exc:  # onnx's own reason: which tensor, which file
        reason = _first_line(exc).rstrip(".")
        raise ModelError(f"{path}: the model's external data cannot be read: {reason}; keep the data file the "
                         "exporter wrote (e.g. model.onnx.data) beside the model") from None
    _check_opsets(model, path)
    _check_element_types(model, path)
    if model.functions:
        try:
            from onnx import inliner

            model = inliner.inline_local_functions(model)
        except Exception as exc:
            raise ModelError(f"{path}: cannot inline the model's local functions: {exc}") from None
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ModelError(f"{path}: the ONNX checker rejects the model: {_first_line(exc)}") from None
    return model


def _first_line(exc):
    """The first non-empty line of an exception's message (onnx's own reason), else its type."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _check_opsets(model, path):
    """Refuse an ONNX opset newer than the installed onnx defines: its ops' rules are unknown here."""
    newest = onnx.defs.onnx_opset_version()
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx") and entry.version > newest:
            raise ModelError(f"{path}: the model imports ONNX opset {entry.version}; the installed onnx "
                             f"{onnx.__version__} knows opsets up to {newest}; upgrade onnx or re-export the "
                             "model with an older opset")


def _check_element_types(model, path):
    """Every declared tensor must have a known element type (0 is UNDEFINED)."""
    known = set(onnx.TensorProto.DataType.values()) - {onnx.TensorProto.UNDEFINED}
    g = model.graph
    declared = [("input", v) for v in g.input] + [("output", v) for v in g.output] + \
        [("value", v) for v in g.value_info]
    for kind, info in declared:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type not in known:
            raise ModelError(f"{path}: {kind} {info.name!r} has element type {info.type.tensor_type.elem_type}, "
                             "which is not an ONNX element type; re-export the model with typed tensors")
    for init in g.initializer:
        if init.data_type not in known:
            raise ModelError(f"{path}: initializer {init.name!r} has element type {init.data_type}, which is not "
                             "an ONNX element type")


def parse_dims(items):
    """``["N=4", ...]`` -> ``{"N": 4}``; raise UsageError on a malformed item."""
    dims = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise UsageError(f"--dim {item!r}: expected NAME=VALUE with a positive integer VALUE")
        dims[name.strip()] = int(value)
    return dims


def parse_freeze(items):
    """``["W=w.npy", ...]`` -> ``{"W": "w.npy"}``; raise UsageError on a malformed or repeated item."""
    freeze = {}
    for item in items or ():
        name, sep, file = item.partition("=")
        if not sep or not name.strip() or not file.strip():
            raise UsageError(f"--freeze {item!r}: expected NAME=FILE.npy (a graph input and the .npy file of its value)")
        if name in freeze:
            raise UsageError(f"--freeze {name}: given twice ({freeze[name]} and {file}); freeze each input once")
        freeze[name] = file
    return freeze


def load_frozen(freeze):
    """``{name: path}`` -> ``{name: array}``: each .npy file read (no pickles); UsageError naming
    the file for a missing or unreadable one."""
    arrays = {}
    for name, file in (freeze or {}).items():
        where = f"--freeze {name}={file}"
        kind = file_kind(file)
        if kind is not None:
            raise UsageError(f"{where}: {kind}; give the .npy file of the input's value (numpy.save)")
        try:
            array = np.load(file, allow_pickle=False)
        except Exception as exc:  # numpy raises ValueError, OSError, EOFError, ... for a damaged file
            raise UsageError(f"{where}: not a .npy array file ({_first_line(exc)}); write it with numpy.save") from None
        if not isinstance(array, np.ndarray):  # an .npz archive
            raise UsageError(f"{where}: an .npz archive, not one array; save the input's value alone with numpy.save")
        arrays[name] = array
    return arrays


def _freeze_inputs(model, arrays, dims, path):
    """Turn each graph input named in ``arrays`` into an initializer holding its array, after
    checking the array against the input's declared element type and shape, in place."""
    initializers = {init.name for init in model.graph.initializer}
    declared = {i.name: i for i in model.graph.input if i.name not in initializers}
    for name, array in arrays.items():
        where = f"--freeze {name}"
        if name not in declared:
            known = ", ".join(repr(n) for n in declared) or "none"
            raise UsageError(f"{where}: {path} has no run-time input named {name!r} (its inputs: {known})")
        ttype = declared[name].type.tensor_type
        want = numpy_dtype(ttype.elem_type) if ttype.elem_type else None
        if want is not None and array.dtype != want:
            raise UsageError(f"{where}: the array has dtype {array.dtype}, the input is declared {want}; "
                             f"save it as {want} (array.astype(...))")
        if ttype.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else dims.get(d.dim_param) for d in ttype.shape.dim)
            if len(shape) != array.ndim or any(d is not None and d != a for d, a in zip(shape, array.shape)):
                shown = "(" + ", ".join("?" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
                raise UsageError(f"{where}: the array has shape {tuple(array.shape)}, the input is declared {shown}")
        model.graph.initializer.append(numpy_helper.from_array(array, name))
    kept = [i for i in model.graph.input if i.name not in arrays]
    del model.graph.input[:]
    model.graph.input.extend(kept)


def _bind_input_dims(model, dims, path):
    """Replace symbolic input dimensions by integers, in place."""
    used = set()
    initializers = {init.name for init in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        ttype = inp.type.tensor_type
        if not ttype.HasField("shape"):
            raise ModelError(f"{path}: input {inp.name!r} has no shape; rosenna needs static shapes")
        for axis, dim in enumerate(ttype.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            if dim.HasField("dim_value") and dim.dim_value < 0:
                raise ModelError(f"{path}: input {inp.name!r} has the negative dimension {dim.dim_value} at axis "
                                 f"{axis}; a dimension counts elements: re-export the model")
            if dim.HasField("dim_value"):  # an explicit 0: an empty tensor, not a symbol
                raise ModelError(f"{path}: input {inp.name!r} is empty (dimension 0 at axis {axis}); "
                                 "rosenna needs at least one element per input")
            label = dim.dim_param
            if label and label in dims:
                dim.dim_value = dims[label]
                used.add(label)
            elif axis == 0:
                dim.dim_value = 1  # the batch: one sample per point
            else:
                shown = repr(label) if label else "unnamed"
                raise ModelError(
                    f"{path}: input {inp.name!r} has a symbolic dimension {shown} at axis {axis}; "
                    f"bind it with --dim {label or 'NAME'}=VALUE"
                    + ("" if label else " (give the dimension a name in the exporter)")
                )
    unknown = sorted(set(dims) - used)
    if unknown:
        raise UsageError(f"--dim {', '.join(unknown)}: no input of {path} has a dimension of that name")


def infer_shapes(model, path):
    """ONNX shape inference in strict mode with type checks, as onnxruntime's load applies it: a
    Gemm or MatMul whose inner dimensions disagree, operands that do not broadcast, a ``--dim``
    binding that contradicts a dimension the model fixes, are refused here with onnx's own reason.
    (Each op's rule in :mod:`rosenna.ops` checks again what onnx cannot see, see ``Op.shape_errors``.)
    """
    try:
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        if _spell_out_defaults(model):  # onnx 1.23 misses some defaults: see _spell_out_defaults
            return infer_shapes(model, path)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ModelError(f"{path}: ONNX shape inference rejects the model{_inference_node(reason)}: {reason}; "
                         "the model breaks a rule of its own opsets, so onnxruntime refuses it too: re-export it "
                         "with another opset (torch.onnx.export's opset_version, skl2onnx's target_opset, e.g. "
                         "{'': 17, 'ai.onnx.ml': 3}) or with the converter's options for that node's estimator "
                         "or layer") from None


def _spell_out_defaults(model):
    """Write the schema defaults of the attributes a node leaves out: onnx 1.23's shape inference
    reads some as missing when a node relies on the default (an attribute reference in a function
    body, ``axes`` of MeanVarianceNormalization; STFT's ``onesided``, taken as 0). Returns how many
    attributes were written (0: nothing to retry)."""
    from onnx import defs

    opsets = {o.domain or "": o.version for o in model.opset_import}
    written = 0
    for node in model.graph.node:
        try:
            schema = defs.get_schema(node.op_type, opsets.get(node.domain or "", 1), node.domain or "")
        except Exception:
            continue
        present = {a.name for a in node.attribute}
        for name, attr in sorted(schema.attributes.items()):
            if name not in present and attr.default_value.name:
                default = node.attribute.add()
                default.CopyFrom(attr.default_value)
                default.name = name
                written += 1
    return written


def _inference_node(reason):
    """`` at node 'NAME' (OP)`` from onnx's shape-inference message, or "" when it names none."""
    import re

    found = re.search(r"op_type:([A-Za-z0-9_.]+), node name: ([^)]*)\)", reason)
    return f" at node {found.group(2)!r} ({found.group(1)})" if found else ""


def _attribute_value(attr):
    value = helper.get_attribute_value(attr)
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    if isinstance(value, list) and value and isinstance(value[0], onnx.TensorProto):
        return [numpy_helper.to_array(v) for v in value]
    return value


def _static_shape(type_proto):
    if not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    dims = []
    for dim in type_proto.tensor_type.shape.dim:
        if not dim.HasField("dim_value"):
            return None
        dims.append(int(dim.dim_value))
    return tuple(dims)


def _elem_dtype(type_proto):
    elem = type_proto.tensor_type.elem_type
    return numpy_dtype(elem) if elem else None


def import_model(path, dims=None, freeze=None):
    """Load ``path`` and build the IR graph, with input dimensions bound by ``dims`` and the graph
    inputs named in ``freeze`` ({name: .npy path}) made constants holding the files' arrays."""
    model = load_model(path)
    _freeze_inputs(model, load_frozen(freeze), dims or {}, path)
    _bind_input_dims(model, dims or {}, path)
    model = infer_shapes(model, path)
    from rosenna.passes import control, functions  # subgraphs unrolled, ops known by their ONNX function body

    try:
        for step in (control.unroll_control_flow, functions.expand_functions, control.unroll_control_flow,
                     functions.expand_functions):
            model = step(model, lambda m: infer_shapes(m, path))
    except ModelError as exc:
        raise ModelError(str(exc) if str(exc).startswith(f"{path}: ") else f"{path}: {exc}") from None
    for info in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        shape = _static_shape(info.type)
        if shape is not None:
            check_size(int(np.prod(shape, dtype=object)), f"value {info.name!r} of shape {shape}", f"{path}: ")
    for init in model.graph.initializer:
        check_size(int(np.prod(tuple(init.dims), dtype=object)), f"initializer {init.name!r}", f"{path}: ")

    g = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    weights = {init.name: numpy_helper.to_array(init) for init in g.initializer}
    for sparse in g.sparse_initializer:
        raise ModelError(f"{path}: sparse initializer {sparse.values.name!r} is not supported; store it dense")

    values = {}
    for info in list(g.input) + list(g.value_info) + list(g.output):
        if info.name in weights:
            continue
        values[info.name] = Value(info.name, _static_shape(info.type), _elem_dtype(info.type))

    inputs = [i.name for i in g.input if i.name not in weights]
    if not inputs:
        raise ModelError(f"{path}: the model has no run-time input; there is nothing to compute per point")
    for name in inputs:
        dtype = values[name].dtype
        if dtype not in FLOAT_DTYPES + HELD_DTYPES + NARROW_DTYPES:
            if dtype in UNHELD_REASONS:
                fix = f"rosenna does not hold {dtype} values: {UNHELD_REASONS[dtype]}"
            elif dtype is not None and (dtype.kind == "f" or "float" in dtype.name):
                fix = f"export the model in float32 (e.g. model.float() in PyTorch) instead of {dtype}"
            else:
                fix = "feed it as float32, or make it a constant of the model"
            raise ModelError(f"{path}: input {name!r} has element type {dtype}; the generated code takes float32 "
                             f"or float64 inputs (integer, bool, float16, bfloat16 and float8 ones passed as the "
                             f"working float type) only; {fix}")
    output_dtypes = []
    for out in g.output:
        dtype = values[out.name].dtype if out.name in values else weights[out.name].dtype
        if dtype not in FLOAT_DTYPES + HELD_DTYPES + NARROW_DTYPES:
            why = f": {UNHELD_REASONS[dtype]}" if dtype in UNHELD_REASONS else ""
            raise ModelError(f"{path}: output {out.name!r} has element type {dtype}; rosenna produces float "
                             f"outputs (integer, bool, float16, bfloat16 and float8 ones as the working float type){why}")
        output_dtypes.append(dtype)
    model_dtypes = working_dtype([values[name].dtype for name in inputs], output_dtypes)
    if len(model_dtypes) > 1:
        raise ModelError(f"{path}: inputs mix float32 and float64; rosenna needs one float type per model")

    nodes = []
    for index, proto in enumerate(g.node):
        name = proto.name or f"{proto.op_type}_{index}"
        attrs = {a.name: _attribute_value(a) for a in proto.attribute}
        node = Node(proto.op_type, name, list(proto.input), list(proto.output), attrs, proto.domain)
        for out in node.outputs:
            if out and out not in values:
                values[out] = Value(out, None, None)
        nodes.append(node)

    producer = f"{model.producer_name} {model.producer_version}".strip()
    stem = os.path.splitext(os.path.basename(path))[0]
    return Graph(stem, inputs, [o.name for o in g.output], values, weights, nodes, opset,
                 model_dtypes.pop(), producer)


def model_digest(path):
    """A short hash of the model file's bytes, for provenance headers."""
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]


def dtype_name(dtype):
    return "float64" if np.dtype(dtype) == np.float64 else "float32"
