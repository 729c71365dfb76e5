"""Render the loop IR into source lines of one language, as its table says.

The renderer knows two forms:

- per point: buffers are plain 1-D arrays, scalars plain locals;
- blocked (the host batch path): every run-time buffer holds a block of ``block`` points with the
  point index innermost (element ``e`` of point ``p`` at ``e*block + p``), scalars become arrays
  over the block, and each statement runs in an ``omp simd`` loop over the points, so the
  compiler puts points in SIMD lanes. Weights are shared by all points and indexed as before.
"""

from rosenna.emit.lang import COMPOSITE
from rosenna.kernel import Assign, Bin, Comment, Fn, Idx, Loop, Num, Ref, Select, Var, walk, walk_expr

_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


class Renderer:
    """Render statements for ``lang`` in ``precision``.

    Args:
        lang: a :class:`rosenna.emit.lang.Lang`.
        precision: "single" or "double".
        resolve: buffer name -> (identifier, element offset, is_runtime_buffer).
        block: points per block for the blocked form, or 0 for the per-point form.
        math: optional overrides of function names (e.g. vectorisable exp for the host batch).
    """

    POINT = "p"

    def __init__(self, lang, precision, resolve, block=0, math=None):
        self.lang = lang
        self.precision = precision
        self.resolve = resolve
        self.block = block
        self.math = math or {}

    # -- expressions -----------------------------------------------------------------------------
    def index(self, idx, offset=0, scale=1):
        idx = (Idx.of(idx) + offset) * scale
        if self.block and scale > 1:
            idx = idx + Idx.of(self.POINT)
        idx = idx + self.lang.index_base
        parts = []
        for var, coef in idx.terms:
            term = var if abs(coef) == 1 else f"{abs(coef)}*{var}"
            parts.append(("- " if coef < 0 else "+ ") + term)
        if idx.const or not parts:
            parts.append(("- " if idx.const < 0 else "+ ") + str(abs(idx.const)))
        text = " ".join(parts)
        return text[2:] if text.startswith("+ ") else "-" + text[2:]

    def literal(self, value):
        text = self.lang.literal(float(value), self.precision)
        return f"({text})" if text.startswith("-") else text

    def fn_name(self, name):
        return self.math.get(name) or self.lang.fn(name, self.precision)

    def expr(self, e, parent=0, right=False):
        if isinstance(e, Num):
            return self.literal(e.value)
        if isinstance(e, Var):
            if self.block:
                return self.lang.subscript.format(buf=e.name, idx=self.index(Idx.of(self.POINT)))
            return e.name
        if isinstance(e, Ref):
            ident, offset, runtime = self.resolve(e.buf)
            scale = self.block if (self.block and runtime) else 1
            return self.lang.subscript.format(buf=ident, idx=self.index(e.idx, offset, scale))
        if isinstance(e, Bin):
            prec = _PREC[e.op]
            text = f"{self.expr(e.a, prec)} {e.op} {self.expr(e.b, prec, right=True)}"
            if prec < parent or (right and prec == parent and e.op in "-/"):
                return f"({text})"
            return text
        if isinstance(e, Fn):
            args = [self.expr(a) for a in e.args]
            if e.name in COMPOSITE and e.name not in self.math:
                arg = args[0] if _is_atom(e.args[0]) else f"({args[0]})"
                text = COMPOSITE[e.name].format(arg, one=self.literal(1.0), exp=self.fn_name("exp"))
                return f"({text})" if parent else text
            return f"{self.fn_name(e.name)}({', '.join(args)})"
        if isinstance(e, Select):
            return self.lang.select.format(lhs=self.expr(e.lhs, 3), rhs=self.expr(e.rhs, 3),
                                           a=self.expr(e.a, 3), b=self.expr(e.b, 3))
        raise TypeError(f"cannot render {e!r}")

    # -- statements ------------------------------------------------------------------------------
    def lines(self, stmts, depth=0):
        out = []
        pad = self.lang.indent * depth
        run = []  # consecutive assignments: one SIMD loop over the block's points in blocked form

        def flush():
            if not run:
                return
            if self.block:
                out.append(pad + self.lang.simd)
                out.append(pad + self.lang.loop_open.format(var=self.POINT, extent=self.block, last=self.block - 1))
                out.extend(pad + self.lang.indent + text for text in run)
                out.append(pad + self.lang.loop_close)
            else:
                out.extend(pad + text for text in run)
            run.clear()

        for stmt in stmts:
            if isinstance(stmt, Assign):
                form = self.lang.accumulate if stmt.accumulate else self.lang.assign
                run.append(form.format(target=self.expr(stmt.target), expr=self.expr(stmt.expr)))
                continue
            flush()
            if isinstance(stmt, Comment):
                out.append(pad + self.lang.comment.format(text=stmt.text))
            elif isinstance(stmt, Loop):
                out.append(pad + self.lang.loop_open.format(var=stmt.var, extent=stmt.extent, last=stmt.extent - 1))
                out.extend(self.lines(stmt.body, depth + 1))
                out.append(pad + self.lang.loop_close)
            else:
                raise TypeError(f"cannot render {stmt!r}")
        flush()
        return out


def _is_atom(e):
    return isinstance(e, (Num, Var, Ref, Fn))


def used_scalars(stmts):
    """Names of the scalar locals the statements use, sorted."""
    names = set()
    for stmt in walk(stmts):
        if isinstance(stmt, Assign):
            for e in (stmt.target, stmt.expr):
                names.update(sub.name for sub in walk_expr(e) if isinstance(sub, Var))
    return sorted(names)


def used_loop_vars(stmts):
    return sorted({stmt.var for stmt in walk(stmts) if isinstance(stmt, Loop)})
