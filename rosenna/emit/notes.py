"""The comment over each loop nest of the C and Fortran files: which node(s) of the model it
computes, their op, the shapes it reads and writes, and which elements of its output this nest
stores, e.g.::

    /* conv0+act0 (Conv+Relu) 1x2x64x64 -> 1x8x64x64: c0[0, 0:8, 1:63, 0] */

An op is often several nests (a padded conv: its interior, edges and corners; a jammed Gemm: its
column groups and remainder), so the element range is what tells them apart. Ranges are the
model's tensor coordinates, 0-based and end-exclusive as ONNX and NumPy write them, in every
language. Every name comes from the model file and goes through :func:`rosenna.quoting.comment_text`
(printable ASCII without ``*/``, ``!``, quotes or newlines) before it reaches a comment.

- :func:`annotate`: a statement list with a :class:`~rosenna.loopir.Comment` before each nest,
  for the renderers that take the plan's statements as they are (the per-point routine, the host
  batch block, a serial region);
- :func:`note`: one nest's text, for the renderers that rebuild the loops themselves (the
  whole-field regions, rosenna/emit/whole.py and rosenna/emit/host_field.py);
- :func:`op_of`: the planned op of each op comment, for the renderers that keep only its text.
"""

from rosenna.loopir import FAULT_FLAGS, OP_FLAGS, Assign, Comment, Loop, Note, Ref, Var, walk
from rosenna.quoting import comment_text

#: Fact of the comments' format, not of speed: elements of one axis listed one by one, at most (a
#: longer irregular set prints its bounds).
_LISTED = 6


def op_of(plan):
    """``{op comment text: planned op}`` over the plan's op comments."""
    return {stmt.text: stmt.op for stmt in plan.body if isinstance(stmt, Comment) and stmt.op is not None}


def _shape(shape):
    return "x".join(str(d) for d in shape) if shape else "scalar"


def header(op):
    """``conv0+act0 (Conv+Relu) 1x2x64x64 -> 1x8x64x64``: the node(s), the op, the shapes."""
    ins, outs = op.values
    shapes = f" {', '.join(_shape(s) for _, s in ins) or 'constants'} -> {', '.join(_shape(s) for _, s in outs)}"
    return f"{comment_text(op.name)} ({op.label}){shapes if outs else ''}"


def _stores(stmts, extents):
    """``[(buffer, Idx, extents of the loops around it)]`` for each store into a buffer."""
    out = []
    for stmt in stmts:
        if isinstance(stmt, Loop):
            out += _stores(stmt.body, {**extents, stmt.var: stmt.extent})
        elif isinstance(stmt, Assign) and isinstance(stmt.target, Ref) and stmt.target.buf not in (FAULT_FLAGS, OP_FLAGS):
            indirect = stmt.target.at is not None
            out.append((stmt.target.buf, None if indirect else stmt.target.idx, extents))
    return out


def _axes(idx, extents, shape):
    """The elements one store reaches, per axis of ``shape`` (a ``range`` each); None where the
    index is not a box of that shape (a coefficient that is no multiple of one axis' stride)."""
    strides, size = [], 1
    for dim in reversed(shape):
        strides.insert(0, size)
        size *= dim
    if idx is None or not 0 <= idx.const < max(size, 1):
        return None
    base, rest = [], idx.const
    for stride in strides:
        base.append(rest // stride)
        rest %= stride
    spans, steps = [0] * len(shape), [0] * len(shape)
    for var, coef in idx.terms:
        n = extents.get(var)
        if n is None or coef <= 0:
            return None
        if n == 1:
            continue
        axis = next((a for a, s in enumerate(strides) if coef % s == 0 and coef // s < shape[a]), None)
        if axis is None or (steps[axis] and steps[axis] != coef // strides[axis]):
            return None
        steps[axis] = coef // strides[axis]
        spans[axis] += steps[axis] * (n - 1)
    if any(b + s >= d for b, s, d in zip(base, spans, shape)):
        return None
    return [range(b, b + s + 1, st or 1) for b, s, st in zip(base, spans, steps)]


def _axis_text(elements):
    """``3``, ``1:63``, ``0:8:2``, ``{0, 5, 9}``, ``14 of 0..39``: an axis' elements, as a slice
    where they are one."""
    elements = sorted(elements)
    if len(elements) == 1:
        return str(elements[0])
    step = elements[1] - elements[0]
    if all(b - a == step for a, b in zip(elements, elements[1:])):
        return f"{elements[0]}:{elements[-1] + step}" + (f":{step}" if step > 1 else "")
    if len(elements) <= _LISTED:
        return "{" + ", ".join(map(str, elements)) + "}"
    return f"{len(elements)} of {elements[0]}..{elements[-1]}"


def _where(op, stores):
    """What the stores write: ``c0[0, 0:8, 1:63, 0]`` per output value (the model's coordinates)."""
    shapes = dict(op.values[1]) if op is not None else {}
    parts = []
    for buf in dict.fromkeys(buf for buf, _, _ in stores):
        name = comment_text(buf, 40)
        shape = shapes.get(buf)
        boxes = [_axes(idx, ext, shape) for b, idx, ext in stores if b == buf] if shape is not None else [None]
        if not shape:
            parts.append(name if shape is not None else f"{name} (a buffer of the op)")
        elif any(box is None for box in boxes):
            parts.append(f"{name} (elements by index)")
        else:
            axes = [set().union(*(box[a] for box in boxes)) for a in range(len(shape))]
            parts.append(f"{name}[{', '.join(_axis_text(axis) for axis in axes)}]")
    return ", ".join(parts) if parts else "sums kept in registers"


def note(op, stmts, extents=None):
    """The comment text of one nest: ``stmts`` run inside loops of ``extents`` (variable ->
    iterations; the nest's own loops are in ``stmts``); ``op`` the planned op (None: an output
    copy or code of no op)."""
    stores = _stores(stmts, dict(extents or {}))
    flags = not stores and any(isinstance(s, Assign) and isinstance(s.target, Ref) and s.target.buf == OP_FLAGS
                               for s in walk(stmts))
    where = "its index-fault flag set to 0" if flags else _where(op, stores)
    return f"{header(op)}: {where}" if op is not None else where


def _continues(prev, stmt):
    """Whether ``stmt`` belongs to the nest of ``prev``: a sum's start (``acc = 0``) and its loop,
    and the stores after it (``y[0] = acc + b`` after the loop). A nest starts at a loop or a
    sum's start, so that a note never falls between statements that share a SIMD loop."""
    if isinstance(prev, Assign) and isinstance(prev.target, Var):
        return True
    return isinstance(stmt, Assign) and isinstance(stmt.target, Ref)


def annotate(stmts, op=None):
    """``stmts`` with a comment (:func:`note`) before each loop nest and the statements that
    belong to it; ``op``: the planned op of statements before any op comment. The statements
    themselves are the same objects, in the same order. An output's copy keeps the one comment
    the plan put over it."""
    parts = []  # [planned op, statements, whether the part is a comment]
    for stmt in stmts:
        if isinstance(stmt, Comment):
            op = stmt.op
            parts.append((op, [stmt], True))
        elif parts and not parts[-1][2] and _continues(parts[-1][1][-1], stmt):
            parts[-1][1].append(stmt)
        else:
            parts.append((op, [stmt], False))
    out = []
    for part_op, part, comment in parts:
        copy = part_op is None and out and isinstance(out[-1], Comment)
        if not comment and not copy:
            out.append(Note(note(part_op, part)))
        out += part
    return out
