"""Render the loop IR into source lines of one language, as its table says.

The renderer knows two forms:

- per point: buffers are plain 1-D arrays, scalars plain locals;
- blocked (the host batch path): every run-time buffer holds a block of ``block`` points with the
  point index innermost (element ``e`` of point ``p`` at ``e*block + p``), scalars become arrays
  over the block, and each statement runs in an ``omp simd`` loop over the points, so the
  compiler puts points in SIMD lanes. Weights are shared by all points and indexed as before.
  A reduction (an innermost loop accumulating into scalars, e.g. a Gemm's column group, with the
  assignments before it) runs instead inside one ``omp simd`` loop over the points: the compiler
  vectorises that outer loop and keeps each accumulator's lanes in a vector register across the
  dot product. With the SIMD loop inside the dot product, every accumulator was stored to the
  stack and reloaded at each step (mlp128's batch ran at 0.6x onnxruntime's speed). Every value
  of the blocked form belongs to one point, so running a point's statements together computes
  the same thing.
"""

from rosenna.emit.lang import COMPOSITE
from rosenna.loopir import Assign, Bin, Comment, Fn, Idx, Loop, Note, Num, Ref, Select, Var, flag_store, walk, walk_expr

#: Fact of C and Fortran: the binding strength of the arithmetic operators.
_PREC = {"+": 1, "-": 1, "*": 2, "/": 2}


class Renderer:
    """Render statements for ``lang`` in ``precision``.

    Args:
        lang: a :class:`rosenna.emit.lang.Lang`.
        precision: "single" or "double".
        resolve: buffer name -> (identifier, element offset, is_runtime_buffer).
        block: points per block for the blocked form, or 0 for the per-point form.
        math: optional overrides of function names (e.g. vectorisable exp for the host batch).
        halves: blocked form: each reduction's SIMD loop over half the block, two vectors of points
            per weight loaded (the batch path); False: over the whole block, for a block of one
            vector (the per-point SIMD variant's 8 floats).
        fma: the function (a key of the language's math table) each accumulated product ``s += a * b``
            is written with, as ``fma(a, b, s)``: "fma" (one rounding, whatever the compiler's
            contraction flags), "madd" (C's ROSENNA_MADD: fma where the compiler says it is fast), or
            None (a multiply and an add): :data:`rosenna.emit.host_field.HOST_MADD` of the tuning's
            ``host_fma``.
    """

    POINT = "p"

    def __init__(self, lang, precision, resolve, block=0, math=None, halves=True, fma=None):
        self.lang = lang
        self.fma = fma
        self.precision = precision
        self.resolve = resolve
        self.block = block
        self.halves = halves and block > 1  # blocked form: reductions over two halves of the block
        self.math = math or {}
        self.lane_offset = 0  # blocked form: which half of the block a reduction statement serves
        self._note = None  # blocked form: the last nest's note (see _notes)
        self._commented = False  # blocked form: whether the last line written is a comment

    # -- expressions -----------------------------------------------------------------------------
    def index(self, idx, offset=0, scale=1):
        idx = (Idx.of(idx) + offset) * scale
        if self.block and scale > 1:
            idx = idx + Idx.of(self.POINT) + self.lane_offset
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
                return self.lang.subscript.format(buf=e.name, idx=self.index(Idx.of(self.POINT) + self.lane_offset))
            return e.name
        if isinstance(e, Ref):
            ident, offset, runtime = self.resolve(e.buf)
            scale = self.block if (self.block and runtime) else 1
            text = self.index(e.idx, offset, scale)
            if e.at is not None:  # a run-time offset, whole in the float type (see loopir.Ref)
                at = self.fn_name("index").format(self.expr(e.at))
                text += f" + {at}" if scale == 1 else f" + {scale}*{at}"
            return self.lang.subscript.format(buf=ident, idx=text)
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
            name = self.fn_name(e.name)
            if "{0}" in name:  # a template over the arguments (see emit/lang.py)
                wrapped = [text if _is_atom(arg) else f"({text})" for text, arg in zip(args, e.args)]
                text = name.format(*wrapped, one=self.literal(1.0), two=self.literal(2.0), half=self.literal(0.5))
                return f"({text})" if parent and text != wrapped[0] else text
            return f"{name}({', '.join(args)})"
        if isinstance(e, Select):
            return self.lang.select.format(lhs=self.expr(e.lhs, 3), rhs=self.expr(e.rhs, 3),
                                           a=self.expr(e.a, 3), b=self.expr(e.b, 3),
                                           cmp=self.lang.comparison(e.cmp))
        raise TypeError(f"cannot render {e!r}")

    # -- statements ------------------------------------------------------------------------------
    def lines(self, stmts, depth=0):
        if not self.block:
            return self._lines(stmts, depth)
        # Blocked: a nest's note (loopir.Note) goes over the SIMD loop its statements become.
        notes, plain, waiting = {}, [], []
        for stmt in stmts:
            if isinstance(stmt, Note):
                waiting.append(stmt.text)
            else:
                notes[id(stmt)], waiting = waiting, []
                plain.append(stmt)
        if len(plain) == len(stmts):
            notes = None  # a loop's body, or statements the notes have not met
        if self.block < 2:  # a block of one has no halves
            return self._lines(plain, depth, notes=notes)
        out = []
        for kind, group in _reduction_runs(plain):
            if kind == "reduction" and notes is not None:
                out += self._notes([text for s in group for text in notes.get(id(s), ())], depth)
            if kind == "reduction":
                out += self._lane_loop(group, depth)
            else:
                out += self._lines(group, depth, notes=notes)
        return out

    def _notes(self, texts, depth):
        """The comment lines over a nest of the blocked form: its statements' notes, else (a nest
        that goes on with the statements of the last note: a sum's store) that note again, unless
        a comment (an op's) is right above it."""
        commented, self._commented = self._commented, False
        if not texts and (self._note is None or commented):
            return []
        self._note = texts[-1] if texts else self._note
        return [self.lang.indent * depth + self.lang.comment.format(text=text) for text in texts or [self._note]]

    def _assignment(self, stmt, form):
        target = self.expr(stmt.target)
        product = stmt.expr
        if self.fma and stmt.accumulate and isinstance(product, Bin) and product.op == "*":
            fused = f"{self.fn_name(self.fma)}({self.expr(product.a)}, {self.expr(product.b)}, {target})"
            return self.lang.assign.format(target=target, expr=fused)
        return form.format(target=target, expr=self.expr(product))

    def simd(self):
        """The SIMD directive of the blocked form. simdlen: half a block (16 floats, 8 doubles:
        64 bytes) per vector iteration, so that GCC, whose tuning for AVX-512 CPUs otherwise
        prefers 256-bit vectors, uses 512-bit ones (mlp128 1.8x and gemm_big 1.5x faster on this
        repository's AVX-512 host); on AVX2 it is two 256-bit vectors, no slower."""
        if self.block > 1:
            return f"{self.lang.simd} simdlen({self.block // 2 if self.halves else self.block})"
        return self.lang.simd

    def _directive_pad(self, pad):
        return pad if self.lang.indent_directives else ""

    def _lane_loop(self, stmts, depth):
        """One SIMD loop over half the block's points around a reduction, each statement written
        for point p and point p + block/2: every weight loaded (broadcast) in the dot product then
        feeds two vectors of points, so FMAs rather than loads set the pace (four columns of
        one vector each took five loads per four FMAs)."""
        pad = self.lang.indent * depth
        half = self.block // 2 if self.halves else self.block
        return ([self._directive_pad(pad) + self.simd(), pad + self.lang.loop_open.format(var=self.POINT, extent=half, last=half - 1)]
                + self._lines(stmts, depth + 1, in_lane=True) + [pad + self.lang.loop_close])

    def _lines(self, stmts, depth, in_lane=False, notes=None):
        """``notes``: the blocked form's top level: each statement's notes (:meth:`lines`)."""
        out = []
        pad = self.lang.indent * depth
        run = []  # consecutive assignments: one SIMD loop over the block's points in blocked form
        run_notes = []

        def flush():
            if not run:
                return
            if self.block and not in_lane:
                if notes is not None:
                    out.extend(self._notes(run_notes, depth))
                    run_notes.clear()
                out.append(self._directive_pad(pad) + self.simd())
                out.append(pad + self.lang.loop_open.format(var=self.POINT, extent=self.block, last=self.block - 1))
                out.extend(pad + self.lang.indent + text for text in run)
                out.append(pad + self.lang.loop_close)
            else:
                out.extend(pad + text for text in run)
            run.clear()

        for stmt in stmts:
            if notes is not None and not (isinstance(stmt, Assign) and run):
                flush()  # where the statement starts a nest, its notes go over that nest
            if notes is not None:
                run_notes.extend(notes.get(id(stmt), ()))
            if flag_store(stmt) and not self.block:  # the fault flag: stored only by a faulting element
                target = Ref(stmt.target.buf, stmt.target.idx)
                cond = f"{self.expr(stmt.target.at, 3)} {self.lang.comparison('<')} {self.literal(0.5)}"
                run.append(self.lang.store_if.format(cond=cond, target=self.expr(target), expr=self.expr(stmt.expr)))
                continue
            if isinstance(stmt, Assign):
                form = self.lang.accumulate if stmt.accumulate else self.lang.assign
                for offset in ((0, self.block // 2) if in_lane and self.halves else (0,)):
                    self.lane_offset = offset
                    run.append(self._assignment(stmt, form))
                self.lane_offset = 0
                continue
            flush()
            if isinstance(stmt, Comment):
                out.append(pad + self.lang.comment.format(text=stmt.text))
                self._commented = True
            elif isinstance(stmt, Loop):
                if notes is not None:
                    out.extend(self._notes(run_notes, depth))
                    run_notes.clear()
                out.append(pad + self.lang.loop_open.format(var=stmt.var, extent=stmt.extent, last=stmt.extent - 1))
                if in_lane or self.block < 2:
                    out.extend(self._lines(stmt.body, depth + 1, in_lane))
                else:
                    out.extend(self.lines(stmt.body, depth + 1))
                out.append(pad + self.lang.loop_close)
            else:
                raise TypeError(f"cannot render {stmt!r}")
        flush()
        return out


def _innermost(stmt):
    return isinstance(stmt, Loop) and all(isinstance(s, Assign) for s in stmt.body)


def _arithmetic(stmt):
    """Only loads, stores, + - * / (no select, no function call: nothing that branches)."""
    return all(isinstance(e, (Num, Var, Ref, Bin)) for a in walk([stmt]) if isinstance(a, Assign)
               for e in (*walk_expr(a.target), *walk_expr(a.expr)))


def _reduction_runs(stmts):
    """Split a statement list of the blocked form into ("plain", [...]) and ("reduction", [...])
    groups. A reduction is a run of assignments and innermost loops that ends with an innermost
    loop using a scalar (a dot product accumulating into ``acc0``, ...), all plain arithmetic; the
    assignments after it
    (the bias and activation at the store) form a plain group: GCC vectorises no outer loop whose
    body branches, and a fused activation's select is a branch until if-conversion, which GCC
    does only in innermost loops."""
    groups, run = [], []

    def close():
        last = max((i for i, s in enumerate(run) if _innermost(s) and used_scalars([s])), default=-1)
        if last >= 0 and not all(_arithmetic(s) for s in run[:last + 1]):
            groups.append(("plain", run[:last + 1]))
        elif last >= 0:
            groups.append(("reduction", run[:last + 1]))
        if run[last + 1:]:
            groups.append(("plain", run[last + 1:]))
        run.clear()

    for stmt in stmts:
        if isinstance(stmt, Assign) or _innermost(stmt):
            run.append(stmt)
        else:
            close()
            groups.append(("plain", [stmt]))
    close()
    return groups


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


def scratch_used(plan, stmts):
    """The numbers ``i`` of the scratch buffers ``t<i>`` the statements load or store."""
    used = set()
    for stmt in walk(stmts):
        if isinstance(stmt, Assign):
            for e in (stmt.target, stmt.expr):
                used.update(int(plan.storage[r.buf][1][1:]) for r in walk_expr(e)
                            if isinstance(r, Ref) and plan.storage[r.buf][0] == "t")
    return used


def used_loop_vars(stmts):
    return sorted({stmt.var for stmt in walk(stmts) if isinstance(stmt, Loop)})


def buffer_ident(i):
    """The identifier of scratch buffer ``t<i>`` when it is a static whole-field buffer."""
    return f"ws{i}"


def resolver(plan, lang, block=0, whole_field=False):
    """How ``lang`` names the buffers of ``plan.storage``, for :class:`Renderer`: buffer name ->
    (identifier, element offset, is_runtime_buffer). The one resolver of every language and form.

    Args:
        block: the host batch path's block (x and y are then its transposed copies ``xb``, ``yb``).
        whole_field: ``<name>_infer_one``'s form: scratch buffers are static (``ws<i>``).
    Weights, and static scratch buffers, take the language's global name (model-prefixed in C).
    """
    def resolve(buf):
        kind, ident, offset = plan.storage[buf]
        if block and kind in "xy":
            ident = ident + "b"
        static = kind == "w" or (whole_field and kind == "t")
        if whole_field and kind == "t":
            ident = buffer_ident(int(ident[1:]))
        if static:
            ident = lang.symbol(plan.name, ident)
        return ident, offset, kind != "w"
    return resolve


def count(n, noun, plural=None):
    """``1 value``, ``3 values``: a number and its noun, in the generated files' comments."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
