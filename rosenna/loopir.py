"""The loop IR that ops lower into, and that every emitter renders.

It is deliberately tiny: counted loops with constant extents, scalar locals, loads and stores into
named buffers at affine indices, and arithmetic with a fixed set of math functions. Indices are
0-based here; an emitter's language table says how a language writes them (Fortran adds 1).
Buffers are named by the IR value or weight they hold; the plan maps each to storage.
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Idx:
    """An affine integer index: ``const + sum(coef * var)``, with ``terms`` sorted by variable."""

    terms: tuple = ()
    const: int = 0

    @staticmethod
    def of(value):
        if isinstance(value, Idx):
            return value
        if isinstance(value, str):
            return Idx(((value, 1),), 0)
        return Idx((), int(value))

    def __add__(self, other):
        other = Idx.of(other)
        coefs = dict(self.terms)
        for var, coef in other.terms:
            coefs[var] = coefs.get(var, 0) + coef
        return Idx(tuple(sorted((v, c) for v, c in coefs.items() if c)), self.const + other.const)

    __radd__ = __add__

    def __mul__(self, factor):
        factor = int(factor)
        if factor == 0:
            return Idx()
        return Idx(tuple((v, c * factor) for v, c in self.terms), self.const * factor)

    __rmul__ = __mul__

    def __sub__(self, other):
        return self + Idx.of(other) * -1

    def substitute(self, var, value):
        """Replace ``var`` by the affine index ``value``."""
        out = Idx((), self.const)
        for v, c in self.terms:
            out = out + (Idx.of(value) * c if v == var else Idx(((v, c),), 0))
        return out


# Expressions ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Num:
    """A floating-point literal, emitted losslessly in the generated precision."""
    value: float


@dataclass(frozen=True)
class Ref:
    """Element ``idx`` of buffer ``buf`` (an IR value or weight name).

    ``at``, when given, is a run-time offset added to ``idx``: an expression of the float type
    holding a whole number (a gathered index, a tree's node number). The op that builds it keeps it
    inside the buffer (clamped, with the out-of-range case handled apart); renderers convert it to
    an integer with their table's ``index`` function. The whole-field analyses (rosenna.parallel)
    take a load at a run-time offset as reading the whole buffer, a store at one as writing it
    (its nest one serial region) (:func:`runtime_indexed`)."""
    buf: str
    idx: Idx
    at: object = None


@dataclass(frozen=True)
class Var:
    """A scalar local of the generated float type."""
    name: str


@dataclass(frozen=True)
class Bin:
    op: str  # one of + - * /
    a: object
    b: object


@dataclass(frozen=True)
class Fn:
    """A math function from the emitters' function table (exp, tanh, max, sigmoid, ...)."""
    name: str
    args: tuple


#: The comparisons a Select may make (C spelling; a language table may respell one).
COMPARISONS = (">", ">=", "<", "<=", "==", "!=")


@dataclass(frozen=True)
class Select:
    """``a if lhs (cmp) rhs else b``; ``cmp`` one of :data:`COMPARISONS` (``>`` by default).

    Every comparison with a NaN operand is false except ``!=``, as in C and Fortran."""
    lhs: object
    rhs: object
    a: object
    b: object
    cmp: str = ">"


# Statements -------------------------------------------------------------------------------------

@dataclass
class Loop:
    var: str
    extent: int
    body: list


@dataclass
class Assign:
    """``target = expr`` or, with ``accumulate``, ``target += expr``."""
    target: object  # Ref or Var
    expr: object
    accumulate: bool = False


@dataclass
class Comment:
    text: str
    #: The :class:`rosenna.plan.PlannedOp` whose loops follow (a comment the plan puts before an op).
    op: object = None


@dataclass
class Note(Comment):
    """The comment over one loop nest (rosenna/emit/notes.py). The blocked form of the host batch
    writes it over the loop that the statements after it become, so it never splits their SIMD
    loop the way an op's comment does."""


def add(a, b):
    return Bin("+", a, b)


def mul(a, b):
    return Bin("*", a, b)


class Builder:
    """Collects statements; hands out loop variables by nesting depth.

    ``loop(extent, body)`` calls ``body(var)`` where ``var`` is an :class:`Idx`; a loop of
    extent 1 is not emitted, its body runs once with the index 0. ``gemm_columns``: the outputs the
    Gemm lowering computes per pass over its input (the tuning's ``gemm_columns``).
    """

    def __init__(self, gemm_columns=4):
        self.gemm_columns = gemm_columns
        self.stmts = []
        self._stack = [self.stmts]
        self._depth = 0

    def emit(self, stmt):
        self._stack[-1].append(stmt)

    def assign(self, target, expr, accumulate=False):
        self.emit(Assign(target, expr, accumulate))

    def loop(self, extent, body):
        if extent == 1:
            body(Idx())
            return
        var = f"i{self._depth}"
        node = Loop(var, int(extent), [])
        self.emit(node)
        self._stack.append(node.body)
        self._depth += 1
        try:
            body(Idx.of(var))
        finally:
            self._depth -= 1
            self._stack.pop()

    def nest(self, shape, body):
        """Loop over every index of ``shape`` (row-major); ``body`` gets the list of indices."""
        idx = []

        def level(d):
            if d == len(shape):
                body(list(idx))
                return

            def inner(var):
                idx.append(var)
                level(d + 1)
                idx.pop()

            self.loop(shape[d], inner)

        level(0)


def strides(shape):
    """Row-major element strides of ``shape``."""
    out, step = [], 1
    for dim in reversed(shape):
        out.append(step)
        step *= dim
    return list(reversed(out))


def flat_index(indices, shape):
    """The row-major flat index of ``indices`` into ``shape``; size-1 axes contribute nothing."""
    total = Idx()
    for index, stride, dim in zip(indices, strides(shape), shape):
        if dim != 1:
            total = total + Idx.of(index) * stride
    return total


def broadcast_index(out_indices, out_shape, in_shape):
    """Flat index into an input of ``in_shape`` broadcast (numpy rules) to ``out_shape``."""
    offset = len(out_shape) - len(in_shape)
    total = Idx()
    for axis, (dim, stride) in enumerate(zip(in_shape, strides(in_shape))):
        if dim != 1:
            total = total + Idx.of(out_indices[axis + offset]) * stride
    return total


def walk(stmts):
    """Yield every statement, depth-first."""
    for stmt in stmts:
        yield stmt
        if isinstance(stmt, Loop):
            yield from walk(stmt.body)


def walk_expr(expr):
    """Yield ``expr`` and every sub-expression."""
    yield expr
    if isinstance(expr, Ref) and expr.at is not None:
        yield from walk_expr(expr.at)
    elif isinstance(expr, Bin):
        yield from walk_expr(expr.a)
        yield from walk_expr(expr.b)
    elif isinstance(expr, Fn):
        for arg in expr.args:
            yield from walk_expr(arg)
    elif isinstance(expr, Select):
        for part in (expr.lhs, expr.rhs, expr.a, expr.b):
            yield from walk_expr(part)


#: The scalar that counts a point's out-of-range indices (ops add to it, the plan sets it to 0
#: first); the host batch returns the INDEX status (rosenna.abi) when any point's is positive.
FAULT = "index_fault"


def loads(expr):
    """The buffers ``expr`` loads from."""
    return {sub.buf for sub in walk_expr(expr) if isinstance(sub, Ref)}


def element_of(expr, env, index):
    """``expr`` with each load of element ``index`` of a buffer in ``env`` replaced by that
    buffer's expression (``env``: buffer -> expression, None for one that cannot be replaced);
    None where ``expr`` loads anything else: another element, a run-time offset, a loop variable."""
    if isinstance(expr, Num):
        return expr
    if isinstance(expr, Ref):
        return env.get(expr.buf) if expr.idx == index and expr.at is None else None
    if isinstance(expr, Bin):
        a, b = element_of(expr.a, env, index), element_of(expr.b, env, index)
        return None if a is None or b is None else Bin(expr.op, a, b)
    if isinstance(expr, Fn):
        args = [element_of(arg, env, index) for arg in expr.args]
        return None if any(a is None for a in args) else Fn(expr.name, tuple(args))
    if isinstance(expr, Select):
        parts = [element_of(getattr(expr, k), env, index) for k in ("lhs", "rhs", "a", "b")]
        return None if any(p is None for p in parts) else Select(*parts, expr.cmp)
    return None


def counts_faults(stmts):
    """Whether the statements count out-of-range indices (use the :data:`FAULT` scalar)."""
    return any(isinstance(sub, Var) and sub.name == FAULT for stmt in walk(stmts) if isinstance(stmt, Assign)
               for expr in (stmt.target, stmt.expr) for sub in walk_expr(expr))


def runtime_indexed(stmts):
    """Whether any statement loads or stores at a run-time offset (a :class:`Ref` with ``at``)."""
    return any(isinstance(sub, Ref) and sub.at is not None for stmt in walk(stmts) if isinstance(stmt, Assign)
               for expr in (stmt.target, stmt.expr) for sub in walk_expr(expr))


#: The scalar a scatter counts its own out-of-range indices in (every element of its output is
#: NaN when it is positive); set to 0 before the scatter's updates.
OP_FAULT = "bad"

#: The buffer of the whole-field form's fault flag (:func:`flag_faults`): element 0 is set to 1 by
#: every element whose index was outside its axis.
FAULT_FLAGS = "__index_faults"
#: The buffer of the whole-field form's scatter flags (:func:`flag_faults`): element 2k stands for
#: the k-th scatter's :data:`OP_FAULT`.
OP_FLAGS = "__scatter_faults"


def flag_store(stmt):
    """Whether ``stmt`` is one of the whole-field form's conditional flag stores (:func:`flag_faults`):
    ``flags[i + ok] = 1``, made only where ``ok`` is 0."""
    return (isinstance(stmt, Assign) and isinstance(stmt.target, Ref) and stmt.target.buf in (FAULT_FLAGS, OP_FLAGS)
            and stmt.target.at is not None)


def _replaced(e, name, by):
    """``e`` with every :class:`Var` ``name`` replaced by the expression ``by``."""
    if isinstance(e, Var):
        return by if e.name == name else e
    if isinstance(e, Ref):
        return e if e.at is None else Ref(e.buf, e.idx, _replaced(e.at, name, by))
    if isinstance(e, Bin):
        return Bin(e.op, _replaced(e.a, name, by), _replaced(e.b, name, by))
    if isinstance(e, Fn):
        return Fn(e.name, tuple(_replaced(a, name, by) for a in e.args))
    if isinstance(e, Select):
        return Select(*(_replaced(x, name, by) for x in (e.lhs, e.rhs, e.a, e.b)), e.cmp)
    return e


def flag_faults(stmts):
    """The statements as the whole-field form runs them: a point's count of faults (the
    :data:`FAULT` scalar, private to a thread there) becomes a flag in device memory that every
    faulting element sets, ``flags[ok] = 1`` for its ``FAULT += 1 - ok``: element 0 when the index
    was out of range, element 1 (never read) when it was not. The renderers store only where
    ``ok`` is 0 (``if (ok < 0.5) flags[0] = 1``: no element in range touches the flag, so the
    threads of a large gather do not all write one word). Every faulting thread stores the same
    value with a plain store, so threads may meet there in any order (no atomic, no reduction), and
    a region stays parallel. The count's initialisation is dropped; the routine reads element 0
    back once per call. A scatter's own count (:data:`OP_FAULT`) becomes the pair ``2k`` of the
    :data:`OP_FLAGS` buffer likewise (the k-th scatter's, set to 0 where the count was), so that its
    columns may run in parallel and the NaN it decides is read from memory. Statements without a
    count are kept as they are (the same objects). Returns ``(statements, scatters)``."""
    scatters = [0]

    def flagged(stmt, buf, at):
        e = stmt.expr  # 1 - ok
        ok = e.b if isinstance(e, Bin) and e.op == "-" and e.a == Num(1.0) else Bin("-", Num(1.0), e)
        return Assign(Ref(buf, Idx.of(at), at=ok), Num(1.0))

    def rewrite(body):
        out = []
        for stmt in body:
            current = Ref(OP_FLAGS, Idx.of(2 * (scatters[0] - 1)))
            if isinstance(stmt, Loop):
                inner = rewrite(stmt.body)
                same = len(inner) == len(stmt.body) and all(a is b for a, b in zip(inner, stmt.body))
                out.append(stmt if same else Loop(stmt.var, stmt.extent, inner))
            elif isinstance(stmt, Assign) and isinstance(stmt.target, Var) and stmt.target.name == FAULT:
                if stmt.accumulate:
                    out.append(flagged(stmt, FAULT_FLAGS, 0))
            elif isinstance(stmt, Assign) and isinstance(stmt.target, Var) and stmt.target.name == OP_FAULT:
                if stmt.accumulate:
                    out.append(flagged(stmt, OP_FLAGS, current.idx))
                else:  # a scatter starts: its own flag
                    scatters[0] += 1
                    out.append(Assign(Ref(OP_FLAGS, Idx.of(2 * (scatters[0] - 1))), stmt.expr))
            elif isinstance(stmt, Assign) and any(isinstance(e, Var) and e.name == OP_FAULT for e in walk_expr(stmt.expr)):
                out.append(Assign(stmt.target, _replaced(stmt.expr, OP_FAULT, current), stmt.accumulate))
            else:
                out.append(stmt)
        return out

    return rewrite(stmts), scatters[0]


def decimal_texts(values):
    """Each value of a float32 or float64 array as the shortest decimal text that reads back to the
    same bits in its own type (numpy's shortest round-trip digits, Dragon4 ``unique``), positional
    (``0.5102539``, ``1.0``) or with an exponent (``1.5e-5``, ``3e38``) where that is shorter;
    "inf", "-inf" and "nan" are left for the language tables. Every text has a point or an
    exponent, so C reads it as a floating constant once a suffix is added."""
    array = np.asarray(values)
    flat = array.astype(np.float64 if array.dtype == np.float64 else np.float32).ravel()
    # numpy's own text of an array (its shortest digits, written in C) is already this spelling
    # for a value that is not whole and lies in [0.01, 1e6) (float32) or [0.01, 1e16) (float64):
    # positional, and no exponent form is shorter there. The rest (zeros, whole numbers, tiny and
    # huge values, inf and NaN) one by one.
    texts = flat.astype(str).tolist()
    with np.errstate(invalid="ignore"):
        size = np.abs(flat)
        top = 1e16 if flat.dtype == np.float64 else 1e6
        others = ~((size >= 0.01) & (size < top) & (flat != np.trunc(flat)))
    for i in np.flatnonzero(others).tolist():
        texts[i] = _shortest(flat[i])
    return texts


def _shortest(value):
    """One finite or special float32 / float64 scalar as :func:`decimal_texts` spells it."""
    if not np.isfinite(value):
        return "nan" if np.isnan(value) else ("-inf" if value < 0 else "inf")
    if value != 0 and abs(value) < np.finfo(value.dtype).tiny:
        # A subnormal: gfortran reads a shortest text such as 1e-45 as an underflow to zero instead
        # of the nearest subnormal, so these keep every significant digit of their type.
        return f"{float(value):.{9 if value.dtype == np.float32 else 17}g}"
    mantissa, exponent = np.format_float_scientific(value, unique=True, trim="-").split("e")
    sign = "-" if mantissa.startswith("-") else ""
    digits, exp = mantissa.lstrip("-").replace(".", ""), int(exponent)  # value = d.ddd x 10^exp
    if exp >= 0:
        whole = digits[:exp + 1].ljust(exp + 1, "0")
        positional = f"{whole}.{digits[exp + 1:] or '0'}"
    else:
        positional = "0." + "0" * (-exp - 1) + digits
    scientific = f"{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}e{exp}"
    return sign + (scientific if len(scientific) < len(positional) else positional)
